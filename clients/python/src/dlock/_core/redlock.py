"""The Redlock rules, free of I/O: the quorum and its validity, how long
each attempt waits and pauses, which grants of an attempt count and which
are undone, and what a round of ``EXTEND``/``RELEASE`` answers means. The
blocking shell (threads) and the asyncio shell (tasks) send the commands and
feed the replies in; times (``time.monotonic()`` seconds) and random draws
are passed in.

Errors are carried, never made, here: the shells turn a verdict into
dlock's exceptions.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

#: How long the caller waits past a round's reply deadline for the servers'
#: answers to be reported (a reply read just in time still counts).
SLACK = 0.010

#: Why an acquire attempt without a usable quorum failed.
SLOW, UNREACHABLE, BUSY = "slow", "unreachable", "busy"
#: What a renewal round came to (the values of ``dlock._lease``'s kinds),
#: plus TOO_LATE: a quorum renewed only after the validity had run out.
EXTENDED, LOST, FAILED, TOO_LATE = "extended", "lost", "failed", "too late"
#: How a server's part of a round ended.
ANSWERED, REFUSED, UNREACHED = "answered", "refused", "unreached"


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
    ttl, at least the node timeout, at most a third of the ttl, never past
    what is left of the caller's wait. Holding some servers while waiting
    for others would block everyone: a longer wait is more attempts."""
    ttl = ttl_ms / 1000
    return min(max(ttl / 10, node_timeout), ttl / 3, remaining)


def backoff(tries: int, draw: float) -> float:
    """Pause between attempts: full jitter, 1 ms up to 10, 20, 40, 80, then
    160 ms, so that clients that failed together do not retry together.
    ``draw`` is uniform in [0, 1)."""
    cap = 10 << min(max(tries, 0), 4)
    return (1 + min(int(draw * cap), cap - 1)) / 1000


def first_duplicate(places: Sequence[Tuple[str, Sequence[Any], Any]]) -> Optional[Tuple[int, int]]:
    """Two servers that are one: ``places`` are (name, resolved addresses,
    database); the same name, or a shared address, in the same database.
    Such a server would count twice towards the quorum."""
    for j, (text, resolved, db) in enumerate(places):
        for i in range(j):
            t2, r2, db2 = places[i]
            if db2 == db and (t2 == text or any(a in r2 for a in resolved)):
                return i, j
    return None


# --- a round's answers --------------------------------------------------------------


class Tally:
    """Answers to one round of commands, one per server. ``error`` is what
    a server answered that is no failure to reach it (the shell's
    exception): the first one is kept, in case most servers refused."""

    __slots__ = ("nodes", "yes", "no", "failed", "errors", "first_error")

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.yes = 0  # granted (a fence); EXTEND/RELEASE answered 1
        self.no = 0  # busy (nil); EXTEND/RELEASE answered 0
        self.failed = 0  # unreachable, timed out, or an error reply
        self.errors = 0  # of the failed: refused by the server
        self.first_error: Any = None

    def fail(self, error: Any = None) -> None:
        """A server failed; ``error`` (not None) when it refused."""
        self.failed += 1
        if error is not None:
            self.errors += 1
            if self.first_error is None:
                self.first_error = error

    def quorum(self) -> int:
        return quorum(self.nodes)

    def answered(self) -> int:
        return self.yes + self.no

    def pending(self) -> int:
        return self.nodes - self.yes - self.no - self.failed

    def hopeless(self) -> bool:
        """No quorum of 1s can come any more."""
        return self.no + self.failed > self.nodes - self.quorum()

    def miss(self) -> str:
        """Why an acquire round without a (valid) quorum failed: SLOW,
        UNREACHABLE (only when the failures alone rule out a quorum), or
        BUSY."""
        if self.yes >= self.quorum():
            return SLOW
        if self.failed > self.nodes - self.quorum():
            return UNREACHABLE
        return BUSY

    def lost(self) -> bool:
        """More than ``N - quorum`` servers answered 0: no quorum can hold
        the token any more."""
        return self.no > self.nodes - self.quorum()

    def renewal(self) -> str:
        """A renewal round's kind before its validity is checked: EXTENDED
        (a quorum of 1s), LOST (see :meth:`lost`) or FAILED."""
        if self.yes >= self.quorum():
            return EXTENDED
        return LOST if self.lost() else FAILED

    def refused(self) -> Any:
        """The servers' own error when so many refused that no quorum was
        possible for that reason alone; else None (a no-quorum failure)."""
        return self.first_error if self.errors > self.nodes - self.quorum() else None


def judge_extend(reply: Any) -> Optional[bool]:
    """An ``EXTEND`` answer: 1 renewed (True), 0 not held (False), anything
    else counts as a failure (None)."""
    if isinstance(reply, bool):
        return None
    return True if reply == 1 else (False if reply == 0 else None)


def tally_round(answers: Sequence[Tuple[str, Any]], judge: Callable[[Any], Optional[bool]]) -> Tally:
    """A round's answers in server order, each ``(ANSWERED, reply)``,
    ``(REFUSED, error)`` or ``(UNREACHED, None)``."""
    t = Tally(len(answers))
    for kind, v in answers:
        if kind == ANSWERED:
            j = judge(v)
            if j is True:
                t.yes += 1
            elif j is False:
                t.no += 1
            else:
                t.fail()
        elif kind == REFUSED:
            t.fail(v)
        else:
            t.fail()
    return t


def renewal(t: Tally, sent: float, ttl_ms: int, now: float) -> Tuple[str, float]:
    """What an ``EXTEND`` round sent at ``sent`` came to, judged at ``now``:
    ``(EXTENDED, valid_until)``; ``(LOST, 0)`` when more than ``N - quorum``
    answered 0; ``(TOO_LATE, 0)`` when the quorum's validity had already
    run out; otherwise ``(FAILED, 0)`` (the lease may still be held)."""
    kind = t.renewal()
    if kind == EXTENDED:
        vu = valid_until(sent, ttl_ms, now)
        return (EXTENDED, vu) if vu is not None else (TOO_LATE, 0.0)
    return kind, 0.0


def released(t: Tally) -> Optional[bool]:
    """What a ``RELEASE`` round came to: True when a quorum released it,
    False when so many answered "not held" that no quorum held it, None
    when neither is known (a server that did not answer keeps its hold
    until the ttl ends)."""
    if t.yes >= t.quorum():
        return True
    if t.lost():
        return False
    return None


# --- one acquire attempt -------------------------------------------------------------


class Attempt:
    """One acquire attempt over ``nodes`` servers with one fresh token,
    first sent at ``first_send``: every server's reply is due by
    :attr:`reply_by` (the wait, if any, plus the node timeout); the shell
    reports each server's answer and asks :meth:`collect_until` how long to
    go on listening, then :meth:`verdict`."""

    def __init__(self, nodes: int, first_send: float, wait: Optional[float], node_timeout: float) -> None:
        # Never WAIT 0 (which waits forever): under a millisecond is no wait.
        if wait is not None and int(wait * 1000) <= 0:
            wait = None
        self.first_send = first_send
        self.node_timeout = node_timeout
        #: Every server stops waiting in its queue at this same instant.
        self.wait_until = None if wait is None else first_send + wait
        self.reply_by = first_send + (wait or 0.0) + node_timeout
        self.tally = Tally(nodes)
        self.fences: List[Optional[int]] = [None] * nodes
        self._until = self.reply_by + SLACK

    def wait_ms(self, t: float) -> Optional[int]:
        """The ``WAIT`` for an ``ACQUIRE`` sent at ``t`` (None: no wait)."""
        if self.wait_until is None:
            return None
        w = int((self.wait_until - t) * 1000)
        return w if w > 0 else None

    def granted(self, i: int, fence: int, t: float) -> None:
        first_quorum = self.tally.yes + 1 == self.tally.quorum()
        self.tally.yes += 1
        self.fences[i] = fence
        if first_quorum:
            # The others get one more node timeout to answer (with WAIT they
            # may be queued behind another holder), so that grants arriving
            # together all count and none is undone for nothing.
            self._until = min(self._until, t + self.node_timeout)

    def busy(self, i: int) -> None:
        self.tally.no += 1

    def failed(self, i: int, error: Any = None) -> None:
        """Server ``i`` failed; ``error`` (not None) when it refused."""
        self.tally.fail(error)

    def decided(self) -> bool:
        """Every server answered, or no quorum can come any more."""
        return self.tally.pending() == 0 or self.tally.hopeless()

    def collect_until(self) -> float:
        """Until when to go on listening for answers."""
        return self._until

    def unanswered(self) -> None:
        """The listening is over: servers still silent count as failed."""
        self.tally.failed += self.tally.pending()

    def verdict(self, t: float, ttl_ms: int) -> Optional[float]:
        """Decided at ``t``: the lease's validity when the grants count
        (then keep the grants in :attr:`fences`), else None (then release
        every grant, on the connection that made it)."""
        if self.tally.yes < self.tally.quorum():
            return None
        return valid_until(self.first_send, ttl_ms, t)

    def undo_by(self) -> float:
        """Until when undoing the grants that do not count may take."""
        return self.reply_by + self.node_timeout + SLACK


class Acquiring:
    """One acquire call: attempts with fresh tokens until one wins a
    quorum, the wait is used up, or (only while every attempt misses for
    unreachable servers) ``retry_for`` has passed in a row."""

    def __init__(
        self,
        start: float,
        wait_ms: Optional[int],
        ttl_ms: int,
        node_timeout: float,
        retry_for: float,
    ) -> None:
        self.deadline = None if wait_ms is None else start + wait_ms / 1000
        self.ttl_ms = ttl_ms
        self.node_timeout = node_timeout
        self.retry_for = retry_for
        self.tries = 0
        self.unreachable_since: Optional[float] = None

    def wait_for(self, t: float) -> Optional[float]:
        """How long the attempt started at ``t`` waits in the queues (None:
        it does not wait)."""
        if self.deadline is None:
            return None
        return attempt_wait(max(self.deadline - t, 0.0), self.ttl_ms, self.node_timeout)

    def after_miss(self, miss: str, t: float, draw: float) -> Optional[float]:
        """After an attempt missed (``miss``: its :meth:`Tally.miss`) at
        ``t``: the pause before the next attempt, or None to give up.
        ``draw`` is uniform in [0, 1)."""
        if self.deadline is None:
            return None
        if miss == UNREACHABLE:
            if self.unreachable_since is None:
                self.unreachable_since = t
            if t - self.unreachable_since >= self.retry_for:
                return None
        else:
            self.unreachable_since = None
        # The last attempt, at the deadline, does not wait at all.
        left = self.deadline - t
        if left <= 0:
            return None
        pause = min(backoff(self.tries, draw), left)
        self.tries += 1
        return pause
