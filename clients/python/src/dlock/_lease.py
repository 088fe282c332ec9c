"""A held lock (:class:`Lease`): its token, fence and lease budget; extend,
release; and the watchdog that renews it and in any case marks it lost
when its budget passes.

The same lease serves a lock on one server and a Redlock over several:
what differs is the backend behind it (its ``extend`` and ``release``).

The watchdog renews with ``EXTEND`` a third of the ttl after the last grant
or renewal was *sent*, each renewal budgeted from its own send time. Its
schedule follows every change of deadline (a manual ``extend``, shorter or
longer). A failed attempt (no answer, too few replicas) is retried while
the budget lasts; an ``EXTEND`` answered 0, or the budget running out, ends
renewal for good and marks the lease lost. ``release()`` waits for a
renewal under way and stops renewal before the ``RELEASE`` is sent, so no
renewal is ever sent after it.

One scheduler thread per process keeps every lease's next renewal (or loss
check) in a heap and hands due work to a small pool of daemon worker
threads, so a lease costs no thread of its own, and one renewal stuck on a
paused server does not hold back the others (another worker takes them).
"""

from __future__ import annotations

import heapq
import logging
import os
import queue
import threading
import warnings
import weakref
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


def budget_over(lost: bool, valid_until: float, t: float) -> bool:
    """True once a lease is lost or its budget (``valid_until``) has passed
    at ``t``. A renewal that comes back when this is true moves nothing:
    the lease was (or could have been) reported lost, and a passed budget
    is never revived. Every renewal, blocking or asyncio, manual or the
    watchdog's, asks this before it moves a deadline."""
    return lost or t >= valid_until


def retry_pause(ttl_ms: int) -> float:
    """Pause between attempts after a failed renewal."""
    return min(max(ttl_ms / 20000, 0.010), 0.250)


class _Shared:
    """What the lease and the watchdog share (the scheduler holds no
    reference to the Lease itself, so an abandoned lease can be collected)."""

    def __init__(self, backend: Any, ttl_ms: int, valid_until: float) -> None:
        self.backend = backend
        # Guards the state below. The condition (``wait_lost``) and the
        # event (``lost_event``) on it are made only when asked for: most
        # leases are released without anyone waiting for their loss.
        self.lock = threading.Lock()
        self._cond: Optional[threading.Condition] = None
        self._event: Optional[threading.Event] = None
        self.signalled = False  # the loss was told (callbacks run, event set)
        self.ttl_ms = ttl_ms
        self.valid_until = valid_until
        self.lost = False
        self.released = False
        self.callbacks: List[Callable[[], Any]] = []
        # Held by a renewal from sending its EXTEND until its outcome is
        # applied: two renewals in flight at once could be run by the server
        # in one order and applied here in the other; and release() takes it
        # so that no renewal is sent after its RELEASE. Reentrant: an
        # on_lost callback runs on the renewing thread and may extend or
        # release.
        self.renewing = threading.RLock()
        # The watchdog: whether it renews (else it only watches the budget),
        # whether it runs, the generation of its current heap entry, and a
        # failed renewal's retry (made under the deadline ``retry_under``).
        self.renew = False
        self.watching = False
        self.gen = 0
        self.retry_under: Optional[float] = None
        self.retry_at = 0.0

    def cond(self) -> threading.Condition:
        """The condition that changes of deadline, loss and release are
        notified on (made on first use; called with ``lock`` held)."""
        c = self._cond
        if c is None:
            c = self._cond = threading.Condition(self.lock)
        return c

    def notify(self) -> None:
        """Wakes whoever waits on the condition (with ``lock`` held)."""
        if self._cond is not None:
            self._cond.notify_all()

    def event(self) -> threading.Event:
        """The event set once the loss was told (made on first use)."""
        with self.lock:
            ev = self._event
            if ev is None:
                ev = self._event = threading.Event()
                if self.signalled:
                    ev.set()
        return ev

    def is_over(self, t: float) -> bool:
        return budget_over(self.lost, self.valid_until, t)

    def renewal_due(self) -> float:
        """A third of the ttl after the last grant or renewal was sent."""
        two_thirds = (self.ttl_ms - self.ttl_ms // 3) / 1000
        return self.valid_until - two_thirds

    def due(self) -> float:
        if self.retry_under is not None and self.retry_under == self.valid_until:
            return self.retry_at
        return self.renewal_due()

    def watch(self, renew: bool) -> None:
        """Starts watching (renewing too, if ``renew``)."""
        with self.lock:
            if renew:
                self.renew = True
            if self.watching and not renew:
                return
            self.watching = True
        self.reschedule()

    def reschedule(self) -> None:
        """Schedules the next look at this lease: its renewal, or the end
        of its budget. Called on every change of deadline."""
        with self.lock:
            if not self.watching or self.released or self.lost:
                return
            self.gen += 1
            at = min(self.due(), self.valid_until) if self.renew else self.valid_until
        _scheduler.schedule(at, self)

    def tick(self) -> None:
        """A scheduled look (on a worker thread): renew if due, mark lost
        if the budget passed, else schedule the next look."""
        with self.renewing:
            with self.lock:
                if self.released or self.lost:
                    return
                t = now()
                expired = t >= self.valid_until
                if not expired and (not self.renew or t < self.due()):
                    early = True
                else:
                    early = False
                ttl, under = self.ttl_ms, self.valid_until
            if expired:
                self.mark_lost()
                return
            if early:
                self.reschedule()
                return
            try:
                r = self.backend.extend(ttl)
            except Exception as e:  # a backend bug must not end renewal silently
                log.exception("dlock: renewal failed")
                r = Renewal(FAILED, error=DlockError(str(e)))
            if r.kind == EXTENDED:
                with self.lock:
                    ok = not self.is_over(now())
                    if ok:
                        self.valid_until = r.until
                        self.retry_under = None
                        self.notify()
                if not ok:
                    # The budget ran out before the renewal came back:
                    # ``budget_over``; a budget passing ends renewal for good.
                    self.mark_lost()
                    return
            elif r.kind == LOST:
                self.mark_lost()
                return
            else:
                with self.lock:
                    self.retry_under, self.retry_at = under, now() + retry_pause(ttl)
        self.reschedule()

    def mark_lost(self) -> None:
        """Marks the lease lost for good and tells everyone, once: the
        callbacks first, then the event (whoever waits on it may count on
        the callbacks having run)."""
        with self.lock:
            if self.lost:
                return
            self.lost = True
            cbs, self.callbacks = self.callbacks, []
            self.notify()
        for cb in cbs:
            try:
                cb()
            except Exception:  # a callback's failure must not stop the signal
                log.exception("dlock: on_lost callback failed")
        with self.lock:
            self.signalled = True
            ev = self._event
        if ev is not None:
            ev.set()

    def apply(self, r: Renewal, ttl_ms: int) -> bool:
        """Applies a renewal's outcome to the budget; True if extended. A
        renewal that comes back after the budget passed is a loss (see
        ``budget_over``)."""
        if r.kind == EXTENDED:
            with self.lock:
                ok = not self.is_over(now())
                if ok:
                    self.valid_until = r.until
                    self.ttl_ms = ttl_ms
                    self.notify()
            if ok:
                self.reschedule()
                return True
            self.mark_lost()
            return False
        if r.kind == LOST:
            self.mark_lost()
            return False
        assert r.error is not None
        raise r.error


class _Workers:
    """Daemon threads that run renewals: started on demand (one more
    whenever none is idle, up to ``MAX_WORKERS``), kept for reuse."""

    MAX_WORKERS = 64

    def __init__(self) -> None:
        self.q: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.count = 0
        self.idle = 0

    def submit(self, fn: Callable[[], None]) -> None:
        with self.lock:
            spawn = self.idle == 0 and self.count < self.MAX_WORKERS
            if spawn:
                self.count += 1
            else:
                self.idle -= 1  # this one is taken
        self.q.put(fn)
        if spawn:
            threading.Thread(target=self._run, name="dlock-watchdog", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn = self.q.get()
            try:
                fn()
            except Exception:
                log.exception("dlock: watchdog work failed")
            with self.lock:
                self.idle += 1


class _Scheduler:
    """The process's watchdog: a heap of (when, generation, lease) and one
    daemon thread that hands each due entry to the workers. An entry whose
    generation is no longer the lease's is stale (rescheduled since)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.heap: List[Any] = []
        self.seq = 0
        self.thread: Optional[threading.Thread] = None
        self.workers = _Workers()
        self.pid = os.getpid()

    def schedule(self, at: float, sh: "_Shared") -> None:
        with self.cond:
            if self.pid != os.getpid():  # forked: the threads did not come along
                self.__init__()  # type: ignore[misc]
            self.seq += 1
            heapq.heappush(self.heap, (at, self.seq, sh.gen, sh))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="dlock-scheduler", daemon=True)
                self.thread.start()
            elif self.heap[0][1] == self.seq:
                self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while True:
                    if not self.heap:
                        self.cond.wait()
                        continue
                    at = self.heap[0][0]
                    t = now()
                    if at <= t:
                        _, _, gen, sh = heapq.heappop(self.heap)
                        break
                    self.cond.wait(at - t)
            if gen == sh.gen and not sh.released and not sh.lost:
                self.workers.submit(sh.tick)


_scheduler = _Scheduler()


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
        if on_lost is not None:
            self.add_lost_callback(on_lost)
        if now() >= valid_until:
            self._sh.mark_lost()
        elif watchdog or on_lost is not None:
            self._watch()

    def _watch(self) -> None:
        self._sh.watch(self._renews)

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
        starts watching the budget."""
        sh = self._sh
        if not sh.lost:
            if now() >= sh.valid_until:
                sh.mark_lost()
            elif not sh.released:
                self._watch()
        return sh.event()

    def add_lost_callback(self, fn: OnLost) -> None:
        """Calls ``fn(lease)`` once when the lease is lost (on a watchdog
        thread, or on the thread whose ``extend`` or ``release`` found it);
        at once if it already is. Starts watching the budget."""
        sh = self._sh
        # Weakly: the watchdog must not keep an abandoned lease alive (and
        # renewed) through its own callback.
        ref = weakref.ref(self)

        def call() -> None:
            lease = ref()
            if lease is not None:
                fn(lease)

        with sh.lock:
            if not sh.lost:
                sh.callbacks.append(call)
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
        with sh.lock:
            cond = sh.cond()
            while True:
                t = now()
                if sh.is_over(t):
                    break
                if sh.released or (end is not None and t >= end):
                    return False
                until = sh.valid_until if end is None else min(end, sh.valid_until)
                cond.wait(until - t)
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
        with sh.lock:
            if sh.released:
                return False
            sh.released = True
            sh.gen += 1
            sh.notify()
        # Never renew after release: a renewal under way ends before the
        # RELEASE is sent, and none starts after (``released`` is set).
        with sh.renewing:
            pass
        with sh.lock:
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
        with sh.lock:
            sh.released = True
            sh.gen += 1
            sh.notify()
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

    # --- guarded writes (the rules: dlock._guard) ---------------------------------

    def write(self, *command: Union[str, bytes, int]) -> Any:
        """Runs ``command`` on the lock's server only if this lease's hold
        is live there at that instant (``DLOCK.GUARD ... FENCE fence``), in
        one atomic step; returns the command's reply. Raises
        :class:`~dlock.NotHeld` (nothing written; the lease is marked lost),
        :class:`~dlock.Refused` (the command was refused or failed; nothing
        written), :class:`~dlock.Unavailable` (no reply: sent again only
        while it surely did not run; otherwise the error says it may have
        run), :class:`~dlock.InvalidRequest` (bad arguments, or a Redlock
        lease: nothing sent)."""
        from . import _guard

        return _guard.write(self, command)

    def write_batch(self, commands: Sequence[Sequence[Union[str, bytes, int]]]) -> List[Any]:
        """Runs every command of ``commands`` if this lease's hold is live,
        all or none (``DLOCK.GUARD ... BATCH``): the replies in order. A
        command that fails undoes the ones before it (:class:`~dlock.Refused`).
        Otherwise as :meth:`write`."""
        from . import _guard

        return _guard.write_batch(self, commands)

    def check(self) -> bool:
        """Whether this lease's hold is live on the server now (the
        sequencer check, ``DLOCK.CHECK``); False marks the lease lost. Racy
        by nature: the hold can end right after the answer."""
        from . import _guard

        return _guard.check(self)


LeaseLike = Union[Lease, Any]
