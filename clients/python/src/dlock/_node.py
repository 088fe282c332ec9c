"""One server: a pool of redis-py connections of dlock's own.

Every operation takes a connection of its own from the pool and gives it
back only if the operation ended cleanly, so a blocking ``ACQUIRE ... WAIT``
never delays a renewal or a release that runs meanwhile, and a connection
left in an unknown state (a timeout mid-reply) is never reused. Connections
never retry on their own (redis-py's retry policy is off): every retry is
dlock's, with the same token, within the call's deadline.

The routing of commands to servers (one, or a Redis Cluster's masters) is
:mod:`dlock._topology`'s.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

import redis

from .errors import (
    FATAL,
    RETRY,
    Failure,
    Unavailable,
    classify,
    is_io_error,
    lost_master,
)
from ._conn import (  # noqa: F401 (for the modules that send on a Node's connections)
    check,
    close,
    is_master,
    read_all,
    run_pipeline,
    send,
    set_timeout,
)
from ._owners import Owners, Ticket
from ._pool import Grant, Slots, check_max_idle, no_free_connection, phases
from ._settings import (  # noqa: F401 (the connection settings, for the modules that make Nodes)
    CAP_KEY,
    _conn_settings,
    check_settings,
    make_connection,
    parse_slots,
    refuse_asyncio_client,
    sentinel_of,
    settings_of,
    split_addr,
)
from ._process import pid
from ._spec import MAX_SOCKET_TIMEOUT, now

T = TypeVar("T")

Conn = Any  # a redis.connection.AbstractConnection

class Node:
    """One server: where it is, how to log in, and a pool of connections,
    at most ``max_connections`` of them (see :mod:`dlock._pool`)."""

    def __init__(
        self,
        cls: type,
        kwargs: Dict[str, Any],
        connect_timeout: float,
        max_idle: int = 64,
    ) -> None:
        kwargs = dict(kwargs)
        self.max_connections: Optional[int] = kwargs.pop(CAP_KEY, None)
        self.cls = cls
        self.kwargs = kwargs
        self.connect_timeout = connect_timeout
        self.max_idle = check_max_idle(max_idle)
        check_settings(cls, kwargs)
        self._slots = Slots(self.max_connections, max_idle)
        self._owners = Owners(self._slots)
        self._lock = threading.Lock()
        self._pid = pid()
        #: Set for a ``Sentinel.master_for`` client's server: the master is
        #: found again on every new connection.
        self.sentinel = sentinel_of(kwargs)
        if self.sentinel is not None:
            self.addr = f"sentinel master {self.sentinel.service_name!r}"
        elif "path" in kwargs:
            self.addr = str(kwargs["path"])
        else:
            self.addr = f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"

    def sibling(self, host: str, port: int) -> "Node":
        """The same login (and cap) at another address (a cluster node named
        by a redirect or the slot map)."""
        kw = dict(self.kwargs)
        kw["host"] = host
        kw["port"] = port
        kw[CAP_KEY] = self.max_connections
        return Node(self.cls, kw, self.connect_timeout, self.max_idle)

    def connect(self, within: float) -> Conn:
        """A new connection, handshake included, within ``within`` (at most
        the connect timeout): a paused server cannot hold the caller."""
        t = max(min(within, self.connect_timeout), 0.001)
        kw = dict(self.kwargs)
        kw["socket_timeout"] = t
        kw["socket_connect_timeout"] = t
        conn = make_connection(self.cls, kw)
        try:
            conn.connect()
            if self.sentinel is not None:
                # A sentinel that has not seen a failover names the demoted
                # master, now a replica: ask the server itself.
                found = f"{conn.host}:{conn.port}"
                if not is_master(conn):
                    raise redis.exceptions.ConnectionError(
                        f"{found}, named by the sentinels as master {self.sentinel.service_name!r}, "
                        "is not a master (a failover in progress)"
                    )
                self.addr = found
        except BaseException:
            close(conn)
            raise
        return conn

    def _check_fork(self) -> None:
        """In a forked child, the pool's connections are the parent's
        sockets: a command sent on one would interleave with the parent's.
        They are closed on this side only (redis-py's ``disconnect`` in
        another process closes its descriptor and never shuts the socket
        down), and the lock, which another thread may have held at the
        fork, is made anew."""
        if self._pid == pid():
            return
        inherited = self._slots.idle
        self._lock = threading.Lock()
        self._slots = Slots(self.max_connections, self.max_idle)
        self._owners = Owners(self._slots)
        self._pid = pid()
        for c in inherited:
            c._dlock_node = None
            try:
                c.disconnect()
            except Exception:
                pass

    def give_back(self, conn: Conn) -> None:
        """A connection in a known state goes back to the pool."""
        if self._pid != pid():
            self._check_fork()
        if getattr(conn, "_dlock_slots", None) is not self._slots:
            # Not this pool's (any more): a parent's, after a fork.
            close(conn)
            return
        conn._dlock_pooled = True
        waited = conn._dlock_waits
        conn._dlock_waits = False
        with self._lock:
            self._owners.drop(conn._dlock_ticket)
            extra = self._slots.put_back(conn, waited)
        self._close_extra(extra)

    def _close_extra(self, extra: Optional[Conn]) -> None:
        """Closes an idle connection the pool has no room for."""
        if extra is not None:
            extra._dlock_node = None
            close(extra)

    def forget(self, conn: Conn) -> None:
        """``conn``, taken from this pool, is being closed."""
        conn._dlock_node = None
        if getattr(conn, "_dlock_slots", None) is not self._slots or self._pid != pid():
            return  # counted in a pool of the parent's, before a fork
        waited = conn._dlock_waits
        conn._dlock_waits = False
        with self._lock:
            self._owners.forget(conn._dlock_ticket, waited)

    def failure(self, e: BaseException) -> Failure:
        return classify(e).at(self.addr)

    def get(self, timeout: float, waits: float = 0.0) -> Conn:
        """A connection whose reads and writes give up after ``timeout``:
        an idle one (marked ``_dlock_pooled``), or a new one. ``waits``:
        the seconds the command waits on the server (``ACQUIRE ... WAIT``);
        such commands may hold all connections but one. When the cap allows
        none now, the caller waits in line for one (see :func:`phases`)."""
        if self._pid != pid():
            self._check_fork()
        waits_slot = waits > 0
        with self._lock:
            ok, conn, ticket = self._owners.take(waits_slot)
        if not ok:
            conn, waits_slot, ticket = self._wait_in_line(timeout, waits)
        if conn is None:
            try:
                conn = self.connect(timeout)
            except Exception as e:
                with self._lock:
                    self._owners.forget(ticket, waits_slot)
                raise self.failure(e) from None
            except BaseException:
                with self._lock:
                    self._owners.forget(ticket, waits_slot)
                raise
            conn._dlock_pooled = False
            conn._dlock_ticket = ticket
        conn._dlock_node = self
        conn._dlock_slots = self._slots
        conn._dlock_waits = waits_slot
        set_timeout(conn, timeout)
        return conn

    def _wait_in_line(self, timeout: float, waits: float) -> Tuple[Optional[Conn], bool, Optional[Ticket]]:
        """A connection (None: a slot to open one in) once the cap allows,
        whether it counts as a waiting command's, and the slot's owner; see
        :func:`phases`."""
        owners = self._owners
        start = now()
        long = False
        for long, until in phases(waits, timeout):
            ticket = Ticket()
            ready = threading.Lock()
            ready.acquire()
            with self._lock:
                ok, conn, owner = owners.take(long)
                if ok:
                    return conn, long, owner
                grant = Grant(long, owners.waker(ticket, long, ready))
                self._slots.enqueue(grant)
            try:
                ready.acquire(timeout=min(max(start + until - now(), 0.0), MAX_SOCKET_TIMEOUT))
            except BaseException:
                with self._lock:
                    extra = owners.give_up(grant, ticket, long)
                self._close_extra(extra)
                raise
            with self._lock:
                if grant.granted:
                    conn, owner = owners.claim(grant, ticket, long)
                    return conn, long, owner
                owners.give_up(grant, ticket, long)
        # A last look: a slot freed without reaching this caller (its owner
        # unwound, or a hand-over an exception cut short) is taken back now.
        with self._lock:
            ok, conn, owner = owners.take(long)
        if ok:
            return conn, long, owner
        raise Failure(RETRY, Unavailable(no_free_connection(self.addr, timeout, self.max_connections)))

    def flush(self) -> None:
        """Closes every idle connection: one of them broke (a restart, the
        server's idle timeout), so the others most likely did too."""
        self._check_fork()
        with self._lock:
            idle = self._slots.take_idle()
        for c in idle:
            c._dlock_node = None
            close(c)

    def with_conn(self, timeout: float, fn: Callable[..., T], *args: Any, waits: float = 0.0) -> T:
        """Runs ``fn(conn, *args)`` on a connection of its own (see
        :meth:`get`). The connection goes back to the pool only if ``fn``
        succeeded or the server answered with an error reply."""
        conn = self.get(timeout, waits)
        try:
            r = fn(conn, *args)
        except BaseException as e:
            if lost_master(e):
                # The server became a replica, or a master that lost its
                # replicas (its replica was promoted): its connections are
                # not used again, a new one finds the new master.
                close(conn)
                self.flush()
                raise self.failure(e) from None
            if isinstance(e, redis.exceptions.RedisError) and not is_io_error(e):
                self.give_back(conn)
                raise self.failure(e) from None
            close(conn)
            if isinstance(e, Exception) and is_io_error(e):
                if conn._dlock_pooled and not isinstance(e, (redis.exceptions.TimeoutError, socket.timeout)):
                    self.flush()
                raise self.failure(e) from None
            raise
        self.give_back(conn)
        return r

    def close(self) -> None:
        self.flush()


#: What other modules take from here (re-exported from _conn and _settings).
__all__ = [
    "CAP_KEY",
    "FATAL",
    "Conn",
    "Node",
    "_conn_settings",
    "check",
    "close",
    "is_master",
    "parse_slots",
    "read_all",
    "refuse_asyncio_client",
    "run_pipeline",
    "send",
    "sentinel_of",
    "set_timeout",
    "settings_of",
    "split_addr",
]
