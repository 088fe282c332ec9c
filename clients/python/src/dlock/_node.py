"""One server (a pool of redis-py connections of dlock's own) and the
topology commands are routed through: one server, or the masters of a
Redis Cluster's slots.

Every operation takes a connection of its own from the pool and gives it
back only if the operation ended cleanly, so a blocking ``ACQUIRE ... WAIT``
never delays a renewal or a release that runs meanwhile, and a connection
left in an unknown state (a timeout mid-reply) is never reused. Connections
never retry on their own (redis-py's retry policy is off): every retry is
dlock's, with the same token, within the call's deadline.

Cluster routing is done here rather than by ``RedisCluster``, because a lock
needs what that client does not give: ``WAIT n`` on the very connection that
made the write, and a blocking ``ACQUIRE ... WAIT`` on a connection of its
own. ``MOVED`` refreshes the slot map and retries; ``ASK`` sends ``ASKING``
and the command to the importing node in one pipeline.
"""

from __future__ import annotations

import socket
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import redis
from redis.crc import key_slot

from .errors import (
    FATAL,
    RETRY,
    ASK,
    MOVED,
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

#: Redirects followed for one command before giving up (a slot map in flux
#: answers again on the caller's next retry).
MAX_REDIRECTS = 5

Conn = Any  # a redis.connection.AbstractConnection

class _Ticket:
    """The owner of one of a pool's slots: a connection carries its own for
    its whole life; a caller holds one while it opens a connection or
    stands in line for one. Only the owner keeps it alive, so when an
    exception from a signal handler unwinds a caller at any instant, the
    slot's owner dies with the caller's frame (or with the connection it
    dropped) and the pool takes the slot back."""

    __slots__ = ("__weakref__",)


def _waker(node: "Node", ticket: _Ticket, waits: bool, ready: Any) -> Callable[[], bool]:
    """What a grant in line does when a slot comes free (under the pool's
    lock): nothing if its caller is gone (its ticket died), else the slot
    becomes the ticket's and the caller is woken. ``ready`` is a lock the
    caller holds and waits to acquire again: unlike an Event, waking it
    takes no lock the caller's thread could have been left holding."""
    owner = weakref.ref(ticket)

    def wake() -> bool:
        t = owner()
        if t is None:
            return False
        node._own(t, waits)
        ready.release()
        return True

    return wake


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
        #: The owners of the slots in use (see :class:`_Ticket`), by id:
        #: ``(weak reference, counts as a waiting command's)``.
        self._out: Dict[int, Tuple["weakref.ref[_Ticket]", bool]] = {}
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
        self._out = {}
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
            self._out.pop(id(conn._dlock_ticket), None)
            extra = self._slots.put_back(conn, waited)
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
            self._out.pop(id(conn._dlock_ticket), None)
            self._slots.forget(waited)

    def _own(self, ticket: _Ticket, waits: bool) -> None:
        """A slot in use becomes ``ticket``'s (under the lock)."""
        self._out[id(ticket)] = (weakref.ref(ticket), waits)

    def _take(self, waits: bool) -> Tuple[bool, Optional[Conn], Optional[_Ticket]]:
        """:meth:`Slots.try_take` (under the lock), the slot owned at once:
        by the connection's ticket, or by a new one for the caller to open
        a connection with. When no slot is free, the slots whose owners died
        are taken back first."""
        ok, conn = self._slots.try_take(waits)
        if not ok and self._slots.cap is not None and self._reclaim():
            ok, conn = self._slots.try_take(waits)
        if not ok:
            return False, None, None
        ticket = conn._dlock_ticket if conn is not None else _Ticket()
        self._own(ticket, waits)
        return True, conn, ticket

    def _reclaim(self) -> bool:
        """Takes back the slots whose owners died without handing them back
        (an exception from a signal handler at any instant of a caller,
        even inside the bookkeeping): the slots in use are the live owners,
        the open ones those and the idle. True if any came free. Run only
        when the cap leaves no slot: O(connections)."""
        out = self._out
        for k in [k for k, (owner, _) in out.items() if owner() is None]:
            del out[k]
        slots = self._slots
        open_now = len(slots.idle) + len(out)
        waiting_now = sum(1 for _, waits in out.values() if waits)
        if (open_now, waiting_now) == (slots.open, slots.waiting):
            return False
        freed = open_now < slots.open or waiting_now < slots.waiting
        slots.open = open_now
        slots.waiting = waiting_now
        return freed

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
            ok, conn, ticket = self._take(waits_slot)
        if not ok:
            conn, waits_slot, ticket = self._wait_in_line(timeout, waits)
        if conn is None:
            try:
                conn = self.connect(timeout)
            except Exception as e:
                with self._lock:
                    self._out.pop(id(ticket), None)
                    self._slots.forget(waits_slot)
                raise self.failure(e) from None
            except BaseException:
                with self._lock:
                    self._out.pop(id(ticket), None)
                    self._slots.forget(waits_slot)
                raise
            conn._dlock_pooled = False
            conn._dlock_ticket = ticket
        conn._dlock_node = self
        conn._dlock_slots = self._slots
        conn._dlock_waits = waits_slot
        set_timeout(conn, timeout)
        return conn

    def _wait_in_line(self, timeout: float, waits: float) -> Tuple[Optional[Conn], bool, _Ticket]:
        """A connection (None: a slot to open one in) once the cap allows,
        whether it counts as a waiting command's, and the slot's owner; see
        :func:`phases`."""
        start = now()
        for long, until in phases(waits, timeout):
            ticket = _Ticket()
            ready = threading.Lock()
            ready.acquire()
            with self._lock:
                ok, conn, owner = self._take(long)
                if ok:
                    return conn, long, owner  # type: ignore[return-value]
                grant = Grant(long, _waker(self, ticket, long, ready))
                self._slots.enqueue(grant)
            ready.acquire(timeout=min(max(start + until - now(), 0.0), MAX_SOCKET_TIMEOUT))
            with self._lock:
                if grant.granted:
                    conn = grant.conn
                    if conn is None:
                        return None, long, ticket
                    # An idle connection handed over: owned by its own ticket.
                    self._out.pop(id(ticket), None)
                    self._own(conn._dlock_ticket, long)
                    return conn, long, conn._dlock_ticket
                self._slots.leave(grant)
                self._out.pop(id(ticket), None)
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


class Topology:
    """Where a resource's commands go: one server (``single``), or in Redis
    Cluster the master of the resource's slot."""

    def __init__(self, single: Optional[Node] = None, cluster: Optional["ClusterMap"] = None):
        self.single = single
        self.cluster = cluster

    def run(
        self,
        key: bytes,
        io_timeout: float,
        extra: float,
        op: Callable[[Conn, bool], T],
        on_node: Optional[Callable[[Node], None]] = None,
        waits: Optional[float] = None,
    ) -> T:
        """Runs ``op(conn, asking)`` on the server that owns ``key``; its
        replies are awaited for ``io_timeout + extra`` (``extra``: a
        blocking command's own wait, and a ``WAIT n`` for replicas); a slot
        map refresh gets ``io_timeout`` only. ``waits``: how long the
        command waits on the server (default: ``extra``), see
        :meth:`Node.get`; a waiting ``op`` computes its wait when it runs,
        from its own deadline. Raises :class:`Failure`."""
        t = io_timeout + extra
        if waits is None:
            waits = extra
        if self.single is not None:
            node = self.single
            if on_node:
                on_node(node)
            return node.with_conn(t, op, False, waits=waits)
        m = self.cluster
        assert m is not None
        node = m.master_for(key, io_timeout)
        asking = False
        for _ in range(MAX_REDIRECTS):
            if on_node:
                on_node(node)
            try:
                return node.with_conn(t, op, asking, waits=waits)
            except Failure as f:
                if f.kind == MOVED:
                    # The map is stale: learn the new one, and go where the
                    # server said meanwhile.
                    try:
                        m.refresh(io_timeout)
                    except Failure:
                        pass
                    node = m.node(f.addr)
                    asking = False
                elif f.kind == ASK:
                    node = m.node(f.addr)
                    asking = True
                elif f.kind == RETRY:
                    # A failover or a dead master: ask again next time.
                    try:
                        m.refresh(io_timeout)
                    except Failure:
                        pass
                    raise
                else:
                    raise
        raise Failure(RETRY, Unavailable(f"more than {MAX_REDIRECTS} redirects for {key!r}"))

    def nodes(self) -> List[Node]:
        if self.single is not None:
            return [self.single]
        assert self.cluster is not None
        return self.cluster.all_nodes()

    def close(self) -> None:
        for n in self.nodes():
            n.close()


class ClusterMap:
    """The slot map of a Redis Cluster, from ``CLUSTER SLOTS``, and a
    :class:`Node` per master."""

    def __init__(self, seeds: List[Node], io_timeout: float) -> None:
        self.seeds = seeds
        self._slots: List[Tuple[int, int, str]] = []
        self._nodes: Dict[str, Node] = {}
        self._lock = threading.Lock()
        self.refresh(io_timeout)

    def node(self, addr: str) -> Node:
        with self._lock:
            n = self._nodes.get(addr)
            if n is None:
                host, port = split_addr(addr)
                n = self.seeds[0].sibling(host, port)
                self._nodes[addr] = n
            return n

    def all_nodes(self) -> List[Node]:
        with self._lock:
            return list(self._nodes.values()) + list(self.seeds)

    def lookup(self, slot: int) -> Optional[str]:
        for lo, hi, addr in self._slots:
            if lo <= slot <= hi:
                return addr
        return None

    def master_for(self, key: bytes, io_timeout: float) -> Node:
        slot = key_slot(key)
        addr = self.lookup(slot)
        if addr is None:
            self.refresh(io_timeout)
            addr = self.lookup(slot)
        if addr is None:
            raise Failure(RETRY, Unavailable(f"no master serves slot {slot}"))
        return self.node(addr)

    def refresh(self, io_timeout: float) -> None:
        """Reads ``CLUSTER SLOTS`` from the first known node that answers."""
        last: Optional[Failure] = None
        for node in self.all_nodes():
            try:
                reply = node.with_conn(
                    io_timeout, lambda c: check(run_pipeline(c, [("CLUSTER", "SLOTS")]))[0]
                )
            except Failure as f:
                last = f
                continue
            slots = parse_slots(reply, node.addr)
            if slots:
                self._slots = slots
                return
        raise last or Failure(RETRY, Unavailable("no cluster node returned a slot map"))


#: What other modules take from here (re-exported from _conn and _settings).
__all__ = [
    "CAP_KEY",
    "FATAL",
    "ClusterMap",
    "Conn",
    "Node",
    "Topology",
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
