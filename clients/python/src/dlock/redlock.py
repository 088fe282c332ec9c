"""Redlock: one lock over N independent servers (masters, each with the
dlock module), granted when a majority grants it, as the Rust client does.
The rules below are written once, without I/O, in ``_core/redlock.py``;
this module drives them with a thread per server (``_aredlock.py`` with a
task per server).

- **Quorum.** ``ACQUIRE`` goes to every server at once (one thread each,
  connections from a pool per server), each reply due within the *node
  timeout* (default 100 ms), far below any sensible ttl. The lock is
  granted when ``N//2 + 1`` servers granted it, and it is valid until
  ``first_send + ttl - drift`` with ``drift = ttl/100 + 2 ms``, counted from
  before the first command was sent; a quorum whose validity is already
  over counts as a failure.
- **Failure.** Every grant that does not count is released on the very
  connection that acquired it (a ``RELEASE`` on another connection could
  overtake an ``ACQUIRE`` still buffered on its way); a server that did not
  answer in time gets the ``RELEASE`` written behind its ``ACQUIRE`` and its
  connection is closed, which also drops a queued waiter. Then a jittered
  pause, and a new attempt with a fresh token.
- **Waiting.** Each attempt waits in the servers' queues (``WAIT``) for a
  tenth of the ttl (at least the node timeout, at most a third of the ttl),
  never longer: holding some servers while waiting for others would block
  everyone. Then everything is released and the next attempt starts, until
  the wait is used up.
- **Renewal** sends ``EXTEND`` to every server, never a same-token acquire:
  it succeeds with a quorum of 1s, valid from the renewal's send time less
  the drift. The lease is *lost* when more than ``N - quorum`` servers
  answered 0; with fewer 0s but no quorum of 1s the renewal only failed.
- **Release** sends ``RELEASE`` to every server: True when a quorum
  released it.
- **Fences.** Every server keeps its own fence counter, so a grant has one
  fence per server (:attr:`~dlock.Lease.fences`, in server order, None where
  the grant does not count). A storage that remembers, per server, the
  highest fence it accepted and rejects a write below that mark on any
  server the write names, refuses a stale holder once a later holder has
  written; no clock is involved.
"""

from __future__ import annotations

import queue
import random
import socket
import threading
import time
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import redis

from ._core.redlock import (
    BUSY,
    EXTENDED,
    LOST,
    SLACK,
    Acquiring,
    Attempt,
    Tally,
    attempt_wait,
    judge_extend,
    quorum,
    tally_round,
    valid_until,
)
from ._core.lease import Cap, cap_from
from ._lease import Lease, OnLost, Renewal
from ._node import Node, close, read_all, run_pipeline, send, set_timeout, settings_of
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
from ._spec import _max_hold, Duration, Key, Spec, new_token, now, seconds
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
from .locker import PER_THREAD, Lock, _spec, decode_info, thread_owner

__all__ = ["Redlock", "RedlockLock"]
# The rules, re-exported for who used them from here.
_RULES = (Tally, attempt_wait, quorum, valid_until)

T = TypeVar("T")


# --- one server ------------------------------------------------------------------


def _timed_out(e: BaseException) -> bool:
    return isinstance(e, (redis.exceptions.TimeoutError, socket.timeout))


def _broken(e: BaseException) -> bool:
    """A connection that broke mid-command (not one that timed out): the
    command is retried on another, with the same token."""
    return is_io_error(e) and not _timed_out(e)


class RNode:
    """One server of a Redlock, with its connection pool."""

    def __init__(self, node: Node, timeout: float) -> None:
        self.node = node
        self.timeout = timeout
        self.addr = node.addr

    def call(self, cmd: Tuple[Any, ...], reply_by: float) -> Any:
        """``cmd`` on this server, its reply due by ``reply_by``. A command
        that cannot be sent before then is not sent at all; one sent on a
        connection that turns out broken is sent again on another (every
        command Redlock sends this way is idempotent). Raises Failure."""
        last: Optional[Failure] = None
        for _ in range(MAX_TRIES):
            left = reply_by - now()
            if left <= 0:
                break
            conn = self.node.get(left)
            left = reply_by - now()
            if left <= 0:
                self.node.give_back(conn)
                break
            set_timeout(conn, left)
            try:
                r = run_pipeline(conn, [cmd])[0]
            except BaseException as e:
                close(conn)
                if isinstance(e, Exception) and _broken(e) and now() < reply_by:
                    last = classify(e).at(self.addr)
                    continue
                if isinstance(e, Exception) and is_io_error(e):
                    raise classify(e).at(self.addr) from None
                raise
            self.node.give_back(conn)
            if isinstance(r, Exception):
                raise classify(r).at(self.addr)
            return r
        raise last or Failure(RETRY, Unavailable(f"{self.addr}: no answer in time"))


def fan_out(
    nodes: Sequence[RNode], until: float, f: Callable[[RNode], T]
) -> List[Optional[Tuple[bool, Any]]]:
    """Runs ``f`` on every server at once, one thread each, and collects
    what came back by ``until``, in server order: ``(True, value)``,
    ``(False, exception)``, or None (no answer by then). A thread still
    running then is left to finish on its own; it sends nothing after its
    command's own deadline."""
    q: "queue.SimpleQueue[Tuple[int, bool, Any]]" = queue.SimpleQueue()

    def run(i: int) -> None:
        try:
            q.put((i, True, f(nodes[i])))
        except BaseException as e:
            q.put((i, False, e))

    for i in range(len(nodes)):
        threading.Thread(target=run, args=(i,), name="dlock-redlock", daemon=True).start()
    out: List[Optional[Tuple[bool, Any]]] = [None] * len(nodes)
    for _ in range(len(nodes)):
        try:
            i, ok, v = q.get(timeout=max(until - now(), 0))
        except queue.Empty:
            break
        out[i] = (ok, v)
    return out


# --- one acquire attempt -----------------------------------------------------------

GRANTED, FAIL = "granted", "failed"


#: How often a worker holding a grant looks whether its attempt is decided.
_VERDICT_POLL = 0.0005


class _Verdict:
    """Which grants count, once the attempt is decided. The workers poll it
    rather than wait on a lock the calling thread takes too: an exception
    from a signal handler (an interrupt at any instant) can leave such a
    lock held by the calling thread (inside ``Event.set``), and the undo
    that follows would wait for it forever. An assignment is never left
    half done."""

    def __init__(self) -> None:
        self.kept: Optional[List[bool]] = None

    def decide(self, kept: List[bool]) -> None:
        self.kept = kept

    def keeps(self, i: int) -> bool:
        while True:
            kept = self.kept
            if kept is not None:
                return kept[i]
            time.sleep(_VERDICT_POLL)


class _Attempt:
    def __init__(self, spec: Spec, token: str, rules: Attempt) -> None:
        self.spec = spec
        self.token = token
        self.rules = rules
        self.reply_by = rules.reply_by
        self.verdict = _Verdict()


def _worker(i: int, node: RNode, at: _Attempt, q: "queue.SimpleQueue[Tuple[int, str, Any]]") -> None:
    """Acquires on one server and undoes the grant unless it counts.
    Reports exactly once."""
    release = at.spec.release_cmd(at.token)
    last: Optional[Failure] = None
    for _ in range(MAX_TRIES):
        left = at.reply_by - now()
        if left <= 0:
            break
        try:
            # A waiting ACQUIRE stays within max_connections - 1.
            conn = node.node.get(left, (at.rules.wait_ms(now()) or 0) / 1000)
        except Failure as f:
            q.put((i, FAIL, f))
            return
        left = at.reply_by - now()
        if left <= 0:
            node.node.give_back(conn)
            break
        w = at.rules.wait_ms(now())
        set_timeout(conn, left)
        try:
            send(conn, [at.spec.acquire_cmd(at.token, w)])
            reply = read_all(conn, 1)[0]
        except BaseException as e:
            if isinstance(e, Exception) and _timed_out(e):
                # Maybe granted later: RELEASE right behind it; closing the
                # connection then also drops a queued waiter.
                try:
                    set_timeout(conn, node.timeout)
                    send(conn, [release])
                except Exception:
                    pass
                close(conn)
                q.put((i, FAIL, Failure(RETRY, Unavailable(f"{node.addr}: {e}"))))
                return
            close(conn)
            if isinstance(e, Exception) and _broken(e):
                # Retried on another connection (unreported).
                last = classify(e).at(node.addr)
                continue
            q.put((i, FAIL, Failure(FATAL, DlockError(f"{node.addr}: {e!r}"))))
            raise
        if isinstance(reply, redis.exceptions.ResponseError):
            # An error reply: the connection is in a known state.
            node.node.give_back(conn)
            q.put((i, FAIL, classify(reply).at(node.addr)))
            return
        if isinstance(reply, int) and not isinstance(reply, bool):
            q.put((i, GRANTED, reply))
            if at.verdict.keeps(i):
                node.node.give_back(conn)
                return
            set_timeout(conn, node.timeout)
            try:
                run_pipeline(conn, [release])
                node.node.give_back(conn)
            except Exception:
                close(conn)
            return
        node.node.give_back(conn)
        if reply is None:
            q.put((i, BUSY, None))
        else:
            q.put((i, FAIL, Failure(FATAL, unexpected(reply))))
        return
    q.put((i, FAIL, last or Failure(RETRY, Unavailable(f"{node.addr}: not connected in time"))))


def _attempt(
    nodes: Sequence[RNode], spec: Spec, token: str, wait: Optional[float], timeout: float
) -> Tuple[Attempt, Optional[float]]:
    """One attempt: its rules' record, and the validity when it won. An
    exception on the calling thread (an interrupt) makes every grant not
    yet kept one to undo, then propagates; the caller sends the RELEASE."""
    n = len(nodes)
    # Counted from before any command is sent: the validity runs from here.
    rules = Attempt(n, now(), wait, timeout)
    at = _Attempt(spec, token, rules)
    q: "queue.SimpleQueue[Tuple[int, str, Any]]" = queue.SimpleQueue()
    threads: List[threading.Thread] = []
    try:
        for i in range(n):
            t = threading.Thread(target=_worker, args=(i, nodes[i], at, q), name="dlock-redlock", daemon=True)
            # Listed before start(): a start() interrupted may have started it.
            threads.append(t)
            t.start()
        while not rules.decided():
            try:
                i, kind, v = q.get(timeout=max(rules.collect_until() - now(), 0))
            except queue.Empty:
                rules.unanswered()
                break
            if kind == GRANTED:
                rules.granted(i, v, now())
            elif kind == BUSY:
                rules.busy(i)
            else:
                rules.failed(i, v.error if v.kind == FATAL else None)
        vu = rules.verdict(now(), spec.ttl_ms)
        if vu is not None:
            at.verdict.decide([f is not None for f in rules.fences])
            return rules, vu
        at.verdict.decide([False] * n)
    except BaseException:
        _undo_interrupted(at, threads, timeout)
        raise
    # Give the workers still running the time to undo a grant (on its own
    # connection) before the caller moves on, or exits.
    undo_by = rules.undo_by()
    for t in threads:
        t.join(max(undo_by - now(), 0))
    return rules, None


def _undo_interrupted(at: _Attempt, threads: Sequence[threading.Thread], timeout: float) -> None:
    """After an interrupt: no grant the workers still report counts, and
    they get a node timeout to undo theirs on the connection that made it
    (a RELEASE on another could overtake an ACQUIRE still on its way).
    Best effort: a second interrupt ends it."""
    try:
        at.verdict.decide([False] * len(at.rules.fences))
        until = min(at.rules.undo_by(), now() + timeout)
        for t in threads:
            if t.is_alive():
                t.join(max(until - now(), 0))
    except BaseException:  # noqa: B036 - the first interrupt is what propagates
        pass


def _abandon(nodes: Sequence[RNode], spec: Spec, token: str, timeout: float) -> None:
    """Best-effort ``RELEASE`` with ``token`` on every server, due within a
    node timeout: the grants of an acquire the caller will not get (they
    would otherwise hold for the ttl). A second interrupt ends it."""
    try:
        reply_by = now() + timeout
        cmd = spec.release_cmd(token)
        fan_out(nodes, reply_by + SLACK, lambda node: node.call(cmd, reply_by))
    except BaseException:  # noqa: B036 - the first interrupt is what propagates
        pass


def _interrupt_of(e: BaseException) -> BaseException:
    """What to propagate for ``e``: CPython's threading can turn an
    interrupt that lands inside its own lock handling (``Thread.start``,
    ``Condition.wait``) into ``RuntimeError: release unlocked lock``, the
    interrupt as its context; the interrupt is what the caller gets."""
    c = e.__context__
    if isinstance(e, RuntimeError) and "unlocked lock" in str(e) and c is not None:
        return c
    return e


class RedlockBackend:
    """A lock held on a quorum of servers: what a Redlock Lease renews and
    releases."""

    def __init__(self, nodes: Sequence[RNode], spec: Spec, token: str, timeout: float) -> None:
        self.nodes = nodes
        self.spec = spec
        self.token = token
        self.timeout = timeout
        #: A capped hold's floor (``max_hold``), from its round's first send.
        self.cap: Optional[Cap] = None
        #: Released for an acquire that was interrupted: a watchdog that
        #: got started meanwhile renews nothing.
        self.abandoned = False

    def _round(self, cmd: Tuple[Any, ...], judge: Callable[[Any], Optional[bool]]) -> Tuple[Tally, float]:
        sent = now()
        reply_by = sent + self.timeout
        answers = fan_out(self.nodes, reply_by + SLACK, lambda node: node.call(cmd, reply_by))
        return tally_round([answer(a) for a in answers], judge), sent

    def extend(self, ttl_ms: int) -> Renewal:
        """``EXTEND`` on every server; never a same-token acquire, which
        could grant again a server whose hold had ended."""
        if self.abandoned:
            return Renewal(LOST)
        tally, sent = self._round(self.spec.extend_cmd(self.token, ttl_ms), judge_extend)
        return renewal_of(tally, sent, ttl_ms, now())

    def release(self, valid_until: float) -> bool:
        """``RELEASE`` on every server: True if a quorum released it, False
        if so many answered "not held" that no quorum held it; otherwise
        :class:`~dlock.NoQuorum` (a server that did not answer keeps its
        hold until the ttl ends)."""
        tally, _ = self._round(self.spec.release_cmd(self.token), self.spec.released)
        return release_of(tally)


class Redlock(LockKinds["RedlockLock"]):
    """One lock over N independent servers (not replicas of each other, not
    one cluster), each with the dlock module, granted by a majority. The
    same lock kinds and Lease as :class:`~dlock.Locker` (``LIMIT`` above 1
    only with one server: majorities of independent servers cannot count
    permits).

    ``servers`` are URLs or ``redis.Redis`` clients; the same server given
    twice (also under two names) is refused, as it would count twice
    towards the quorum. ``node_timeout`` (default 100 ms) bounds each
    server's answer, connecting included: keep it far below the ttl.

    >>> redlock = Redlock(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
    >>> with redlock.lock("orders:42", ttl=10, wait=30) as lease:
    ...     storage.write(row, fences=lease.fences)
    """

    DEFAULT_NODE_TIMEOUT = 0.1

    def __init__(
        self,
        servers: Sequence[Union[str, "redis.Redis"]],
        *,
        node_timeout: Duration = DEFAULT_NODE_TIMEOUT,
        retry_for: Duration = 2.0,
        watchdog: Optional[bool] = None,
        max_idle: int = 16,
    ) -> None:
        self.node_timeout = max(seconds(node_timeout), 0.001)
        self.retry_for = seconds(retry_for)
        self.watchdog = watchdog
        # What Lock reads: io_timeout/retry_for/min_replicas.
        self.settings = Settings(self.node_timeout, self.retry_for, None)
        nodes: List[RNode] = []
        places: List[Tuple[str, List[Any], Any]] = []
        for s in server_list(servers, "redis.Redis"):
            if isinstance(s, str):
                try:
                    s = redis.Redis.from_url(s)
                except ValueError as e:
                    raise InvalidRequest(str(e)) from None
            if type(s.connection_pool).__module__.startswith("redis.asyncio"):
                raise InvalidRequest(
                    f"a {type(s).__module__}.{type(s).__name__} client is for asyncio: use dlock.asyncio.Redlock"
                )
            node = Node(*settings_of(s), connect_timeout=self.node_timeout, max_idle=max_idle)
            places.append(place(node.kwargs))
            refuse_duplicates(places)
            nodes.append(RNode(node, self.node_timeout))
        self.nodes = nodes

    @property
    def quorum(self) -> int:
        """How many servers must grant: ``N//2 + 1``."""
        return quorum(len(self.nodes))

    def close(self) -> None:
        for n in self.nodes:
            n.node.close()

    def __enter__(self) -> "Redlock":
        return self

    def __exit__(self, *a: Any) -> None:
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
        """A lock over every server; the same options as
        :meth:`Locker.lock <dlock.Locker.lock>` (``token`` is ignored: every
        attempt takes a fresh one). ``retry_for``: how long a waiting
        request goes on while every attempt misses its quorum because
        servers are unreachable (then :class:`~dlock.NoQuorum`)."""
        spec = _spec(resource, ttl, shared, limit, owner)
        check_limit(len(self.nodes), limit)
        return RedlockLock(
            self,  # type: ignore[arg-type]
            spec,
            wait=wait,
            blocking=blocking,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            min_replicas=None,
            replicas_timeout=None,
            on_retry=None,
            raise_on_lost=raise_on_lost,
        )

    def _token_backend(self, resource: Key, token: str, ttl: Duration) -> RedlockBackend:
        require_token(token)
        return RedlockBackend(self.nodes, _spec(resource, ttl, False, None, None), token, self.node_timeout)

    def extend_token(self, resource: Key, token: str, ttl: Duration) -> bool:
        """``EXTEND`` on every server: True when a quorum extended it, False
        when so many answered 0 that no quorum holds the token, otherwise
        :class:`~dlock.NoQuorum` (or the servers' own error)."""
        b = self._token_backend(resource, token, ttl)
        r = b.extend(b.spec.ttl_ms)
        if r.kind == EXTENDED:
            return True
        if r.kind == LOST:
            return False
        assert r.error is not None
        raise r.error

    def release_token(self, resource: Key, token: str) -> bool:
        """``RELEASE`` on every server: True when a quorum released it."""
        return self._token_backend(resource, token, 1.0).release(now())

    def info(self, resource: Key) -> List[Union[Optional[Dict[str, Any]], DlockError]]:
        """``DLOCK.INFO`` on every server, in server order (None where free,
        the error where a server did not answer)."""
        _spec(resource, 1.0, False, None, None)
        reply_by = now() + self.node_timeout
        answers = fan_out(self.nodes, reply_by + SLACK, lambda n: n.call(("DLOCK.INFO", resource), reply_by))
        out: List[Union[Optional[Dict[str, Any]], DlockError]] = []
        for a in answers:
            if a is None:
                out.append(Unavailable("no answer in time"))
            elif a[0]:
                out.append(decode_info(a[1]))
            else:
                v = a[1]
                out.append(v.into_error() if isinstance(v, Failure) else DlockError(repr(v)))
        return out

    def acquire_spec(
        self,
        spec: Spec,
        wait_ms: Optional[int],
        retry_for: float,
        watchdog: bool,
        on_lost: Optional[OnLost],
    ) -> Optional[Lease]:
        timeout = self.node_timeout
        plan = Acquiring(now(), wait_ms, spec.ttl_ms, timeout, retry_for)
        while True:
            token = new_token()
            backend: Optional[RedlockBackend] = None
            try:
                rules, vu = _attempt(self.nodes, spec, token, plan.wait_for(now()), timeout)
                if vu is not None:
                    backend = RedlockBackend(self.nodes, spec, token, timeout)
                    backend.cap = cap_from(rules.first_send, spec.max_hold_ms)
                    return Lease(backend, spec.resources, token, rules.fences, spec.ttl_ms, vu, watchdog, on_lost)
            except BaseException as e:
                # Interrupted (also after the quorum, before the lease
                # reached the caller): nothing granted to this token stays.
                if backend is not None:
                    backend.abandoned = True
                _abandon(self.nodes, spec, token, timeout)
                interrupt = _interrupt_of(e)
                if interrupt is e:
                    raise
                raise interrupt from None
            pause = plan.after_miss(rules.tally.miss(), now(), random.random())
            if pause is None:
                break
            time.sleep(pause)
        err = missed_error(rules.tally, spec.ttl_ms)
        if err is None:
            return None
        raise err


class RedlockLock(Lock):
    """A lock request over a :class:`Redlock`'s servers: the same context
    manager and ``acquire()`` as :class:`~dlock.Lock`."""

    def _take(self, wait_ms: Optional[int], token: Optional[str], watchdog: bool) -> Optional[Lease]:
        """One acquisition over the servers (``token`` is not used: every
        attempt takes a fresh one)."""
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, thread_owner(), _max_hold(spec), spec.priority, spec.permits)
        rl: Redlock = self.locker  # type: ignore[assignment]
        return rl.acquire_spec(spec, wait_ms, self.settings.retry_for, watchdog, self.on_lost)
