"""A held lock (:class:`Lease`): its token, fence and lease budget; extend,
release; and the thread behind it that renews it (a watchdog) and in any
case marks it lost when its budget passes.

The same lease serves a lock on one server and a Redlock over several:
what differs is the backend behind it (its ``extend`` and ``release``).

The watchdog renews with ``EXTEND`` a third of the ttl after the last grant
or renewal was *sent*, each renewal budgeted from its own send time. Its
schedule is read from the lease's state on every wake-up, and every change
of deadline (a manual ``extend``, shorter or longer) wakes it. A failed
attempt (no answer, too few replicas) is retried while the budget lasts; an
``EXTEND`` answered 0, or the budget running out, ends renewal for good and
marks the lease lost. ``release()`` stops the thread before the ``RELEASE``
is sent, so it never renews after release.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any, Callable, List, Optional, Sequence, Union

from ._spec import Duration, Key, now, ttl_ms as to_ttl_ms
from .errors import DlockError, LockLost

log = logging.getLogger("dlock")

#: Called once when the lease is found lost, with the lease.
OnLost = Callable[["Lease"], Any]


class Renewal:
    """The outcome of one renewal attempt: ``extended`` (with the instant
    the lease surely lasts until), ``lost`` (answered 0), or ``failed`` (no
    answer, too few replicas: the budget stays as it was)."""

    __slots__ = ("kind", "until", "error")

    def __init__(self, kind: str, until: float = 0.0, error: Optional[DlockError] = None):
        self.kind = kind
        self.until = until
        self.error = error


EXTENDED, LOST, FAILED = "extended", "lost", "failed"


def retry_pause(ttl_ms: int) -> float:
    """Pause between attempts after a failed renewal."""
    return min(max(ttl_ms / 20000, 0.010), 0.250)


class _Shared:
    """What the lease and its thread share (the thread holds no reference
    to the Lease itself, so an abandoned lease can be collected)."""

    def __init__(self, backend: Any, ttl_ms: int, valid_until: float) -> None:
        self.backend = backend
        self.cond = threading.Condition(threading.Lock())
        self.ttl_ms = ttl_ms
        self.valid_until = valid_until
        self.lost = False
        self.released = False
        self.event = threading.Event()
        self.callbacks: List[Callable[[], Any]] = []
        # Held by a renewal from sending its EXTEND until its outcome is
        # applied: two renewals in flight at once could be run by the server
        # in one order and applied here in the other.
        self.renewing = threading.Lock()

    def is_over(self, t: float) -> bool:
        return self.lost or t >= self.valid_until

    def renewal_due(self) -> float:
        """A third of the ttl after the last grant or renewal was sent."""
        two_thirds = (self.ttl_ms - self.ttl_ms // 3) / 1000
        return self.valid_until - two_thirds

    def mark_lost(self) -> None:
        """Marks the lease lost for good and tells everyone, once: the
        callbacks first, then the event (whoever waits on it may count on
        the callbacks having run)."""
        with self.cond:
            if self.lost:
                return
            self.lost = True
            cbs, self.callbacks = self.callbacks, []
            self.cond.notify_all()
        for cb in cbs:
            try:
                cb()
            except Exception:  # a callback's failure must not stop the signal
                log.exception("dlock: on_lost callback failed")
        self.event.set()

    def apply(self, r: Renewal, ttl_ms: int) -> bool:
        """Applies a renewal's outcome to the budget; True if extended. A
        renewal that comes back after the budget passed is a loss: a passed
        budget is never revived."""
        if r.kind == EXTENDED:
            with self.cond:
                if not self.is_over(now()):
                    self.valid_until = r.until
                    self.ttl_ms = ttl_ms
                    self.cond.notify_all()
                    return True
            self.mark_lost()
            return False
        if r.kind == LOST:
            self.mark_lost()
            return False
        assert r.error is not None
        raise r.error


def _watch(sh: _Shared, renew: bool) -> None:
    retry_under: Optional[float] = None
    retry_at = 0.0

    def due() -> float:
        if retry_under is not None and retry_under == sh.valid_until:
            return retry_at
        return sh.renewal_due()

    while True:
        # Sleep until the renewal is due, the release, or the budget's end.
        with sh.cond:
            while True:
                if sh.released or sh.lost:
                    return
                t = now()
                if t >= sh.valid_until:
                    break
                if renew:
                    d = due()
                    if t >= d:
                        break
                    wake = min(d, sh.valid_until)
                else:
                    wake = sh.valid_until
                sh.cond.wait(wake - t)
        if now() >= sh.valid_until and not (sh.released or sh.lost):
            sh.mark_lost()
            return
        # One renewal at a time: a manual extend may be under way; once it
        # is done, look again (it may have lost the lease, or moved the
        # deadline and so the schedule).
        with sh.renewing:
            with sh.cond:
                if sh.released or sh.lost:
                    return
                t = now()
                if t >= sh.valid_until:
                    expired = True
                else:
                    expired = False
                    if t < due():
                        continue
                    ttl, under = sh.ttl_ms, sh.valid_until
            if expired:
                sh.mark_lost()
                return
            try:
                r = sh.backend.extend(ttl)
            except Exception as e:  # a backend bug must not kill the thread silently
                log.exception("dlock: renewal failed")
                r = Renewal(FAILED, error=DlockError(str(e)))
            if r.kind == EXTENDED:
                with sh.cond:
                    if now() < sh.valid_until and not sh.lost:
                        sh.valid_until = r.until
                        retry_under = None
                        sh.cond.notify_all()
                        continue
                # The budget ran out before the renewal came back: the
                # lease has already been reported lost (``lost``), and a
                # budget passing ends renewal for good.
                sh.mark_lost()
                return
            if r.kind == LOST:
                sh.mark_lost()
                return
            retry_under = under
            retry_at = now() + retry_pause(ttl)


class Lease:
    """A held lock: what entering a lock's ``with`` block (or a successful
    ``acquire()``) gives.

    - :attr:`fence` is the fencing token: pass it to the storage you write
      to, which rejects writes carrying a lower fence than it has seen.
    - :attr:`token` is the random token of this acquisition.
    - :attr:`deadline` is the instant (on :func:`time.monotonic`'s clock)
      until which the lease surely lasts: counted from when the grant or
      the last renewal was *sent*, so never later than the server's
      deadline; :meth:`remaining` is the time left.
    - :attr:`lost` turns true once the lease is known lost (an ``EXTEND`` or
      ``RELEASE`` answered 0) or its budget has passed; :attr:`lost_event`
      (a :class:`threading.Event`) is set then, after the ``on_lost``
      callback ran.

    ``release()`` (or leaving the ``with`` block) stops the watchdog, then
    releases. A lease that is never released is not renewed once it is
    garbage collected: it ends with its ttl.
    """

    def __init__(
        self,
        backend: Any,
        resources: Sequence[Key],
        token: str,
        fences: List[Optional[int]],
        ttl_ms: int,
        valid_until: float,
        watchdog: bool = False,
        on_lost: Optional[OnLost] = None,
    ) -> None:
        self._resources = list(resources)
        self._token = token
        self._fences = fences
        self._sh = _Shared(backend, ttl_ms, valid_until)
        self._renews = watchdog
        self._thread: Optional[threading.Thread] = None
        self._thread_lock = threading.Lock()
        if on_lost is not None:
            self.add_lost_callback(on_lost)
        if now() >= valid_until:
            self._sh.mark_lost()
        elif watchdog or on_lost is not None:
            self._watch()

    def _watch(self) -> None:
        with self._thread_lock:
            if self._thread is None:
                t = threading.Thread(
                    target=_watch,
                    args=(self._sh, self._renews),
                    name="dlock-watchdog",
                    daemon=True,
                )
                self._thread = t
                t.start()

    # --- what the lease is ---------------------------------------------------

    @property
    def fence(self) -> int:
        """The fencing token of this grant. For Redlock, the largest of the
        per-server fences (see :attr:`fences`)."""
        return max((f for f in self._fences if f is not None), default=0)

    @property
    def fences(self) -> List[Optional[int]]:
        """Redlock: the fence each server granted, in the order the servers
        were given (``None`` where it was not granted). One entry otherwise."""
        return list(self._fences)

    @property
    def token(self) -> str:
        """The 128-bit random token of this acquisition (32 hex digits)."""
        return self._token

    @property
    def resource(self) -> Key:
        """The resource (the first one, for a set)."""
        return self._resources[0]

    @property
    def resources(self) -> List[Key]:
        """Every resource of a set (one for a single lock)."""
        return list(self._resources)

    @property
    def ttl(self) -> float:
        """The ttl of the grant or of the last renewal, in seconds."""
        return self._sh.ttl_ms / 1000

    @property
    def deadline(self) -> float:
        """The instant (``time.monotonic()``) until which the lease surely
        lasts: counted from when the grant or last renewal was sent."""
        return self._sh.valid_until

    def remaining(self) -> float:
        """Seconds left on the lease budget (0 once it has passed)."""
        return max(0.0, self._sh.valid_until - now())

    @property
    def lost(self) -> bool:
        """True once the lease is known lost (an ``EXTEND`` or ``RELEASE``
        answered 0) or its budget has passed (a renewal still under way
        does not stretch the budget)."""
        return self._sh.is_over(now())

    @property
    def released(self) -> bool:
        return self._sh.released

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lease is lost: an ``EXTEND`` or ``RELEASE`` answered
        0, or the budget passed (with or without a watchdog). Asking for it
        starts the thread that watches the budget."""
        sh = self._sh
        if not sh.lost:
            if now() >= sh.valid_until:
                sh.mark_lost()
            elif not sh.released:
                self._watch()
        return sh.event

    def add_lost_callback(self, fn: OnLost) -> None:
        """Calls ``fn(lease)`` once when the lease is lost (on the watchdog's
        thread, or on the thread whose ``extend`` or ``release`` found it);
        at once if it already is. Starts the thread that watches the
        budget."""
        sh = self._sh
        with sh.cond:
            if not sh.lost:
                sh.callbacks.append(lambda: fn(self))
                run_now = False
            else:
                run_now = True
        if run_now:
            fn(self)
        elif not sh.released and now() < sh.valid_until:
            self._watch()
        elif now() >= sh.valid_until:
            sh.mark_lost()

    def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Blocks until the lease is lost (or its budget passes) or
        ``timeout`` seconds pass; True if lost. A change of deadline
        meanwhile (an ``extend`` on another thread) is followed."""
        from ._spec import seconds

        end = None if timeout is None else now() + seconds(timeout)
        sh = self._sh
        with sh.cond:
            while True:
                t = now()
                if sh.is_over(t):
                    break
                if sh.released or (end is not None and t >= end):
                    return False
                until = sh.valid_until if end is None else min(end, sh.valid_until)
                sh.cond.wait(until - t)
        sh.mark_lost()
        return True

    # --- what the holder does -------------------------------------------------

    def extend(self, ttl: Optional[Duration] = None) -> bool:
        """Extends the lease to ``ttl`` seconds from now (default: the
        current ttl); the budget counts from when the ``EXTEND`` was sent.
        False: the lease had already ended (or its budget had passed), and
        the lease is now lost. The watchdog, if any, renews with this ttl
        from now on, a third of it after this renewal. Raises
        :class:`~dlock.Unavailable` (or :class:`~dlock.TooFewReplicas`)
        when the renewal did not get through; the budget stays as it was."""
        sh = self._sh
        ms = sh.ttl_ms if ttl is None else to_ttl_ms(ttl)
        with sh.renewing:
            if sh.is_over(now()):
                sh.mark_lost()
                return False
            r = sh.backend.extend(ms)
            return sh.apply(r, ms)

    def release(self) -> bool:
        """Stops the watchdog, then releases. True: the lock was still held
        and is now free. False: it had already ended, or its budget had
        passed (the lease was lost, whether or not anyone noticed before;
        the ``RELEASE`` is sent all the same). A second call answers False
        without asking the server."""
        sh = self._sh
        with sh.cond:
            if sh.released:
                return False
            sh.released = True
            sh.cond.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            # Never renew after release: the watchdog has ended before the
            # RELEASE is sent.
            t.join()
        with sh.cond:
            valid_until = sh.valid_until
            over = sh.is_over(now())
        # A lease whose budget had passed was already reported lost: the
        # RELEASE still frees what the server may hold, but the answer
        # stays "lost".
        try:
            released = sh.backend.release(valid_until) and not over
        except BaseException:
            raise
        if not released:
            sh.mark_lost()
        return released

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        released = self.release()
        if not released and et is None:
            raise LockLost(f"the lease on {self.resource!r} was lost before its release")

    def __del__(self) -> None:
        sh = getattr(self, "_sh", None)
        if sh is None or sh.released:
            return
        # Not released by its holder: stop renewing, so the lease ends with
        # its ttl (a watchdog must never outlive its holder).
        with sh.cond:
            sh.released = True
            sh.cond.notify_all()
        if not sh.lost:
            warnings.warn(
                f"dlock lease on {self._resources[0]!r} was never released; it ends with its ttl",
                ResourceWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        state = "released" if self.released else ("lost" if self.lost else "held")
        return (
            f"<Lease {self.resource!r} fence={self.fence} token={self.token} "
            f"remaining={self.remaining():.3f}s {state}>"
        )


LeaseLike = Union[Lease, Any]
