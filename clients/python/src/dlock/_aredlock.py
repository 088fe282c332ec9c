"""Redlock for asyncio: the blocking :class:`dlock.Redlock`'s rules (written
once, in ``_core/redlock.py``) driven by tasks instead of threads.

Every server of a round gets its command from a task of its own, its
answer due within the node timeout (plus the attempt's wait). A grant that
does not count is released on the connection that made it; a server that
did not answer in time, or whose task is cancelled, gets the ``RELEASE``
written behind its ``ACQUIRE`` and its connection closed, which also drops
a queued waiter. A cancelled acquire also sends a ``RELEASE`` with its token
to every server in the background, as the asyncio Locker does, once its
servers' tasks have ended.

A task's cancellation can be lost: on Python 3.11, ``asyncio.wait_for``
cancelled as its inner operation finishes returns that result. So no task
of an attempt relies on being cancelled: after every wait it looks whether
the attempt still listens (:class:`_Round`), and when not, undoes what it
sent on its own connection.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import redis
import redis.asyncio

from ._alease import Lease, OnLost
from ._alock import _calling_task, _owner_of
from ._alocker import Lock
from ._anode import Conn, _abort, _Node, _pack, _pipeline, _settings_of
from ._core.lease import Cap, cap_from
from ._core.redlock import EXTENDED, LOST, Acquiring, Attempt, judge_extend, quorum, tally_round
from ._lease import Renewal
from ._redlock_common import (
    MAX_TRIES,
    LockKinds,
    answer,
    check_limit,
    missed_error,
    place,
    refuse_duplicates,
    release_of,
    renewal_of,
    require_token,
    server_list,
)
from ._single import Settings
from ._spec import _max_hold, Duration, Key, Spec, check_token, new_token, now, seconds, to_ms
from .errors import (
    FATAL,
    RETRY,
    DlockError,
    Failure,
    InvalidRequest,
    Unavailable,
    classify,
    is_io_error,
    unexpected,
)
from .locker import PER_THREAD, _spec, decode_info

__all__ = ["Redlock", "RedlockLock", "RedlockLease"]

GRANTED, BUSY, FAIL = "granted", "busy", "failed"

# Background cleanups (a cancelled acquire's RELEASE): kept referenced
# until done.
_background: "Set[asyncio.Task[None]]" = set()


def _abort_releasing(conn: Conn, release: Tuple[Any, ...]) -> None:
    """Closes ``conn`` after writing ``release`` behind what it sent: the
    server runs it after the ``ACQUIRE`` (freeing a grant made meanwhile)
    and drops a queued waiter when it sees the close."""
    try:
        packed: Optional[bytes] = _pack(conn, [release])
    except Exception:
        packed = None
    _abort(conn, packed)


class _Round:
    """What the server tasks of one attempt share: whether the attempt is
    :meth:`over`, and ``held``, the granted connections by server, for the
    verdict."""

    __slots__ = ("_over", "held")

    def __init__(self) -> None:
        self._over = False
        self.held: Dict[int, Conn] = {}

    def end(self) -> None:
        self._over = True

    def over(self) -> bool:
        """The attempt no longer listens (decided, out of time, or
        cancelled): a task that finds it so after a wait goes, undoing its
        ``ACQUIRE`` if it sent one."""
        return self._over


def _unheard(addr: str) -> Tuple[str, Any]:
    return FAIL, Failure(RETRY, Unavailable(f"{addr}: the attempt was over"))


class _ANode:
    """One server of an asyncio Redlock, with its connection pool."""

    def __init__(self, node: _Node, timeout: float) -> None:
        self.node = node
        self.timeout = timeout
        self.addr = node.addr

    async def call(self, cmd: Tuple[Any, ...], reply_by: float) -> Any:
        """``cmd`` on this server, its reply due by ``reply_by``; one sent on
        a connection that turns out broken is sent again on another (every
        command sent this way is idempotent). Raises Failure."""
        last: Optional[Failure] = None
        for _ in range(MAX_TRIES):
            left = reply_by - now()
            if left <= 0:
                break
            conn = await self.node.get(left)
            left = reply_by - now()
            if left <= 0:
                self.node.give_back(conn)
                break
            try:
                r = (await asyncio.wait_for(_pipeline(conn, [cmd]), left))[0]
            except asyncio.TimeoutError:
                _abort(conn)
                break
            except asyncio.CancelledError:
                _abort(conn)
                raise
            except Exception as e:
                _abort(conn)
                if is_io_error(e):
                    last = classify(e).at(self.addr)
                    continue
                raise Failure(FATAL, DlockError(f"{self.addr}: {e!r}")) from None
            self.node.give_back(conn)
            if isinstance(r, Exception):
                raise classify(r).at(self.addr)
            return r
        raise last or Failure(RETRY, Unavailable(f"{self.addr}: no answer in time"))

    async def ask(self, i: int, spec: Spec, token: str, rules: Attempt, rnd: _Round) -> Tuple[str, Any]:
        """``ACQUIRE`` on this server for one attempt. A granted connection
        is left in ``rnd.held[i]`` for the verdict (kept or undone on it)."""
        release = spec.release_cmd(token)
        last: Optional[Failure] = None
        for _ in range(MAX_TRIES):
            left = rules.reply_by - now()
            if left <= 0 or rnd.over():
                break
            try:
                # A waiting ACQUIRE stays within max_connections - 1.
                conn = await self.node.get(left, (rules.wait_ms(now()) or 0) / 1000)
            except Failure as f:
                return FAIL, f
            if rnd.over():
                # Its cancellation lost to a connect that finished: nothing
                # was sent on the connection.
                self.node.give_back(conn)
                return _unheard(self.addr)
            left = rules.reply_by - now()
            if left <= 0:
                self.node.give_back(conn)
                break
            cmd = spec.acquire_cmd(token, rules.wait_ms(now()))
            try:
                reply = (await asyncio.wait_for(_pipeline(conn, [cmd]), left))[0]
            except asyncio.TimeoutError:
                # Maybe granted later, or queued.
                _abort_releasing(conn, release)
                return FAIL, Failure(RETRY, Unavailable(f"{self.addr}: no answer in time"))
            except asyncio.CancelledError:
                _abort_releasing(conn, release)
                raise
            except Exception as e:
                if is_io_error(e):
                    # A broken connection: again on another (same token).
                    _abort(conn)
                    last = classify(e).at(self.addr)
                    continue
                # Sent, maybe granted: undone behind it.
                _abort_releasing(conn, release)
                return FAIL, Failure(FATAL, DlockError(f"{self.addr}: {e!r}"))
            if rnd.over():
                # Answered as the attempt stopped listening (a cancellation
                # lost to the finished read): a grant or not, undone behind.
                _abort_releasing(conn, release)
                return _unheard(self.addr)
            if isinstance(reply, redis.exceptions.ResponseError):
                self.node.give_back(conn)
                return FAIL, classify(reply).at(self.addr)
            if isinstance(reply, int) and not isinstance(reply, bool):
                rnd.held[i] = conn
                return GRANTED, reply
            self.node.give_back(conn)
            if reply is None:
                return BUSY, None
            return FAIL, Failure(FATAL, unexpected(reply))
        return FAIL, last or Failure(RETRY, Unavailable(f"{self.addr}: not connected in time"))

    async def undo(self, conn: Conn, release: Tuple[Any, ...]) -> None:
        """Releases a grant that does not count, on the connection that
        made it (a ``RELEASE`` on another could overtake the ``ACQUIRE``)."""
        try:
            await asyncio.wait_for(_pipeline(conn, [release]), self.timeout)
        except asyncio.CancelledError:
            _abort_releasing(conn, release)
            raise
        except BaseException:
            _abort(conn)
            return
        self.node.give_back(conn)


async def _attempt(
    nodes: Sequence[_ANode], spec: Spec, token: str, wait: Optional[float], timeout: float
) -> Tuple[Attempt, Optional[float]]:
    """One attempt with one token: its rules' record, and the validity when
    it won. Cancelled, it leaves no hold and no waiter behind on the
    connections it used."""
    n = len(nodes)
    # Counted from before any command is sent: the validity runs from here.
    rules = Attempt(n, now(), wait, timeout)
    rnd = _Round()
    held = rnd.held
    release = spec.release_cmd(token)
    tasks = [asyncio.ensure_future(nodes[i].ask(i, spec, token, rules, rnd)) for i in range(n)]
    index: Dict["asyncio.Future[Tuple[str, Any]]", int] = {t: i for i, t in enumerate(tasks)}
    pending: Set["asyncio.Future[Tuple[str, Any]]"] = set(tasks)
    try:
        while pending and not rules.decided():
            left = rules.collect_until() - now()
            if left <= 0:
                break
            done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                kind, v = t.result()
                i = index[t]
                if kind == GRANTED:
                    rules.granted(i, v, now())
                elif kind == BUSY:
                    rules.busy(i)
                else:
                    rules.failed(i, v.error if v.kind == FATAL else None)
        if not rules.decided():
            rules.unanswered()
        # Servers still silent: RELEASE behind their ACQUIRE, then closed.
        rnd.end()
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        vu = rules.verdict(now(), spec.ttl_ms)
        undo = []
        for i in list(held):
            conn = held.pop(i)
            if vu is not None and rules.fences[i] is not None:
                nodes[i].node.give_back(conn)
            else:
                undo.append(nodes[i].undo(conn, release))
        if undo:
            await asyncio.gather(*undo)
        return rules, vu
    except asyncio.CancelledError:
        # Each task undoes its own ACQUIRE on its connection, whether its
        # cancellation reaches it or it finds the round over.
        rnd.end()
        for t in tasks:
            t.cancel()
        for i in list(held):
            _abort_releasing(held.pop(i), release)
        _abandon(nodes, spec, token, timeout, tasks, rules.reply_by)
        raise


def _abandon(
    nodes: Sequence[_ANode],
    spec: Spec,
    token: str,
    timeout: float,
    tasks: "Sequence[asyncio.Future[Tuple[str, Any]]]",
    reply_by: float,
) -> None:
    """A ``RELEASE`` with ``token`` to every server, in the background (the
    cancelled task is going away), once the attempt's server tasks have
    ended (by ``reply_by`` at the latest): sent earlier, on another
    connection, it could overtake an ``ACQUIRE`` still on its way."""

    async def run() -> None:
        if tasks:
            await asyncio.wait(tasks, timeout=max(reply_by - now(), 0.0) + timeout)
        for t in tasks:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: the attempt is gone
        release_by = now() + timeout
        cmd = spec.release_cmd(token)
        await asyncio.gather(*(n.call(cmd, release_by) for n in nodes), return_exceptions=True)

    t = asyncio.ensure_future(run())
    _background.add(t)
    t.add_done_callback(_background.discard)


class RedlockBackend:
    """A lock held on a quorum of servers: what an asyncio Redlock lease
    renews (``EXTEND`` everywhere) and releases."""

    def __init__(self, nodes: Sequence[_ANode], spec: Spec, token: str, timeout: float) -> None:
        self.nodes = nodes
        self.spec = spec
        self.token = token
        self.timeout = timeout
        #: A capped hold's floor (``max_hold``), from its round's first send.
        self.cap: Optional[Cap] = None

    async def _answers(self, cmd: Tuple[Any, ...]) -> Tuple[List[Tuple[str, Any]], float]:
        sent = now()
        reply_by = sent + self.timeout
        got = await asyncio.gather(*(n.call(cmd, reply_by) for n in self.nodes), return_exceptions=True)
        return [answer((not isinstance(v, BaseException), v)) for v in got], sent

    async def extend(self, ttl_ms: int) -> Renewal:
        answers, sent = await self._answers(self.spec.extend_cmd(self.token, ttl_ms))
        return renewal_of(tally_round(answers, judge_extend), sent, ttl_ms, now())

    async def release(self, valid_until: float) -> bool:
        answers, _ = await self._answers(self.spec.release_cmd(self.token))
        return release_of(tally_round(answers, self.spec.released))


class RedlockLease(Lease):
    """An asyncio :class:`~dlock.asyncio.Lease` held on a quorum:
    :attr:`fences` has each server's fence, in server order (None where the
    grant does not count); :attr:`fence` is the highest."""

    def __init__(
        self,
        backend: RedlockBackend,
        fences: List[Optional[int]],
        valid_until: float,
        watchdog: bool,
        on_lost: Optional[OnLost],
    ) -> None:
        self._redlock_fences = list(fences)
        top = max((f for f in fences if f is not None), default=0)
        super().__init__(backend, top, valid_until, watchdog, on_lost)  # type: ignore[arg-type]

    @property
    def fences(self) -> List[Optional[int]]:
        return list(self._redlock_fences)


class Redlock(LockKinds["RedlockLock"]):
    """:class:`dlock.Redlock` for asyncio: one lock over N independent
    servers, granted by a majority; the same constructor, lock kinds and
    rules. ``servers`` are URLs or ``redis.asyncio.Redis`` clients (their
    address and login are used). Use it from one event loop.

    >>> redlock = dlock.asyncio.Redlock(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    >>> async with redlock.lock("orders:42", ttl=10, wait=30) as lease:
    ...     await storage.write(row, fences=lease.fences)
    """

    DEFAULT_NODE_TIMEOUT = 0.1

    def __init__(
        self,
        servers: Sequence[Union[str, "redis.asyncio.Redis"]],
        *,
        node_timeout: Duration = DEFAULT_NODE_TIMEOUT,
        retry_for: Duration = 2.0,
        watchdog: Optional[bool] = None,
        max_idle: int = 16,
    ) -> None:
        self.node_timeout = max(seconds(node_timeout), 0.001)
        self.retry_for = seconds(retry_for)
        self.watchdog = watchdog
        self.settings = Settings(self.node_timeout, self.retry_for, None)
        nodes: List[_ANode] = []
        places: List[Tuple[str, List[Any], Any]] = []
        for s in server_list(servers, "redis.asyncio.Redis"):
            if isinstance(s, str):
                # Parsed by the blocking client, which makes no asyncio
                # object (Python 3.9's asyncio.Lock wants an event loop):
                # the address, login and TLS settings are all that is used.
                try:
                    s = redis.Redis.from_url(s)
                except ValueError as e:
                    raise InvalidRequest(str(e)) from None
            node = _Node(*_settings_of(s), connect_timeout=self.node_timeout, max_idle=max_idle)
            places.append(place(node.kwargs))
            refuse_duplicates(places)
            nodes.append(_ANode(node, self.node_timeout))
        self.nodes = nodes
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def _on_this_loop(self) -> None:
        """Idle connections belong to the loop that opened them: a Redlock
        used from another loop (a second ``asyncio.run()``) drops them
        before sending anything, rather than send on one and fail to read
        the reply (a grant held by nobody)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._loop is not None:
                self.close()
            self._loop = loop

    @property
    def quorum(self) -> int:
        """How many servers must grant: ``N//2 + 1``."""
        return quorum(len(self.nodes))

    def close(self) -> None:
        """Closes the idle connections (the Redlock stays usable)."""
        for n in self.nodes:
            n.node.close()

    async def __aenter__(self) -> "Redlock":
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
        raise_on_lost: bool = True,
    ) -> "RedlockLock":
        """As :meth:`dlock.Redlock.lock`, for ``async with`` and ``await
        lock.acquire()``."""
        spec = _spec(resource, ttl, shared, limit, owner)
        check_limit(len(self.nodes), limit)
        check_token(token)
        if wait is not None:
            to_ms(wait, "wait")
        s = self.settings if retry_for is None else self.settings.copy(retry_for=seconds(retry_for))
        return RedlockLock(self, spec, wait, blocking, watchdog, on_lost, token, s, None, raise_on_lost)  # type: ignore[arg-type]

    def _backend(self, resource: Key, token: str, ttl: Duration) -> RedlockBackend:
        require_token(token)
        return RedlockBackend(self.nodes, _spec(resource, ttl, False, None, None), token, self.node_timeout)

    async def extend_token(self, resource: Key, token: str, ttl: Duration) -> bool:
        """``EXTEND`` on every server: True when a quorum extended it, False
        when so many answered 0 that no quorum holds the token, otherwise
        :class:`~dlock.NoQuorum` (or the servers' own error)."""
        self._on_this_loop()
        b = self._backend(resource, token, ttl)
        r = await b.extend(b.spec.ttl_ms)
        if r.kind == EXTENDED:
            return True
        if r.kind == LOST:
            return False
        assert r.error is not None
        raise r.error

    async def release_token(self, resource: Key, token: str) -> bool:
        """``RELEASE`` on every server: True when a quorum released it."""
        self._on_this_loop()
        return await self._backend(resource, token, 1.0).release(now())

    async def info(self, resource: Key) -> List[Union[Optional[Dict[str, Any]], DlockError]]:
        """``DLOCK.INFO`` on every server, in server order (None where free,
        the error where a server did not answer)."""
        _spec(resource, 1.0, False, None, None)
        self._on_this_loop()
        reply_by = now() + self.node_timeout
        cmd = ("DLOCK.INFO", resource)
        got = await asyncio.gather(*(n.call(cmd, reply_by) for n in self.nodes), return_exceptions=True)
        out: List[Union[Optional[Dict[str, Any]], DlockError]] = []
        for v in got:
            if isinstance(v, Failure):
                out.append(v.into_error())
            elif isinstance(v, BaseException):
                out.append(DlockError(repr(v)))
            else:
                out.append(decode_info(v))
        return out

    async def acquire_spec(
        self,
        spec: Spec,
        wait_ms: Optional[int],
        retry_for: float,
        watchdog: bool,
        on_lost: Optional[OnLost],
    ) -> Optional[RedlockLease]:
        self._on_this_loop()
        timeout = self.node_timeout
        plan = Acquiring(now(), wait_ms, spec.ttl_ms, timeout, retry_for)
        while True:
            token = new_token()
            # Cancelled, the attempt undoes itself and releases its token.
            rules, vu = await _attempt(self.nodes, spec, token, plan.wait_for(now()), timeout)
            if vu is not None:
                backend = RedlockBackend(self.nodes, spec, token, timeout)
                backend.cap = cap_from(rules.first_send, spec.max_hold_ms)
                return RedlockLease(backend, rules.fences, vu, watchdog, on_lost)
            pause = plan.after_miss(rules.tally.miss(), now(), random.random())
            if pause is None:
                break
            await asyncio.sleep(pause)
        err = missed_error(rules.tally, spec.ttl_ms)
        if err is None:
            return None
        raise err


class RedlockLock(Lock):
    """A lock request over an asyncio :class:`Redlock`'s servers: ``async
    with lock as lease:`` (raises :class:`~dlock.NotAcquired` when not
    granted) or ``await lock.acquire()`` (the lease, or None). Cancelling
    it leaves no hold and no waiter on any server."""

    async def _take(
        self, task: "Optional[asyncio.Task[Any]]", wait_ms: Optional[int], token: Optional[str], watchdog: bool
    ) -> Optional[Lease]:
        """One acquisition over the servers (``token`` is not used: every
        attempt takes a fresh one). Cancelled, it leaves no hold and no
        waiter on any server."""
        if task is None:
            task = _calling_task()
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, _owner_of(task), _max_hold(spec), spec.priority, spec.permits)
        rl: Redlock = self.locker  # type: ignore[assignment]
        lease = await rl.acquire_spec(spec, wait_ms, self.settings.retry_for, watchdog, self.on_lost)
        if lease is not None:
            self._held(task).add(lease)
        return lease

    def __repr__(self) -> str:
        return f"<async RedlockLock {self.spec.resources!r}>"
