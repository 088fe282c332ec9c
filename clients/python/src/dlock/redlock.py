"""Redlock: one lock over N independent servers (masters, each with the
dlock module), granted when a majority grants it, as the Rust client does.

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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import redis

from ._lease import EXTENDED, FAILED, LOST, Lease, Renewal
from ._node import Node, close, read_all, run_pipeline, send, set_timeout, settings_of
from ._single import Settings
from ._spec import Duration, Key, Spec, new_token, now, seconds
from .errors import (
    FATAL,
    RETRY,
    DlockError,
    Failure,
    InvalidRequest,
    NoQuorum,
    Unavailable,
    classify,
    is_io_error,
    unexpected,
)
from .locker import _UNSET, PER_THREAD, Lock, _spec, decode_info, thread_owner

__all__ = ["Redlock"]

T = TypeVar("T")

#: How long the caller waits past a round's reply deadline for the workers
#: to report (a reply read just in time still counts).
SLACK = 0.010
#: Connections a command may try on one server: a restarted server leaves
#: every pooled connection broken, and a command sent on a broken one is
#: retried on the next (same token: idempotent).
MAX_TRIES = 10


# --- arithmetic ------------------------------------------------------------------


def quorum(n: int) -> int:
    """A majority of ``n`` servers: any two majorities share a server."""
    return n // 2 + 1


def drift_ms(ttl_ms: int) -> float:
    """Allowance for the servers' clocks running faster than ours."""
    return ttl_ms / 100 + 2


def valid_until(sent: float, ttl_ms: int, t: float) -> Optional[float]:
    """The instant until which a grant (or renewal) first sent at ``sent``
    surely lasts on every server that granted it; None when that is not
    after ``t`` (the quorum came too late to be of use)."""
    lasts = ttl_ms - drift_ms(ttl_ms)
    if lasts <= 0:
        return None
    until = sent + lasts / 1000
    return until if until > t else None


def attempt_wait(remaining: float, ttl_ms: int, node_timeout: float) -> float:
    """How long one attempt waits in the servers' queues: a tenth of the
    ttl, at least the node timeout, at most a third of the ttl."""
    ttl = ttl_ms / 1000
    return min(max(ttl / 10, node_timeout), ttl / 3, remaining)


class Tally:
    """Replies to one round of commands, one per server."""

    __slots__ = ("nodes", "yes", "no", "failed")

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.yes = 0  # granted (a fence); EXTEND/RELEASE answered 1
        self.no = 0  # busy (nil); EXTEND/RELEASE answered 0
        self.failed = 0  # unreachable, timed out, or an error reply

    def quorum(self) -> int:
        return quorum(self.nodes)

    def answered(self) -> int:
        return self.yes + self.no

    def pending(self) -> int:
        return self.nodes - self.yes - self.no - self.failed

    def hopeless(self) -> bool:
        return self.no + self.failed > self.nodes - self.quorum()

    def miss(self) -> str:
        """Why an acquire round without a (valid) quorum failed: ``slow``,
        ``unreachable`` (only when the failures alone rule out a quorum), or
        ``busy``."""
        if self.yes >= self.quorum():
            return "slow"
        if self.failed > self.nodes - self.quorum():
            return "unreachable"
        return "busy"

    def renewal(self) -> str:
        if self.yes >= self.quorum():
            return EXTENDED
        if self.no > self.nodes - self.quorum():
            return LOST
        return FAILED

    def no_quorum(self) -> NoQuorum:
        return NoQuorum(self.yes, self.answered(), self.nodes)


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

    def call(self, cmd: Tuple, reply_by: float) -> Any:
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


def fan_out(nodes: Sequence[RNode], until: float, f: Callable[[RNode], T]) -> List[Optional[Tuple[bool, Any]]]:
    """Runs ``f`` on every server at once, one thread each, and collects
    what came back by ``until``, in server order: ``(True, value)``,
    ``(False, exception)``, or None (no answer by then). A thread still
    running then is left to finish on its own; it sends nothing after its
    command's own deadline."""
    q: "queue.Queue[Tuple[int, bool, Any]]" = queue.Queue()

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

GRANTED, BUSY, FAIL = "granted", "busy", "failed"


class _Verdict:
    """Which grants count, once the attempt is decided."""

    def __init__(self) -> None:
        self.kept: Optional[List[bool]] = None
        self.event = threading.Event()

    def decide(self, kept: List[bool]) -> None:
        self.kept = kept
        self.event.set()

    def keeps(self, i: int) -> bool:
        self.event.wait()
        assert self.kept is not None
        return self.kept[i]


class _Attempt:
    def __init__(self, spec: Spec, token: str, wait_until: Optional[float], reply_by: float) -> None:
        self.spec = spec
        self.token = token
        self.wait_until = wait_until
        self.reply_by = reply_by
        self.verdict = _Verdict()


def _worker(i: int, node: RNode, at: _Attempt, q: "queue.Queue[Tuple[int, str, Any]]") -> None:
    """Acquires on one server and undoes the grant unless it counts.
    Reports exactly once."""
    release = at.spec.release_cmd(at.token)
    last: Optional[Failure] = None
    for _ in range(MAX_TRIES):
        left = at.reply_by - now()
        if left <= 0:
            break
        try:
            conn = node.node.get(left)
        except Failure as f:
            q.put((i, FAIL, f))
            return
        left = at.reply_by - now()
        if left <= 0:
            node.node.give_back(conn)
            break
        # Every server stops waiting at the same instant; never WAIT 0
        # (which waits forever).
        w: Optional[int] = None
        if at.wait_until is not None:
            w = int((at.wait_until - now()) * 1000)
            if w <= 0:
                w = None
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


class _Won:
    def __init__(self, fences: List[Optional[int]], valid_until: float) -> None:
        self.fences = fences
        self.valid_until = valid_until


class _Missed:
    def __init__(self, tally: Tally, errors: int, first_error: Optional[DlockError]) -> None:
        self.tally = tally
        self.errors = errors
        self.first_error = first_error


def _attempt(nodes: Sequence[RNode], spec: Spec, token: str, wait: Optional[float], timeout: float) -> Union[_Won, _Missed]:
    n = len(nodes)
    # Counted from before any command is sent: the validity runs from here.
    first_send = now()
    if wait is not None and int(wait * 1000) <= 0:
        wait = None
    at = _Attempt(
        spec,
        token,
        None if wait is None else first_send + wait,
        first_send + (wait or 0.0) + timeout,
    )
    q: "queue.Queue[Tuple[int, str, Any]]" = queue.Queue()
    threads = []
    for i in range(n):
        t = threading.Thread(target=_worker, args=(i, nodes[i], at, q), name="dlock-redlock", daemon=True)
        t.start()
        threads.append(t)
    tally = Tally(n)
    fences: List[Optional[int]] = [None] * n
    errors, first_error = 0, None
    # Once a quorum granted, the others get one more node timeout to answer
    # (with WAIT they may be queued behind another holder), so that grants
    # arriving together all count and none is undone for nothing.
    until = at.reply_by + SLACK
    quorum_seen = False
    while tally.pending() > 0 and not tally.hopeless():
        if not quorum_seen and tally.yes >= tally.quorum():
            quorum_seen = True
            until = min(until, now() + timeout)
        try:
            i, kind, v = q.get(timeout=max(until - now(), 0))
        except queue.Empty:
            tally.failed += tally.pending()
            break
        if kind == GRANTED:
            tally.yes += 1
            fences[i] = v
        elif kind == BUSY:
            tally.no += 1
        else:
            tally.failed += 1
            if v.kind == FATAL:
                errors += 1
                if first_error is None:
                    first_error = v.error
    vu = valid_until(first_send, spec.ttl_ms, now()) if tally.yes >= tally.quorum() else None
    if vu is not None:
        at.verdict.decide([f is not None for f in fences])
        return _Won(fences, vu)
    at.verdict.decide([False] * n)
    # Give the workers still running the time to undo a grant (on its own
    # connection) before the caller moves on, or exits.
    undo_by = at.reply_by + timeout + SLACK
    for t in threads:
        t.join(max(undo_by - now(), 0))
    return _Missed(tally, errors, first_error)


def _backoff(tries: int) -> float:
    """Pause between attempts: full jitter, 1 ms up to 10, 20, 40, 80, then
    160 ms, so that clients that failed together do not retry together."""
    cap = 10 << min(tries, 4)
    return (1 + random.randrange(cap)) / 1000


class RedlockBackend:
    """A lock held on a quorum of servers: what a Redlock Lease renews and
    releases."""

    def __init__(self, nodes: Sequence[RNode], spec: Spec, token: str, timeout: float) -> None:
        self.nodes = nodes
        self.spec = spec
        self.token = token
        self.timeout = timeout

    def _round(self, cmd: Tuple, judge: Callable[[Any], Optional[bool]]) -> Tuple[Tally, float, Optional[DlockError]]:
        sent = now()
        reply_by = sent + self.timeout
        answers = fan_out(self.nodes, reply_by + SLACK, lambda node: node.call(cmd, reply_by))
        tally = Tally(len(self.nodes))
        errors, first_error = 0, None
        for a in answers:
            if a is None:
                tally.failed += 1
                continue
            ok, v = a
            if ok:
                j = judge(v)
                if j is True:
                    tally.yes += 1
                elif j is False:
                    tally.no += 1
                else:
                    tally.failed += 1
            else:
                tally.failed += 1
                if isinstance(v, Failure) and v.kind == FATAL:
                    errors += 1
                    if first_error is None:
                        first_error = v.error
        refused = first_error if errors > tally.nodes - tally.quorum() else None
        return tally, sent, refused

    def extend(self, ttl_ms: int) -> Renewal:
        """``EXTEND`` on every server; never a same-token acquire, which
        could grant again a server whose hold had ended."""
        tally, sent, refused = self._round(
            self.spec.extend_cmd(self.token, ttl_ms),
            lambda v: True if v == 1 else (False if v == 0 else None),
        )
        k = tally.renewal()
        if k == EXTENDED:
            vu = valid_until(sent, ttl_ms, now())
            if vu is None:
                return Renewal(
                    FAILED,
                    error=Unavailable("a quorum renewed only after the new ttl's validity had run out"),
                )
            return Renewal(EXTENDED, until=vu)
        if k == LOST:
            return Renewal(LOST)
        return Renewal(FAILED, error=refused or tally.no_quorum())

    def release(self, valid_until: float) -> bool:
        """``RELEASE`` on every server: True if a quorum released it, False
        if so many answered "not held" that no quorum held it; otherwise
        :class:`~dlock.NoQuorum` (a server that did not answer keeps its
        hold until the ttl ends)."""
        tally, _, refused = self._round(self.spec.release_cmd(self.token), self.spec.released)
        if tally.yes >= tally.quorum():
            return True
        if tally.renewal() == LOST:
            return False
        raise refused or tally.no_quorum()


def _place(node: Node) -> Tuple[str, List[Any], Any]:
    kw = node.kwargs
    db = kw.get("db", 0) or 0
    if "path" in kw:
        import os

        return os.path.realpath(str(kw["path"])), [], db
    host, port = kw.get("host", "localhost"), int(kw.get("port", 6379))
    try:
        resolved = [ai[4][:2] for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except OSError:
        resolved = []
    return f"{host}:{port}", resolved, db


class Redlock:
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
        if isinstance(servers, (str, bytes)):
            servers = [servers]  # type: ignore[list-item]
        if not servers:
            raise InvalidRequest("no server given")
        self.node_timeout = max(seconds(node_timeout), 0.001)
        self.retry_for = seconds(retry_for)
        self.watchdog = watchdog
        # What Lock reads: io_timeout/retry_for/min_replicas.
        self.settings = Settings(self.node_timeout, self.retry_for, None)
        nodes: List[RNode] = []
        seen: List[Tuple[str, List[Any], Any]] = []
        for s in servers:
            if isinstance(s, str):
                try:
                    s = redis.Redis.from_url(s)
                except ValueError as e:
                    raise InvalidRequest(str(e)) from None
            node = Node(*settings_of(s), connect_timeout=self.node_timeout, max_idle=max_idle)
            text, resolved, db = _place(node)
            for t2, r2, db2 in seen:
                if db2 == db and (t2 == text or any(a in r2 for a in resolved)):
                    raise InvalidRequest(
                        f"{t2} and {text} name the same server (database {db}): it would "
                        "count twice towards the quorum"
                    )
            seen.append((text, resolved, db))
            nodes.append(RNode(node, self.node_timeout))
        self.nodes = nodes

    @property
    def quorum(self) -> int:
        """How many servers must grant: ``N//2 + 1``."""
        return quorum(len(self.nodes))

    def close(self) -> None:
        for n in self.nodes:
            n.node.close()

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
        on_lost: Any = None,
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
        if len(self.nodes) > 1 and limit is not None and limit > 1:
            raise InvalidRequest(
                "LIMIT above 1 needs a single server: majorities of independent servers "
                "cannot count permits"
            )
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

    def read_lock(self, resource: Key, **kw: Any) -> "RedlockLock":
        return self.lock(resource, shared=True, **kw)

    def write_lock(self, resource: Key, **kw: Any) -> "RedlockLock":
        return self.lock(resource, **kw)

    def semaphore(self, resource: Key, limit: int, **kw: Any) -> "RedlockLock":
        return self.lock(resource, limit=limit, **kw)

    def reentrant_lock(self, resource: Key, owner: Optional[Key] = None, **kw: Any) -> "RedlockLock":
        return self.lock(resource, owner=PER_THREAD if owner is None else owner, **kw)

    def multi_lock(self, resources: Sequence[Key], **kw: Any) -> "RedlockLock":
        res = list(resources)
        return self.lock(res if len(res) > 1 else (res[0] if res else ""), **kw)  # type: ignore[arg-type]

    def _token_backend(self, resource: Key, token: str, ttl: Duration) -> RedlockBackend:
        if not isinstance(token, str) or not token:
            raise InvalidRequest("token must not be empty")
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
        reply_by = now() + self.node_timeout
        answers = fan_out(self.nodes, reply_by + SLACK, lambda n: n.call(("DLOCK.INFO", resource), reply_by))
        out: List[Any] = []
        for a in answers:
            if a is None:
                out.append(Unavailable("no answer in time"))
            elif a[0]:
                out.append(decode_info(a[1]))
            else:
                v = a[1]
                out.append(v.into_error() if isinstance(v, Failure) else v)
        return out

    def acquire_spec(
        self,
        spec: Spec,
        wait_ms: Optional[int],
        retry_for: float,
        watchdog: bool,
        on_lost: Any,
    ) -> Optional[Lease]:
        nodes = self.nodes
        timeout = self.node_timeout
        start = now()
        deadline = None if wait_ms is None else start + wait_ms / 1000
        tries = 0
        unreachable_since: Optional[float] = None
        while True:
            token = new_token()
            w = None
            if deadline is not None:
                w = attempt_wait(max(deadline - now(), 0.0), spec.ttl_ms, timeout)
            r = _attempt(nodes, spec, token, w, timeout)
            if isinstance(r, _Won):
                backend = RedlockBackend(nodes, spec, token, timeout)
                return Lease(backend, spec.resources, token, r.fences, spec.ttl_ms, r.valid_until, watchdog, on_lost)
            missed = r
            if deadline is None:
                break
            if missed.tally.miss() == "unreachable":
                if unreachable_since is None:
                    unreachable_since = now()
                if now() - unreachable_since >= retry_for:
                    break
            else:
                unreachable_since = None
            # A pause, then a new attempt; the last one, at the deadline,
            # does not wait at all.
            left = deadline - now()
            if left <= 0:
                break
            time.sleep(min(_backoff(tries), left))
            tries += 1
        t = missed.tally
        m = t.miss()
        if m == "busy":
            return None
        if m == "unreachable":
            if missed.errors > t.nodes - t.quorum() and missed.first_error is not None:
                raise missed.first_error
            raise t.no_quorum()
        raise Unavailable(
            f"{t.yes} of {t.nodes} servers granted, but only after the validity of the "
            f"{spec.ttl_ms} ms ttl had run out: raise the ttl or lower the node timeout"
        )


class RedlockLock(Lock):
    """A lock request over a :class:`Redlock`'s servers: the same context
    manager and ``acquire()`` as :class:`~dlock.Lock`."""

    def acquire(
        self,
        blocking: Optional[bool] = None,
        wait: Any = _UNSET,
        *,
        token: Optional[str] = None,
        watchdog: Optional[bool] = None,
    ) -> Optional[Lease]:
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, thread_owner())
        wd = watchdog if watchdog is not None else self.watchdog
        if wd is None:
            wd = bool(self.locker.watchdog)
        rl: Redlock = self.locker  # type: ignore[assignment]
        return rl.acquire_spec(spec, self._wait_ms(blocking, wait), self.settings.retry_for, wd, self.on_lost)
