"""A held lease as plain data, and the decisions about it: its budget,
loss, release, when the watchdog renews, what a renewal's outcome does,
and what leaving a ``with`` block does. The blocking ``Lease`` (a heap
of scheduled looks and worker threads) and the asyncio ``Lease`` (a task)
are shells over :class:`LeaseState`: they hold a lock or run on one loop,
read the clock, and do what it decides.

The rules:

- The budget (``valid_until``) counts from when the grant or the last
  renewal was *sent*: never later than the server's deadline.
- The watchdog renews a third of the ttl after that send. A failed
  renewal (no answer, too few replicas) is retried after
  :func:`retry_pause` while the budget lasts.
- The lease is lost once an ``EXTEND``/``RELEASE`` answers 0 or the budget
  passes, whichever first: a renewal in flight does not hold the loss back
  (the watchdog looks again at the budget's end while one is out), and a
  renewal that comes back after the budget passed is a loss, never a
  revival.
- A clean release (answered "released") ends the lease without a loss,
  however long ago its ttl passed.
- A lease belongs to the process that acquired it: a forked child never
  renews or releases it.
- A capped hold (``max_hold``, the server's ``MAXHOLD``) ends at its grant
  plus ``max_hold``, and the server refuses any command for it whose
  deadline would pass that. The grant came after the acquire's first
  attempt was sent: that send plus ``max_hold`` is the cap's floor
  (:class:`Cap`), and every command for the hold after the first (a retry,
  the refresh after a wait, each renewal) asks for at most what is left to
  it, less a margin. Once the budget reaches the floor, renewal ends and
  the lease is lost at its budget with :data:`CAP_REACHED` as its reason.
"""

from __future__ import annotations

from typing import Optional, Tuple

from ..errors import DlockError, LockLost

EXTENDED, LOST, FAILED = "extended", "lost", "failed"
#: A renewal that came back after the lease was released: the release's
#: answer decides, the renewal's is not applied.
IGNORED = "ignored"


class Renewal:
    """The outcome of one renewal attempt: ``extended`` (with the instant
    the lease surely lasts until), ``lost`` (answered 0), or ``failed`` (no
    answer, too few replicas: the budget stays as it was)."""

    __slots__ = ("kind", "until", "error")

    def __init__(self, kind: str, until: float = 0.0, error: Optional[DlockError] = None):
        self.kind = kind
        self.until = until
        self.error = error

    def __repr__(self) -> str:
        return f"Renewal({self.kind}, until={self.until:.3f}, error={self.error!r})"


def budget_over(lost: bool, valid_until: float, t: float) -> bool:
    """True once a lease is lost or its budget (``valid_until``) has passed
    at ``t``. A renewal that comes back when this is true moves nothing:
    the lease was (or could have been) reported lost, and a passed budget
    is never revived."""
    return lost or t >= valid_until


#: The loss reason of a lease whose budget ended at its cap's floor.
CAP_REACHED = "MAXHOLD the hold reached its cap (max_hold): it cannot be extended past its MAXHOLD"


class Cap:
    """A capped hold's floor: the acquire's first send plus ``max_hold``,
    never later than the server's cap; ``margin``: how far before it a
    command's deadline ends (a fiftieth of ``max_hold``, 5 to 100 ms: the
    command's way to the server, the server's whole milliseconds)."""

    __slots__ = ("floor", "margin")

    def __init__(self, first_send: float, max_hold_ms: int) -> None:
        self.floor = first_send + max_hold_ms / 1000
        self.margin = min(max(max_hold_ms / 50000, 0.005), 0.100)

    def ttl_ms(self, ttl_ms: int, t: float) -> Optional[int]:
        """The ttl a command sent at ``t`` asks for in place of ``ttl_ms``:
        what is left to the floor less the margin, if shorter; None when
        under 1 ms (no command is sent then)."""
        left = int((self.floor - self.margin - t) * 1000)
        ttl = min(ttl_ms, left)
        return ttl if ttl >= 1 else None

    def no_earlier_than(self, t: float) -> None:
        """The server's cap is known to come no earlier than ``t``: the
        floor moves there if it was earlier."""
        self.floor = max(self.floor, t)

    def reached_by(self, valid_until: float) -> bool:
        """True when a budget ending at ``valid_until`` is as long as a
        renewal could make it: renewal ends."""
        return self.floor - self.margin - valid_until < 0.001


def left_to_cap_ms(refusal: str) -> Optional[int]:
    """How long the server said a hold may live from its answer on, in ms,
    from its refusal at the cap (``MAXHOLD the hold may live N ms more:
    ...``); None for any other text."""
    _, found, rest = refusal.partition("may live ")
    n, more, _ = rest.partition(" ms more")
    if not found or not more or not n.isdigit():
        return None
    return int(n)


def cap_of(backend: object) -> Optional[Cap]:
    """The cap's floor of the hold a back end holds: a Redlock's own
    (``cap``), or a single server's acquire's (``rules.cap``); None for an
    uncapped hold."""
    cap = getattr(backend, "cap", None) or getattr(getattr(backend, "rules", None), "cap", None)
    return cap if isinstance(cap, Cap) else None


def cap_from(first_send: float, max_hold_ms: Optional[int]) -> Optional[Cap]:
    """The cap's floor of a hold whose acquire first sent at ``first_send``
    (None without ``max_hold``)."""
    return None if max_hold_ms is None else Cap(first_send, max_hold_ms)


def capped_ttl_ms(cap: Optional[Cap], ttl_ms: int, t: float) -> Optional[int]:
    """The ttl a command for a hold with ``cap`` (if any) asks for at ``t``."""
    return ttl_ms if cap is None else cap.ttl_ms(ttl_ms, t)


def retry_pause(ttl_ms: int) -> float:
    """Pause between attempts after a failed renewal."""
    return min(max(ttl_ms / 20000, 0.010), 0.250)


#: What a watchdog's look at a lease decides.
STOP, LOSE, RENEW, SLEEP = "stop", "lose", "renew", "sleep"
#: What leaving a ``with`` block does.
LEAVE_FOREIGN, LEAVE_DONE, LEAVE_RELEASE = "foreign", "done", "release"


class LeaseState:
    """One lease's state. Not thread-safe by itself: the blocking shell
    guards it with a lock; the asyncio shell uses it from one loop."""

    __slots__ = (
        "ttl_ms",
        "valid_until",
        "lost",
        "released",
        "release_ok",
        "renews",
        "watching",
        "in_flight",
        "retry_under",
        "retry_at",
        "pid",
        "loss_reason",
        "cap",
        "refused",
    )

    def __init__(self, ttl_ms: int, valid_until: float, pid: int) -> None:
        self.ttl_ms = ttl_ms
        self.valid_until = valid_until
        #: Known lost (told once by the shell: callbacks, event).
        self.lost = False
        #: ``release()`` was called (no renewal starts after it).
        self.released = False
        #: What the release answered (None: not yet, or not released).
        self.release_ok: Optional[bool] = None
        #: The watchdog renews (else it only watches the budget).
        self.renews = False
        self.watching = False
        #: Renewals out (the watchdog's or the holder's ``extend``).
        self.in_flight = 0
        #: A failed renewal's retry, made under the budget ``retry_under``.
        self.retry_under: Optional[float] = None
        self.retry_at = 0.0
        #: The process that acquired the lease.
        self.pid = pid
        #: Why the server ended the lease, when it said (a renewal past the
        #: lease's ``max_hold`` cap refused).
        self.loss_reason: Optional[str] = None
        #: A capped hold's floor (``max_hold``): renewals stop short of it.
        self.cap: Optional[Cap] = None
        #: The server refused a watchdog's renewal at the cap (a race the
        #: cap's margin lost): renewal ended, the loss at the budget's end.
        self.refused: Optional[str] = None

    # --- what the lease is ---------------------------------------------------

    def over(self, t: float) -> bool:
        """Lost, or the budget passed at ``t`` (see :func:`budget_over`)."""
        return budget_over(self.lost, self.valid_until, t)

    def lost_at(self, t: float) -> bool:
        """What ``lease.lost`` says at ``t``: a lease released cleanly is
        never lost."""
        if self.release_ok:
            return False
        return self.over(t)

    def owned_by(self, pid: int) -> bool:
        return pid == self.pid

    def budget_passed(self, t: float) -> bool:
        """The budget passed at ``t`` and the loss is not told yet: the
        shell marks the lease lost (never one released cleanly). A capped
        hold whose budget ended at its floor gets the cap's reason."""
        passed = not self.lost and not self.release_ok and t >= self.valid_until
        if passed:
            self._note_cap()
        return passed

    def _note_cap(self) -> None:
        """The budget passed: a capped hold's loss says it was the cap."""
        if self.refused is not None or self.at_cap():
            self.loss_reason = self.loss_reason or self.refused or CAP_REACHED

    def reason_at(self, t: float) -> Optional[str]:
        """The loss reason at ``t``: as noted, or the cap's once a capped
        hold's budget that reached its floor has passed (whether or not
        anyone marked it lost)."""
        if self.loss_reason is None and not self.release_ok and t >= self.valid_until:
            if self.refused is not None or self.at_cap():
                return self.refused or CAP_REACHED
        return self.loss_reason

    def at_cap(self) -> bool:
        """A capped hold whose budget already reaches its floor: no renewal
        can move it."""
        return self.cap is not None and self.cap.reached_by(self.valid_until)

    # --- the watchdog ----------------------------------------------------------

    def renewal_due(self) -> float:
        """A third of the ttl after the last grant or renewal was sent (or
        a failed renewal's retry)."""
        if self.retry_under is not None and self.retry_under == self.valid_until:
            return self.retry_at
        two_thirds = (self.ttl_ms - self.ttl_ms // 3) / 1000
        return self.valid_until - two_thirds

    def watch(self, renew: bool) -> bool:
        """Starts watching (and renewing, if ``renew``); True if the shell
        must schedule a look (a change, and not over)."""
        changed = (renew and not self.renews) or not self.watching
        self.renews = self.renews or renew
        self.watching = True
        return changed and not self.released and not self.lost

    def next_look(self) -> Optional[float]:
        """When the watchdog looks next: the renewal or the budget's end
        (while a renewal is out: the budget's end). None: never again."""
        if not self.watching or self.released or self.lost:
            return None
        if self.renews and self.in_flight == 0 and not self.at_cap():
            return min(self.renewal_due(), self.valid_until)
        return self.valid_until

    def look(self, t: float, pid: int) -> Tuple[str, float]:
        """A watchdog's look at ``t`` in process ``pid``: ``(STOP, 0)``,
        ``(LOSE, 0)`` (the budget passed: mark lost), ``(RENEW, ttl_ms)``
        (a renewal is now out: send it, then :meth:`renewed`) or
        ``(SLEEP, until)``."""
        if not self.watching or self.released or self.lost or not self.owned_by(pid):
            return STOP, 0.0
        if t >= self.valid_until:
            self._note_cap()
            return LOSE, 0.0
        if self.renews and self.in_flight == 0 and not self.at_cap() and t >= self.renewal_due():
            ttl = capped_ttl_ms(self.cap, self.ttl_ms, t)
            if ttl is not None:
                self.in_flight += 1
                return RENEW, float(ttl)
        at = self.next_look()
        assert at is not None
        return SLEEP, at

    # --- renewals --------------------------------------------------------------

    def begin_extend(self, t: float) -> bool:
        """The holder's ``extend`` at ``t``: False if the lease was released
        (nothing is asked) or is over (the shell marks it lost unless it was
        released); else a renewal is out."""
        if self.released or self.over(t):
            return False
        self.in_flight += 1
        return True

    def renewed(self, r: Renewal, ttl_ms: int, under: float, t: float, watchdog: bool = False) -> str:
        """Applies a renewal's outcome (sent under the budget ``under``, back
        at ``t``): EXTENDED (the budget moved), LOST (the shell marks the
        lease lost: answered 0, or back after the budget passed) or FAILED
        (the budget stays; the watchdog retries after a pause); IGNORED
        once the lease was released (a RELEASE may overtake an EXTEND, which
        then answers 0: that is no loss). A ``watchdog`` renewal refused at
        the cap changed nothing on the server: renewal ends, and the loss
        comes at the budget's end (FAILED)."""
        self.in_flight = max(0, self.in_flight - 1)
        if self.released:
            return IGNORED
        if r.kind == EXTENDED:
            if self.over(t):
                return LOST
            self.valid_until = r.until
            self.ttl_ms = ttl_ms
            self.retry_under = None
            return EXTENDED
        if r.kind == FAILED and isinstance(r.error, LockLost) and watchdog:
            self.renews = False
            self.refused = r.error.reason or str(r.error)
            return FAILED
        if r.kind == FAILED and isinstance(r.error, LockLost):
            # The server ended the lease (a renewal past its cap refused):
            # lost, with the reason it gave.
            self.loss_reason = r.error.reason or str(r.error)
            return LOST
        if r.kind == LOST or self.over(t):
            # No answer, and the budget passed meanwhile: lost, as it would
            # be had the renewal never been sent.
            return LOST
        self.retry_under, self.retry_at = under, t + retry_pause(ttl_ms)
        return FAILED

    # --- release ---------------------------------------------------------------

    def begin_release(self, t: float) -> Optional[bool]:
        """The holder's ``release`` at ``t``: None if already released (the
        call answers False without asking the server); else whether the
        budget had passed (the RELEASE is sent all the same; the answer is
        "lost")."""
        if self.released:
            return None
        self.released = True
        return self.over(t)

    def released_as(self, server_said: bool, over: bool) -> bool:
        """The release's answer: True only if the server released it and
        the budget had not passed before. False: the shell marks it lost."""
        ok = server_said and not over
        self.release_ok = ok
        return ok

    def leaving(self, pid: int) -> str:
        """What leaving a ``with`` block does in process ``pid``:
        LEAVE_FOREIGN (a forked child: nothing, no error), LEAVE_DONE (the
        holder released it already: no second RELEASE; LockLost only if
        that release answered "lost") or LEAVE_RELEASE."""
        if not self.owned_by(pid):
            return LEAVE_FOREIGN
        if self.released:
            return LEAVE_DONE
        return LEAVE_RELEASE
