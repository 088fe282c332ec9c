"""The asyncio side's connections: a pool of ``redis.asyncio`` connections
of dlock's own per server (no redis-py retries, every operation bounded by
a timeout), and the routing of a command to one server or a Redis
Cluster slot's master (``MOVED``/``ASK`` followed)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Optional,
    Tuple,
    TypeVar,
)

import redis
import redis.asyncio
from redis.crc import key_slot

from ._aconn import _abort, _drop, _pack, _pipeline, _read_all, _send  # noqa: F401 (used by the backend)
from ._pool import Grant, Slots, check_max_idle, no_free_connection, phases
from ._settings import (  # noqa: F401 (for the asyncio Locker)
    CAP_KEY,
    _async_class,
    _conn_settings,
    _settings_of,
    check_settings,
    make_connection,
    parse_slots,
    sentinel_of,
    split_addr,
)
from ._spec import now
from .errors import (
    ASK,
    MOVED,
    RETRY,
    Failure,
    Unavailable,
    classify,
    is_io_error,
    lost_master,
)

T = TypeVar("T")
MAX_REDIRECTS = 5
Conn = Any

class _Node:
    """One server and pools of redis.asyncio connections of dlock's own (no
    redis-py retries; every operation bounded by a timeout): one pool per
    event loop, since a connection works only on the loop that made it. A
    pool of a closed loop is dropped when a new loop comes; a forked child
    starts with none. ``max_connections`` caps each pool (see
    :mod:`dlock._pool`)."""

    def __init__(self, cls: type, kwargs: Dict[str, Any], connect_timeout: float, max_idle: int = 64) -> None:
        kwargs = dict(kwargs)
        self.max_connections: Optional[int] = kwargs.pop(CAP_KEY, None)
        self.cls = cls
        self.kwargs = kwargs
        self.connect_timeout = connect_timeout
        self.max_idle = check_max_idle(max_idle)
        check_settings(cls, kwargs)
        #: The pools, by event loop; the last one used, for a quick look.
        self._pools: Dict[asyncio.AbstractEventLoop, Slots] = {}
        self._last: Tuple[Optional[asyncio.AbstractEventLoop], Optional[Slots]] = (None, None)
        self._pools_lock = threading.Lock()
        self._pid = os.getpid()
        #: Set for a ``Sentinel.master_for`` client's server: the master is
        #: found again on every new connection.
        self.sentinel = sentinel_of(kwargs)
        if self.sentinel is not None:
            self.addr = f"sentinel master {self.sentinel.service_name!r}"
        elif "path" in kwargs:
            self.addr = str(kwargs["path"])
        else:
            self.addr = f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"

    def sibling(self, host: str, port: int) -> "_Node":
        kw = dict(self.kwargs)
        kw["host"], kw["port"] = host, port
        kw[CAP_KEY] = self.max_connections
        return _Node(self.cls, kw, self.connect_timeout, self.max_idle)

    def failure(self, e: BaseException) -> Failure:
        return classify(e).at(self.addr)

    def _slots(self) -> Slots:
        """The running loop's pool."""
        loop = asyncio.get_running_loop()
        last_loop, last = self._last
        if last_loop is loop and last is not None and self._pid == os.getpid():
            return last
        if self._pid != os.getpid():
            # A forked child: every pool holds the parent's sockets, and the
            # lock may have been held by another thread at the fork.
            pools, self._pools = self._pools, {}
            self._pools_lock = threading.Lock()
            self._last = (None, None)
            self._pid = os.getpid()
            for p in pools.values():
                for c in p.idle:
                    _drop(c)
        with self._pools_lock:
            slots = self._pools.get(loop)
            if slots is None:
                for other in [lp for lp in self._pools if lp.is_closed()]:
                    for c in self._pools.pop(other).idle:
                        _drop(c)
                slots = self._pools[loop] = Slots(self.max_connections, self.max_idle)
            self._last = (loop, slots)
            return slots

    async def get(self, timeout: float, waits: float = 0.0) -> Conn:
        """A connection of the running loop (an idle one, or a new one made
        within ``timeout``). ``waits``: the seconds the command waits on the
        server; such commands may hold all connections but one. When the cap
        allows none now, the caller waits in line for one (see
        :func:`dlock._pool.phases`)."""
        slots = self._slots()
        waits_slot = waits > 0
        ok, conn = slots.try_take(waits_slot)
        if not ok:
            conn, waits_slot = await self._wait_in_line(slots, timeout, waits)
        if conn is not None:
            conn._dlock_slots = slots
            conn._dlock_waits = waits_slot
            return conn
        t = max(min(timeout, self.connect_timeout), 0.001)
        kw = dict(self.kwargs)
        kw["socket_timeout"] = None
        kw["socket_connect_timeout"] = t
        conn = make_connection(self.cls, kw)
        # The slot is the new connection's from here: closing it frees it.
        conn._dlock_slots = slots
        conn._dlock_waits = waits_slot
        try:
            await asyncio.wait_for(self._connect(conn), t)
        except asyncio.TimeoutError:
            _abort(conn)
            raise Failure(RETRY, Unavailable(f"{self.addr}: no connection within {t:.3f} s")) from None
        except asyncio.CancelledError:
            _abort(conn)
            raise
        except Exception as e:
            _abort(conn)
            raise self.failure(e) from None
        conn._dlock_pooled = False
        return conn

    async def _wait_in_line(self, slots: Slots, timeout: float, waits: float) -> Tuple[Optional[Conn], bool]:
        """A connection (None: a slot to open one in) once the cap allows,
        and whether it counts as a waiting command's."""
        start = now()
        loop = asyncio.get_running_loop()
        for long, until in phases(waits, timeout):
            ok, conn = slots.try_take(long)
            if ok:
                return conn, long
            ready = loop.create_future()

            def wake(f: "asyncio.Future[None]" = ready) -> bool:
                if f.done():
                    return False
                f.set_result(None)
                return True

            grant = Grant(long, wake)
            slots.enqueue(grant)
            try:
                await asyncio.wait({ready}, timeout=max(start + until - now(), 0.0))
            except BaseException:
                # Cancelled: a grant made meanwhile goes to the next in line.
                if grant.granted:
                    if grant.conn is not None:
                        slots.put_back(grant.conn, long)
                    else:
                        slots.forget(long)
                else:
                    slots.leave(grant)
                    ready.cancel()
                raise
            if grant.granted:
                return grant.conn, long
            slots.leave(grant)
            ready.cancel()
        raise Failure(RETRY, Unavailable(no_free_connection(self.addr, timeout, self.max_connections)))

    async def _connect(self, conn: Conn) -> None:
        await conn.connect()
        if self.sentinel is not None:
            # A sentinel that has not seen a failover names the demoted
            # master, now a replica: ask the server itself.
            found = f"{conn.host}:{conn.port}"
            role = (await _pipeline(conn, [("ROLE",)]))[0]
            if isinstance(role, Exception):
                raise role
            if not (isinstance(role, list) and role and role[0] in (b"master", "master")):
                raise redis.exceptions.ConnectionError(
                    f"{found}, named by the sentinels as master {self.sentinel.service_name!r}, "
                    "is not a master (a failover in progress)"
                )
            self.addr = found

    def give_back(self, conn: Conn) -> None:
        """A connection in a known state goes back to its loop's pool."""
        slots = getattr(conn, "_dlock_slots", None)
        if slots is None or self._pid != os.getpid():
            _abort(conn)
            return
        conn._dlock_pooled = True
        conn._dlock_slots = None
        waited = conn._dlock_waits
        conn._dlock_waits = False
        extra = slots.put_back(conn, waited)
        if extra is not None:
            _abort(extra)

    def flush(self) -> None:
        """Closes the running loop's idle connections (one broke, so the
        others most likely did too)."""
        try:
            slots = self._slots()
        except RuntimeError:  # no running loop
            return
        for c in slots.take_idle():
            _abort(c)

    async def with_conn(
        self,
        timeout: float,
        fn: Callable[[Conn], Awaitable[T]],
        on_cancel: Optional[Callable[[Conn], None]] = None,
        waits: float = 0.0,
    ) -> T:
        """Runs ``fn`` on a connection of its own within ``timeout``; the
        connection goes back to the pool only if ``fn`` succeeded or the
        server answered with an error reply. Cancelled: ``on_cancel(conn)``
        (or a plain abort) deals with the connection."""
        end = now() + timeout
        conn = await self.get(timeout, waits)
        try:
            r = await asyncio.wait_for(fn(conn), max(end - now(), 0.001))
        except asyncio.TimeoutError:
            _abort(conn)
            raise Failure(RETRY, Unavailable(f"{self.addr}: no answer within {timeout:.3f} s")) from None
        except asyncio.CancelledError:
            if on_cancel is not None:
                on_cancel(conn)
            else:
                _abort(conn)
            raise
        except BaseException as e:
            if lost_master(e):
                # The server became a replica, or a master that lost its
                # replicas (its replica was promoted): its connections are
                # not used again, a new one finds the new master.
                _abort(conn)
                self.flush()
                raise self.failure(e) from None
            if isinstance(e, redis.exceptions.RedisError) and not is_io_error(e):
                self.give_back(conn)
                raise self.failure(e) from None
            _abort(conn)
            if isinstance(e, Exception) and is_io_error(e):
                if conn._dlock_pooled:
                    self.flush()
                raise self.failure(e) from None
            raise
        self.give_back(conn)
        return r

    def close(self) -> None:
        """Closes the idle connections of every pool: the running loop's
        at once, another live loop's on that loop, a closed loop's
        directly."""
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._pid != os.getpid():
            return  # a child: _slots() drops the parent's on first use
        with self._pools_lock:
            pools = list(self._pools.items())
        for loop, slots in pools:
            if loop is running:
                for c in slots.take_idle():
                    _abort(c)
            elif loop.is_closed():
                with self._pools_lock:
                    self._pools.pop(loop, None)
                for c in slots.idle:
                    _drop(c)
                slots.idle = []
            else:
                try:
                    loop.call_soon_threadsafe(_close_idle, slots)
                except RuntimeError:  # closed meanwhile
                    pass


def _close_idle(slots: Slots) -> None:
    for c in slots.take_idle():
        _abort(c)


class _Topology:
    """One server, or the masters of a Redis Cluster's slots (see the
    blocking API's ``_topology.Topology``)."""

    def __init__(self, single: Optional[_Node] = None, seeds: Optional[List[_Node]] = None) -> None:
        self.single = single
        self.seeds = seeds or []
        self._slots: List[Tuple[int, int, str]] = []
        self._nodes: Dict[str, _Node] = {}

    def node(self, addr: str) -> _Node:
        n = self._nodes.get(addr)
        if n is None:
            host, port = split_addr(addr)
            n = self._nodes[addr] = self.seeds[0].sibling(host, port)
        return n

    async def refresh(self, io: float) -> None:
        last: Optional[Failure] = None
        for node in list(self._nodes.values()) + self.seeds:
            try:
                reply = await node.with_conn(io, lambda c: _pipeline(c, [("CLUSTER", "SLOTS")]))
            except Failure as f:
                last = f
                continue
            if isinstance(reply[0], Exception):
                last = node.failure(reply[0])
                continue
            slots = parse_slots(reply[0], node.addr)
            if slots:
                self._slots = slots
                return
        raise last or Failure(RETRY, Unavailable("no cluster node returned a slot map"))

    async def master_for(self, key: bytes, io: float) -> _Node:
        slot = key_slot(key)

        def lookup() -> Optional[str]:
            for lo, hi, a in self._slots:
                if lo <= slot <= hi:
                    return a
            return None

        addr = lookup()
        if addr is None:
            await self.refresh(io)
            addr = lookup()
        if addr is None:
            raise Failure(RETRY, Unavailable(f"no master serves slot {slot}"))
        return self.node(addr)

    async def run(
        self,
        key: bytes,
        io: float,
        extra: float,
        op: Callable[[Conn, bool], Awaitable[T]],
        on_cancel: Optional[Callable[[Conn], None]] = None,
        waits: Optional[float] = None,
    ) -> T:
        """``waits``: how long the command waits on the server (default:
        ``extra``), see :meth:`_Node.get`; a waiting ``op`` computes its
        wait when it runs, from its own deadline."""
        t = io + extra
        if waits is None:
            waits = extra
        if self.single is not None:
            return await self.single.with_conn(t, lambda c: op(c, False), on_cancel, waits)
        node = await self.master_for(key, io)
        asking = False
        for _ in range(MAX_REDIRECTS):
            try:
                a = asking
                return await node.with_conn(t, lambda c: op(c, a), on_cancel, waits)
            except Failure as f:
                if f.kind == MOVED:
                    try:
                        await self.refresh(io)
                    except Failure:
                        pass
                    node, asking = self.node(f.addr), False
                elif f.kind == ASK:
                    node, asking = self.node(f.addr), True
                elif f.kind == RETRY and self.seeds:
                    try:
                        await self.refresh(io)
                    except Failure:
                        pass
                    raise
                else:
                    raise
        raise Failure(RETRY, Unavailable(f"more than {MAX_REDIRECTS} redirects for {key!r}"))

    def close(self) -> None:
        for n in ([self.single] if self.single else []) + list(self._nodes.values()) + self.seeds:
            n.close()


#: What other modules take from here (re-exported from _aconn and _settings).
__all__ = [
    "CAP_KEY",
    "Conn",
    "_Node",
    "_Topology",
    "_abort",
    "_async_class",
    "_conn_settings",
    "_drop",
    "_pack",
    "_pipeline",
    "_read_all",
    "_send",
    "_settings_of",
    "parse_slots",
    "sentinel_of",
    "split_addr",
]
