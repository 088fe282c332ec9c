"""The asyncio API, on ``redis.asyncio``: :class:`Locker`, :class:`Lock`
and :class:`Lease` with the same rules as the blocking API (same-token
retries, a lease budget counted from send times, a refresh after a ``WAIT``
grant, ``min_replicas``, a watchdog, a loss signal), on one server or a
Redis Cluster.

>>> import redis.asyncio, dlock.asyncio
>>> locker = dlock.asyncio.Locker(redis.asyncio.Redis(port=6379))
>>> async with locker.lock("orders:42", ttl=30, wait=5) as lease:
...     await storage.write(row, fence=lease.fence)

The watchdog is a task of the event loop the lease was acquired on; leave
the ``async with`` block (or ``await lease.release()``) on that loop.
**Cancellation**: a cancelled acquire leaves no hold and no waiter behind:
the waiting connection gets a ``RELEASE`` written behind its ``ACQUIRE`` and
is closed (the server drops the waiter, or frees a grant it handed over
meanwhile), and a ``RELEASE`` with the token is sent on another connection
in the background.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import warnings
import weakref
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.crc import key_slot

from ._lease import EXTENDED, FAILED, LOST, Renewal, budget_over, retry_pause
from ._node import _conn_settings, parse_slots, sentinel_of, split_addr
from ._single import OnRetry, Settings, commands, split_replies
from ._spec import (
    MAX_MS,
    REPLY_MARGIN,
    Duration,
    Key,
    Outage,
    Spec,
    call_deadline,
    check_token,
    new_token,
    now,
    seconds,
    to_ms,
    ttl_ms as to_ttl_ms,
)
from .errors import (
    ASK,
    MOVED,
    RETRY,
    DlockError,
    Failure,
    InvalidRequest,
    LockLost,
    NotAcquired,
    TooFewReplicas,
    Unavailable,
    classify,
    is_io_error,
    lost_master,
    unexpected,
)
from .locker import PER_THREAD, _UNSET, _redact, _replicas, _spec, decode_info

__all__ = ["Locker", "Lock", "Lease", "task_owner"]

T = TypeVar("T")
LONGEST = float(MAX_MS) / 1000
MAX_REDIRECTS = 5
Conn = Any

_NONCE = os.urandom(4).hex()
_HOST = socket.gethostname()
_task_ids: "weakref.WeakKeyDictionary[asyncio.Task, int]" = weakref.WeakKeyDictionary()
_task_counter = [0]
_task_lock = threading.Lock()
# Background cleanups (a cancelled acquire's RELEASE): kept referenced
# until done.
_background: "set[asyncio.Task]" = set()


def task_owner() -> str:
    """The default owner of a reentrant lock in asyncio: this host,
    process and task (a task is what nests ``async with`` blocks)."""
    task = asyncio.current_task()
    with _task_lock:
        n = _task_ids.get(task) if task is not None else None
        if n is None:
            _task_counter[0] += 1
            n = _task_counter[0]
            if task is not None:
                _task_ids[task] = n
    return f"{_HOST}:{os.getpid()}:{_NONCE}:task-{n}"


def _async_class(cls: type) -> type:
    """The redis.asyncio connection class of a (sync or async) one."""
    import redis.asyncio.connection as ac

    if cls.__module__.startswith("redis.asyncio"):
        return cls
    name = cls.__name__
    return getattr(ac, name, ac.Connection)


def _settings_of(client: Any) -> Tuple[type, Dict[str, Any]]:
    pool = getattr(client, "connection_pool", client)
    cls, kw = _conn_settings(_async_class(pool.connection_class), pool.connection_kwargs)
    sentinel = sentinel_of(pool.connection_kwargs)
    if sentinel is not None:
        if not pool.connection_class.__module__.startswith("redis.asyncio"):
            raise InvalidRequest(
                "a blocking Sentinel client: give the asyncio Locker a "
                "redis.asyncio.sentinel.Sentinel(...).master_for(name)"
            )
        if not getattr(sentinel, "is_master", True):
            raise InvalidRequest(
                "a Sentinel client for replicas (slave_for): locks are taken on the master, use master_for"
            )
        # The pool itself, not the weak proxy its connections get: the
        # locker's connections outlive the client it was given.
        kw["connection_pool"] = pool
    return cls, kw


async def _close(conn: Conn) -> None:
    try:
        await conn.disconnect()
    except BaseException:
        pass


def _abort(conn: Conn, then_send: Optional[bytes] = None) -> None:
    """Closes a connection without awaiting (in a cancelled task), after
    writing ``then_send`` behind what it sent: the transport flushes it
    before closing."""
    w = getattr(conn, "_writer", None)
    try:
        if w is not None:
            if then_send:
                w.write(then_send)
            w.close()
    except Exception:
        pass
    try:
        conn._reader = None
        conn._writer = None
        parser = getattr(conn, "_parser", None)
        if parser is not None:
            parser.on_disconnect()
    except Exception:
        pass


def _pack(conn: Conn, cmds: Sequence[Tuple]) -> bytes:
    return b"".join(conn.pack_commands(cmds))


async def _send(conn: Conn, cmds: Sequence[Tuple]) -> None:
    await conn.send_packed_command(conn.pack_commands(cmds), check_health=False)


async def _read_all(conn: Conn, n: int) -> List[Any]:
    out: List[Any] = []
    for _ in range(n):
        try:
            # The connection is this module's to close (a cancelled acquire
            # writes a RELEASE on it first).
            out.append(await conn.read_response(disconnect_on_error=False))
        except redis.exceptions.ResponseError as e:
            out.append(e)
    return out


async def _pipeline(conn: Conn, cmds: Sequence[Tuple]) -> List[Any]:
    await _send(conn, cmds)
    return await _read_all(conn, len(cmds))


class _Node:
    """One server and a pool of redis.asyncio connections of dlock's own
    (no redis-py retries; every operation bounded by a timeout)."""

    def __init__(self, cls: type, kwargs: Dict[str, Any], connect_timeout: float, max_idle: int = 64) -> None:
        self.cls = cls
        self.kwargs = kwargs
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._idle: List[Conn] = []
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
        return _Node(self.cls, kw, self.connect_timeout, self.max_idle)

    def failure(self, e: BaseException) -> Failure:
        return classify(e).at(self.addr)

    async def get(self, timeout: float) -> Conn:
        if self._idle:
            return self._idle.pop()
        t = max(min(timeout, self.connect_timeout), 0.001)
        kw = dict(self.kwargs)
        kw["socket_timeout"] = None
        kw["socket_connect_timeout"] = t
        conn = self.cls(**kw)
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
        conn._dlock_pooled = True
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            _abort(conn)

    def flush(self) -> None:
        idle, self._idle = self._idle, []
        for c in idle:
            _abort(c)

    async def with_conn(
        self,
        timeout: float,
        fn: Callable[[Conn], Awaitable[T]],
        on_cancel: Optional[Callable[[Conn], None]] = None,
    ) -> T:
        """Runs ``fn`` on a connection of its own within ``timeout``; the
        connection goes back to the pool only if ``fn`` succeeded or the
        server answered with an error reply. Cancelled: ``on_cancel(conn)``
        (or a plain abort) deals with the connection."""
        end = now() + timeout
        conn = await self.get(timeout)
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
        self.flush()


class _Topology:
    """One server, or the masters of a Redis Cluster's slots (see the
    blocking API's ``_node.Topology``)."""

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
    ) -> T:
        t = io + extra
        if self.single is not None:
            return await self.single.with_conn(t, lambda c: op(c, False), on_cancel)
        node = await self.master_for(key, io)
        asking = False
        for _ in range(MAX_REDIRECTS):
            try:
                a = asking
                return await node.with_conn(t, lambda c: op(c, a), on_cancel)
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


class _Backend:
    """A lease on one server (or one slot's master), for the asyncio API."""

    def __init__(self, topology: _Topology, spec: Spec, token: str, settings: Settings) -> None:
        self.topology = topology
        self.spec = spec
        self.token = token
        self.settings = settings

    def io_until(self, deadline: float, waiting: float) -> float:
        left = deadline - now() + REPLY_MARGIN
        return max(min(self.settings.io_timeout, left - waiting), 0.001)

    async def call(
        self,
        cmd: Tuple,
        durable: bool,
        io: float,
        extra: float,
        connected: Optional[List[bool]] = None,
        on_cancel: Optional[Callable[[Conn], None]] = None,
    ) -> Tuple[Any, Optional[int]]:
        durability = self.settings.min_replicas if durable else None
        if durability is not None:
            extra += durability[1]

        async def op(conn: Conn, asking: bool) -> Tuple[Any, Optional[int]]:
            try:
                replies = await _pipeline(conn, commands(asking, cmd, durability))
            except Exception as e:
                if connected is not None and is_io_error(e):
                    connected[0] = True
                raise
            r = split_replies(replies, asking, durability is not None)
            if connected is not None:
                connected[0] = True
            return r

        try:
            return await self.topology.run(self.spec.route_key(), io, extra, op, on_cancel)
        except Failure as f:
            if f.kind == RETRY and "no answer within" in str(f.error) and connected is not None:
                connected[0] = True  # sent, then timed out: it reached a server
            raise

    def check_replicas(self, acked: Optional[int]) -> None:
        mr = self.settings.min_replicas
        if mr is not None and acked is not None and acked < mr[0]:
            raise TooFewReplicas(acked, mr[0])

    async def acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry]) -> Optional[Tuple[int, float]]:
        try:
            return await self._acquire(wait_ms, on_retry)
        except asyncio.CancelledError:
            # Anything sent may have been granted: release with the token
            # in the background (this task is going away), then go.
            t = asyncio.ensure_future(self.abandon(now() + self.settings.io_timeout))
            _background.add(t)
            t.add_done_callback(_background.discard)
            raise

    async def _acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry]) -> Optional[Tuple[int, float]]:
        start = now()
        wait_deadline = None if wait_ms is None else start + wait_ms / 1000
        deadline = call_deadline(start, wait_ms, self.settings.retry_for)
        maybe_granted = False
        outage = Outage()
        release_packed: List[Optional[bytes]] = [None]

        def on_cancel(conn: Conn) -> None:
            # Cancelled while the ACQUIRE may be queued or granted: RELEASE
            # behind it on the same connection, then close (the server drops
            # a queued waiter; a grant made before it reads the close is
            # released by the RELEASE, which it runs after the ACQUIRE).
            try:
                release_packed[0] = _pack(conn, [self.spec.release_cmd(self.token)])
            except Exception:
                release_packed[0] = None
            _abort(conn, release_packed[0])

        while True:
            sent = now()
            w: Optional[int] = None
            if wait_deadline is not None:
                w = int((wait_deadline - sent) * 1000)
                if w <= 0:
                    w = None
            cmd = self.spec.acquire_cmd(self.token, w)
            waiting = (w or 0) / 1000
            io = self.io_until(deadline, waiting)
            connected = [False]
            try:
                reply, acked = await self.call(cmd, w is None, io, waiting, connected, on_cancel)
            except Failure as f:
                if f.kind == RETRY:
                    maybe_granted = True
                    if connected[0]:
                        outage = Outage()
                    pause = outage.next_pause(self.settings.retry_for, deadline)
                    if pause is None:
                        await self.abandon(deadline)
                        raise f.error from None
                    if on_retry is not None:
                        on_retry(f.error)
                    await asyncio.sleep(pause)
                    continue
                if maybe_granted:
                    await self.abandon(deadline)
                raise f.into_error() from None
            if reply is None:
                return None
            if not isinstance(reply, int):
                raise unexpected(reply)
            try:
                self.check_replicas(acked)
            except TooFewReplicas:
                await self.abandon(deadline)
                raise
            fence = reply
            break
        ttl = self.spec.ttl_ms / 1000
        if w is None:
            return fence, sent + ttl
        # A grant handed over while waiting started its lease at the
        # handoff, after this attempt was sent: counted from the send, the
        # budget ends no later than the server's deadline. A quick handoff
        # keeps that budget (most of the ttl is left); after a longer wait
        # (past a third of the ttl, when a watchdog would renew at once) or
        # when replicas must confirm the grant, refresh with the same token
        # and count from the refresh's send.
        if now() - sent <= ttl / 3 and self.settings.min_replicas is None:
            return fence, sent + ttl
        refresh_by = max(deadline, now() + REPLY_MARGIN)
        r = await self.extend_by(self.spec.ttl_ms, refresh_by)
        if r.kind == EXTENDED:
            return fence, r.until
        if r.kind == LOST:
            raise LockLost("the lease handed over while waiting ended before its refresh")
        await self.abandon(deadline)
        assert r.error is not None
        raise r.error

    async def abandon(self, deadline: float) -> None:
        deadline = min(deadline, now() + REPLY_MARGIN)
        cmd = self.spec.release_cmd(self.token)
        outage = Outage()
        while True:
            try:
                await self.call(cmd, False, self.io_until(deadline, 0.0), 0.0)
                return
            except Failure as f:
                if f.kind != RETRY:
                    return
                pause = outage.next_pause(LONGEST, deadline)
                if pause is None:
                    return
                await asyncio.sleep(pause)

    async def extend_by(self, ttl_ms: int, deadline: float) -> Renewal:
        cmd = self.spec.extend_cmd(self.token, ttl_ms)
        outage = Outage()
        while True:
            sent = now()
            try:
                reply, acked = await self.call(cmd, True, self.io_until(deadline, 0.0), 0.0)
            except Failure as f:
                if f.kind == RETRY:
                    pause = outage.next_pause(LONGEST, deadline)
                    if pause is not None:
                        await asyncio.sleep(pause)
                        continue
                return Renewal(FAILED, error=f.into_error())
            if reply == 1:
                try:
                    self.check_replicas(acked)
                except TooFewReplicas as e:
                    return Renewal(FAILED, error=e)
                return Renewal(EXTENDED, until=sent + ttl_ms / 1000)
            if reply == 0:
                return Renewal(LOST)
            return Renewal(FAILED, error=unexpected(reply))

    async def extend(self, ttl_ms: int) -> Renewal:
        return await self.extend_by(ttl_ms, now() + self.settings.retry_for)

    async def release(self, valid_until: float) -> bool:
        """As the blocking API judges it: a retry answered "not held" means
        an earlier attempt released the lease only if that attempt may have
        run (sent on a live connection, not answered with an error reply)
        and was sent within the budget."""
        cmd = self.spec.release_cmd(self.token)
        deadline = now() + self.settings.retry_for
        first_run: Optional[float] = None
        outage = Outage()
        dead_pooled = 0
        while True:
            sent: List[Optional[float]] = [None]
            dead = [False]

            async def op(conn: Conn, asking: bool) -> Any:
                probe = getattr(conn, "_dlock_pooled", False)
                cmds = commands(asking, cmd, None)
                t = now()
                if probe:
                    try:
                        await _send(conn, [("PING",)] + cmds)
                        await conn.read_response(disconnect_on_error=False)
                    except redis.exceptions.ResponseError:
                        pass
                    except Exception as e:
                        dead[0] = is_io_error(e) and not isinstance(e, redis.exceptions.TimeoutError)
                        raise
                else:
                    await _send(conn, cmds)
                sent[0] = t
                r = (await _read_all(conn, len(cmds)))[-1]
                if isinstance(r, Exception):
                    sent[0] = None
                    raise r
                return r

            try:
                reply = await self.topology.run(self.spec.route_key(), self.settings.io_timeout, 0.0, op)
            except Failure as f:
                if first_run is None:
                    first_run = sent[0]
                if f.kind != RETRY:
                    raise f.into_error() from None
                if dead[0] and dead_pooled < 10:
                    dead_pooled += 1
                    continue
                pause = outage.next_pause(LONGEST, deadline)
                if pause is None:
                    raise f.error from None
                await asyncio.sleep(pause)
                continue
            done = self.spec.released(reply)
            if done is None:
                raise unexpected(reply)
            if done:
                return True
            return first_run is not None and first_run < valid_until


OnLost = Callable[["Lease"], Any]


class Lease:
    """A lock held through the asyncio API: :attr:`fence`, :attr:`token`,
    :attr:`deadline` (``time.monotonic()``), :meth:`remaining`, :attr:`lost`
    and :attr:`lost_event` (an :class:`asyncio.Event`) as in the blocking
    API; ``await lease.extend(ttl)``, ``await lease.release()``,
    ``await lease.wait_lost(timeout)``. The watchdog (and the watch on the
    budget) is a task of the loop the lease was acquired on."""

    def __init__(
        self,
        backend: _Backend,
        fence: int,
        valid_until: float,
        watchdog: bool,
        on_lost: Optional[OnLost],
    ) -> None:
        self._b = backend
        self._fence = fence
        self._ttl_ms = backend.spec.ttl_ms
        self._valid_until = valid_until
        self._lost = False
        self._released = False
        self._event = asyncio.Event()
        self._changed = asyncio.Event()
        self._callbacks: List[Callable[[], Any]] = []
        self._renewing = asyncio.Lock()
        self._renews = watchdog
        self._task: Optional[asyncio.Task] = None
        if on_lost is not None:
            self._callbacks.append(lambda: on_lost(self))
        if now() >= valid_until:
            self._mark_lost()
        elif watchdog or on_lost is not None:
            self._watch()

    # --- state -----------------------------------------------------------------

    def _over(self, t: float) -> bool:
        return budget_over(self._lost, self._valid_until, t)

    def _mark_lost(self) -> None:
        if self._lost:
            return
        self._lost = True
        cbs, self._callbacks = self._callbacks, []
        for cb in cbs:
            try:
                cb()
            except Exception:
                import logging

                logging.getLogger("dlock").exception("dlock: on_lost callback failed")
        self._event.set()
        self._changed.set()

    def _watch(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(_watch(weakref.ref(self), self._changed, self._renews))

    @property
    def fence(self) -> int:
        return self._fence

    @property
    def fences(self) -> List[Optional[int]]:
        return [self._fence]

    @property
    def token(self) -> str:
        return self._b.token

    @property
    def resource(self) -> Key:
        return self._b.spec.resources[0]

    @property
    def resources(self) -> List[Key]:
        return list(self._b.spec.resources)

    @property
    def ttl(self) -> float:
        return self._ttl_ms / 1000

    @property
    def deadline(self) -> float:
        return self._valid_until

    def remaining(self) -> float:
        return max(0.0, self._valid_until - now())

    @property
    def lost(self) -> bool:
        return self._over(now())

    @property
    def released(self) -> bool:
        return self._released

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the lease is lost (answered 0, or the budget passed);
        asking for it starts the task that watches the budget."""
        if not self._lost:
            if now() >= self._valid_until:
                self._mark_lost()
            elif not self._released:
                self._watch()
        return self._event

    def add_lost_callback(self, fn: OnLost) -> None:
        if self._lost:
            fn(self)
            return
        self._callbacks.append(lambda: fn(self))
        if now() >= self._valid_until:
            self._mark_lost()
        elif not self._released:
            self._watch()

    async def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Waits until the lease is lost (or its budget passes) or
        ``timeout`` seconds pass; True if lost."""
        end = None if timeout is None else now() + seconds(timeout)
        while True:
            t = now()
            if self._over(t):
                self._mark_lost()
                return True
            if self._released or (end is not None and t >= end):
                return False
            until = self._valid_until if end is None else min(end, self._valid_until)
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(until - t, 0.0005))
            except asyncio.TimeoutError:
                pass

    # --- what the holder does -----------------------------------------------------

    def _apply(self, r: Renewal, ttl_ms: int) -> bool:
        if r.kind == EXTENDED:
            if self._over(now()):
                self._mark_lost()
                return False
            self._valid_until = r.until
            self._ttl_ms = ttl_ms
            self._changed.set()
            return True
        if r.kind == LOST:
            self._mark_lost()
            return False
        assert r.error is not None
        raise r.error

    async def extend(self, ttl: Optional[Duration] = None) -> bool:
        """Extends the lease to ``ttl`` seconds from now (default: the
        current ttl), counted from the send. False: it had already ended."""
        ms = self._ttl_ms if ttl is None else to_ttl_ms(ttl)
        async with self._renewing:
            if self._over(now()):
                self._mark_lost()
                return False
            return self._apply(await self._b.extend(ms), ms)

    async def release(self) -> bool:
        """Stops the watchdog (letting a renewal under way finish: never a
        renewal after the release), then releases. True: the lock was still
        held and is now free; False: it had already ended or its budget had
        passed."""
        if self._released:
            return False
        self._released = True
        self._changed.set()
        t = self._task
        if t is not None and t is not asyncio.current_task():
            try:
                await asyncio.shield(t)
            except BaseException:
                pass
        over = self._over(now())
        released = await self._b.release(self._valid_until) and not over
        if not released:
            self._mark_lost()
        return released

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        if not await self.release() and et is None:
            raise LockLost(f"the lease on {self.resource!r} was lost before its release")

    def __del__(self) -> None:
        if getattr(self, "_released", True):
            return
        self._released = True
        try:
            self._changed.set()
        except Exception:
            pass
        if not self._lost:
            warnings.warn(
                f"dlock lease on {self.resource!r} was never released; it ends with its ttl",
                ResourceWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        state = "released" if self._released else ("lost" if self.lost else "held")
        return f"<async Lease {self.resource!r} fence={self.fence} token={self.token} {state}>"


async def _watch(ref: "weakref.ref[Lease]", changed: asyncio.Event, renew: bool) -> None:
    """The task behind a lease: renews a third of the ttl after the last
    grant or renewal was sent, retries a failed renewal while the budget
    lasts, and marks the lease lost when the budget passes. Holds the lease
    only weakly between wake-ups: an abandoned lease is not renewed."""
    retry_under: Optional[float] = None
    retry_at = 0.0
    while True:
        lease = ref()
        if lease is None or lease._released or lease._lost:
            return
        t = now()
        if t >= lease._valid_until:
            lease._mark_lost()
            return
        if renew:
            if retry_under is not None and retry_under == lease._valid_until:
                due = retry_at
            else:
                due = lease._valid_until - (lease._ttl_ms - lease._ttl_ms // 3) / 1000
            wake = min(due, lease._valid_until)
        else:
            due = None
            wake = lease._valid_until
        if due is None or t < due:
            changed.clear()
            del lease
            try:
                await asyncio.wait_for(changed.wait(), max(wake - t, 0.0005))
            except asyncio.TimeoutError:
                pass
            continue
        async with lease._renewing:
            if lease._released or lease._lost:
                return
            if now() >= lease._valid_until:
                lease._mark_lost()
                return
            ttl, under = lease._ttl_ms, lease._valid_until
            try:
                r = await lease._b.extend(ttl)
            except Exception as e:
                r = Renewal(FAILED, error=DlockError(str(e)))
            if r.kind == EXTENDED:
                if not lease._over(now()):
                    lease._valid_until = r.until
                    retry_under = None
                    lease._changed.set()
                    continue
                lease._mark_lost()
                return
            if r.kind == LOST:
                lease._mark_lost()
                return
            retry_under, retry_at = under, now() + retry_pause(ttl)


class Locker:
    """Takes locks on one server or a Redis Cluster, from asyncio code:
    the same settings as :class:`dlock.Locker`. ``client`` is a
    ``redis.asyncio.Redis`` (its address and login are used; the locker
    keeps connections of its own), a ``redis.asyncio.cluster.RedisCluster``
    (see also :meth:`cluster`), a URL, or None for localhost."""

    def __init__(
        self,
        client: Union[None, str, "redis.asyncio.Redis"] = None,
        *,
        io_timeout: Duration = 2.0,
        retry_for: Duration = 2.0,
        min_replicas: Optional[int] = None,
        replicas_timeout: Duration = 1.0,
        watchdog: Optional[bool] = None,
        max_idle: int = 64,
        _seeds: Optional[List[_Node]] = None,
    ) -> None:
        self.settings = Settings(seconds(io_timeout), seconds(retry_for), _replicas(min_replicas, replicas_timeout))
        self.watchdog = watchdog
        io = self.settings.io_timeout
        if _seeds is not None:
            self.topology = _Topology(seeds=_seeds)
            return
        if client is None:
            client = "redis://localhost:6379/0"
        if isinstance(client, str):
            url = client
            try:
                client = redis.asyncio.Redis.from_url(url)
            except ValueError as e:
                raise InvalidRequest(f"{_redact(url)}: {e}") from None
        cluster_cls = getattr(getattr(redis.asyncio, "cluster", None), "RedisCluster", None)
        if cluster_cls is not None and isinstance(client, cluster_cls):
            # Its startup nodes' address and login; the slot map is read on
            # first use.
            nodes = list(client.nodes_manager.startup_nodes.values())
            if not nodes:
                raise InvalidRequest("no cluster node given")
            self.topology = _Topology(
                seeds=[
                    _Node(
                        *_conn_settings(_async_class(n.connection_class), n.connection_kwargs),
                        connect_timeout=io,
                        max_idle=max_idle,
                    )
                    for n in nodes
                ]
            )
            return
        if not hasattr(client, "connection_pool"):
            raise InvalidRequest(
                f"a Locker takes a redis.asyncio.Redis, a redis.asyncio.cluster.RedisCluster "
                f"or a URL, not {client!r}"
            )
        self.topology = _Topology(single=_Node(*_settings_of(client), connect_timeout=io, max_idle=max_idle))

    @classmethod
    def cluster(cls, urls: Sequence[str], **kw: Any) -> "Locker":
        """A locker on a Redis Cluster, from the URLs of some of its nodes
        (the slot map is read on first use). A set's resources must share a
        slot: use a hash tag."""
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise InvalidRequest("no cluster node given")
        io = seconds(kw.get("io_timeout", 2.0))
        max_idle = kw.pop("max_idle", 64)
        seeds = [
            _Node(*_settings_of(redis.asyncio.Redis.from_url(u)), connect_timeout=io, max_idle=max_idle)
            for u in urls
        ]
        return cls(None, _seeds=seeds, **kw)

    def close(self) -> None:
        """Closes the idle connections (the locker stays usable)."""
        self.topology.close()

    async def __aenter__(self) -> "Locker":
        return self

    async def __aexit__(self, *a: Any) -> None:
        self.close()

    def lock(
        self,
        resource: Key,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        shared: bool = False,
        limit: Optional[int] = None,
        owner: Optional[Key] = None,
        watchdog: Optional[bool] = None,
        on_lost: Optional[OnLost] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        min_replicas: Optional[int] = None,
        replicas_timeout: Optional[Duration] = None,
        on_retry: Optional[OnRetry] = None,
        raise_on_lost: bool = True,
    ) -> "Lock":
        """As :meth:`dlock.Locker.lock`, for ``async with`` and
        ``await lock.acquire()``."""
        spec = _spec(resource, ttl, shared, limit, owner)
        check_token(token)
        s = self.settings
        kw: Dict[str, Any] = {}
        if retry_for is not None:
            kw["retry_for"] = seconds(retry_for)
        if min_replicas is not None:
            kw["min_replicas"] = _replicas(min_replicas, replicas_timeout)
        elif replicas_timeout is not None and s.min_replicas is not None:
            kw["min_replicas"] = (s.min_replicas[0], seconds(replicas_timeout))
        if wait is not None:
            to_ms(wait, "wait")
        return Lock(self, spec, wait, blocking, watchdog, on_lost, token, s.copy(**kw) if kw else s, on_retry, raise_on_lost)

    def write_lock(self, resource: Key, **kw: Any) -> "Lock":
        return self.lock(resource, **kw)

    def read_lock(self, resource: Key, **kw: Any) -> "Lock":
        return self.lock(resource, shared=True, **kw)

    def semaphore(self, resource: Key, limit: int, **kw: Any) -> "Lock":
        return self.lock(resource, limit=limit, **kw)

    def reentrant_lock(self, resource: Key, owner: Optional[Key] = None, **kw: Any) -> "Lock":
        """Reentrant holds; the owner defaults to the acquiring task
        (:func:`task_owner`)."""
        return self.lock(resource, owner=PER_THREAD if owner is None else owner, **kw)

    def multi_lock(self, resources: Iterable[Key], **kw: Any) -> "Lock":
        res = list(resources)
        return self.lock(res if len(res) > 1 else (res[0] if res else ""), **kw)  # type: ignore[arg-type]

    async def extend_token(self, resource: Key, token: str, ttl: Duration) -> bool:
        if not isinstance(token, str) or not token:
            raise InvalidRequest("token must not be empty")
        spec = _spec(resource, ttl, False, None, None)
        r = await _Backend(self.topology, spec, token, self.settings).extend(spec.ttl_ms)
        if r.kind == EXTENDED:
            return True
        if r.kind == LOST:
            return False
        assert r.error is not None
        raise r.error

    async def release_token(self, resource: Key, token: str) -> bool:
        if not isinstance(token, str) or not token:
            raise InvalidRequest("token must not be empty")
        spec = _spec(resource, 1.0, False, None, None)
        return await _Backend(self.topology, spec, token, self.settings).release(now())

    async def info(self, resource: Key) -> Optional[Dict[str, Any]]:
        spec = _spec(resource, 1.0, False, None, None)

        async def op(conn: Conn, asking: bool) -> Any:
            r = (await _pipeline(conn, commands(asking, ("DLOCK.INFO", resource), None)))[-1]
            if isinstance(r, Exception):
                raise r
            return r

        try:
            v = await self.topology.run(spec.route_key(), self.settings.io_timeout, 0.0, op)
        except Failure as f:
            raise f.into_error() from None
        return decode_info(v)


class Lock:
    """One lock request for asyncio: ``async with lock as lease:`` (raises
    :class:`~dlock.NotAcquired` when not granted) or ``await
    lock.acquire()`` (the Lease, or None)."""

    def __init__(
        self,
        locker: Locker,
        spec: Spec,
        wait: Optional[Duration],
        blocking: bool,
        watchdog: Optional[bool],
        on_lost: Optional[OnLost],
        token: Optional[str],
        settings: Settings,
        on_retry: Optional[OnRetry],
        raise_on_lost: bool,
    ) -> None:
        self.locker = locker
        self.spec = spec
        self.wait = wait
        self.blocking = blocking
        self.watchdog = watchdog
        self.on_lost = on_lost
        self.token = token
        self.settings = settings
        self.on_retry = on_retry
        self.raise_on_lost = raise_on_lost
        self._stacks: "weakref.WeakKeyDictionary[Any, List[Lease]]" = weakref.WeakKeyDictionary()

    @property
    def resource(self) -> Key:
        return self.spec.resources[0]

    async def acquire(
        self,
        blocking: Optional[bool] = None,
        wait: Any = _UNSET,
        *,
        token: Optional[str] = None,
        watchdog: Optional[bool] = None,
    ) -> Optional[Lease]:
        """Acquires: the Lease, or None when busy (or the wait ran out).
        Cancelling it leaves no hold and no waiter behind."""
        check_token(token)
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, task_owner())
        b = self.blocking if blocking is None else blocking
        w = self.wait if wait is _UNSET else wait
        wait_ms = None if not b else (MAX_MS if w is None else to_ms(w, "wait"))
        backend = _Backend(self.locker.topology, spec, token or self.token or new_token(), self.settings)
        got = await backend.acquire(wait_ms, self.on_retry)
        if got is None:
            return None
        wd = watchdog if watchdog is not None else self.watchdog
        if wd is None:
            wd = bool(self.locker.watchdog)
        return Lease(backend, got[0], got[1], wd, self.on_lost)

    def _stack(self) -> List[Lease]:
        key = asyncio.current_task()
        st = self._stacks.get(key)
        if st is None:
            st = self._stacks[key] = []
        return st

    async def __aenter__(self) -> Lease:
        wd = self.watchdog
        if wd is None:
            wd = self.locker.watchdog if self.locker.watchdog is not None else True
        lease = await self.acquire(watchdog=wd)
        if lease is None:
            raise NotAcquired(f"{self.resource!r} is busy")
        self._stack().append(lease)
        return lease

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._stack().pop()
        released = await lease.release()
        if not released and et is None and self.raise_on_lost:
            raise LockLost(f"the lease on {self.resource!r} was lost before the block ended")

    def __repr__(self) -> str:
        return f"<async Lock {self.spec.resources!r}>"
