"""A session (``DLOCK.SESSION``) without I/O: one liveness lease for every
lock bound to it. Its commands, its phase, its budget (counted from the
send of the last ``OPEN`` or ``KEEPALIVE`` that was answered), its
keep-alive schedule (a third of its ttl after the last one was sent; after
a failed one, a short pause while the budget lasts), and what a reply
means. Time is passed in (the shells' monotonic clock, in seconds)."""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from .effects import Clock, Rand, Rule
from .lease import EXTENDED, LOST, Renewal
from .single import Settings, Single, SpecLike

#: The server's longest lock-delay (ms).
MAX_LOCK_DELAY_MS = 60_000

NEW, LIVE, ENDED = "new", "live", "ended"

#: What the keeper does next.
SLEEP, KEEP_ALIVE, EXPIRED, STOP = "sleep", "keep-alive", "expired", "stop"


class Invalid(Exception):
    """Session settings the server would refuse (the shells raise it as
    ``InvalidRequest``)."""


def lock_delay_ms(ms: Optional[int]) -> Optional[int]:
    if ms is None:
        return None
    if not 0 <= ms <= MAX_LOCK_DELAY_MS:
        raise Invalid("lock_delay must be from 0 to 60 s")
    return ms


def open_cmd(session_id: str, ttl_ms: int, bind: bool, lock_delay: Optional[int]) -> Tuple[object, ...]:
    cmd: Tuple[object, ...] = ("DLOCK.SESSION", "OPEN", session_id, ttl_ms)
    if bind:
        cmd += ("BIND",)
    if lock_delay is not None:
        cmd += ("LOCKDELAY", lock_delay)
    return cmd


def keepalive_cmd(session_id: str) -> Tuple[object, ...]:
    return ("DLOCK.SESSION", "KEEPALIVE", session_id)


def close_cmd(session_id: str) -> Tuple[object, ...]:
    return ("DLOCK.SESSION", "CLOSE", session_id)


def is_no_session(text: str) -> bool:
    """The session ended (or never was) on the server: its holds are
    released or being released."""
    return text.startswith("NOSESSION")


def lacks_sessions(text: str) -> bool:
    """The server's dlock module has no sessions (older than 0.4)."""
    low = text.lower()
    return low.startswith("err unknown command") and "'dlock.session'" in low


LACKS_SESSIONS = (
    "the server does not know DLOCK.SESSION: its dlock module is missing or older than "
    "sessions (upgrade it, or take the locks without a session)"
)


class SessionCore:
    """A session's phase, budget and keep-alive schedule."""

    __slots__ = ("ttl_ms", "phase", "ended_how", "valid_until", "last_sent", "retry_at")

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.phase = NEW
        self.ended_how = ""
        #: Until when the session surely lasts (meaningful once live).
        self.valid_until = 0.0
        self.last_sent = 0.0
        #: After a failed keep-alive: when to try again (None: on schedule).
        self.retry_at: Optional[float] = None

    @property
    def ttl(self) -> float:
        return self.ttl_ms / 1000

    def bindable(self, now: float) -> Optional[float]:
        """The budget a lock bound at ``now`` gets; None when the session
        can bind nothing (not open, ended, or its budget passed)."""
        if self.phase == LIVE and now < self.valid_until:
            return self.valid_until
        return None

    def opened(self, sent: float) -> None:
        """An ``OPEN`` sent at ``sent`` was answered."""
        if self.phase == NEW:
            self.phase = LIVE
            self.valid_until = sent + self.ttl
            self.last_sent = sent
            self.retry_at = None

    def kept_alive(self, sent: float, left_ms: int, now: float) -> Optional[float]:
        """A ``KEEPALIVE`` sent at ``sent`` was answered at ``now`` with the
        ms left: the new budget, or None when it came back after the
        budget passed (the session is then over: ended here)."""
        if self.phase != LIVE:
            return None
        if now >= self.valid_until:
            self.end("expired")
            return None
        until = sent + min(left_ms, self.ttl_ms) / 1000
        if until > self.valid_until:
            self.valid_until = until
        self.last_sent = max(self.last_sent, sent)
        self.retry_at = None
        return self.valid_until

    def failed(self, now: float) -> None:
        """A keep-alive got no answer: try again after a short pause."""
        self.retry_at = now + min(max(self.ttl_ms / 20000, 0.010), 0.250)

    def end(self, how: str) -> Optional[str]:
        """Ends the session: the phase it ended from the first time (the
        caller then tells the locks, and sends ``CLOSE`` if it was live and
        the client closes it), None after."""
        if self.phase == ENDED:
            return None
        was, self.phase, self.ended_how = self.phase, ENDED, how
        return was

    def next(self, now: float) -> Tuple[str, float]:
        """What the keeper does at ``now``, and until when it sleeps."""
        if self.phase == ENDED:
            return STOP, 0.0
        if self.phase == NEW:
            return SLEEP, now + self.ttl
        if now >= self.valid_until:
            return EXPIRED, 0.0
        due = self.last_sent + self.ttl / 3
        if self.retry_at is not None:
            due = self.retry_at
        if now >= due:
            return KEEP_ALIVE, 0.0
        return SLEEP, min(due, self.valid_until)

    def covers(self, under: float) -> Optional[float]:
        """A lock whose budget is ``under`` asks for a renewal: the
        session's budget when a keep-alive landed since (nothing to send),
        else None."""
        if self.phase == LIVE and self.valid_until > under:
            return self.valid_until
        return None


#: ``budget(t)``: until when the session surely lasts, as a lock bound at
#: clock reading ``t`` would get it; None once it ended or its budget
#: passed (``SessionCore.bindable``, read by the shell under its guard).
SessionBudget = Callable[[float], Optional[float]]


class BoundRules(Single):
    """The rules of a lock bound to a session (``ACQUIRE ... SESSION id``):
    a single-server lock's, except that a bound hold has no deadline of its
    own (the server refuses an ``EXTEND`` of it) and its budget is the
    session's. So the refresh of a grant handed over after a long wait asks
    nothing of the server: the lock lasts as long as the session, and is
    lost if the session ended meanwhile. (Renewing a bound lock is the
    session's keep-alive, which its shell sends.)"""

    __slots__ = ("budget",)

    def __init__(self, spec: SpecLike, token: str, settings: Settings, clock: Clock, rand: Rand, budget: SessionBudget) -> None:
        super().__init__(spec, token, settings, clock, rand)
        self.budget = budget

    def extend_by(self, ttl_ms: int, deadline: float) -> Rule[Renewal]:
        yield from ()  # a rule that sends nothing
        until = self.budget(self.clock())
        if until is None:
            return Renewal(LOST)
        return Renewal(EXTENDED, until=until)
