"""The blocking watchdog: what a :class:`~dlock.Lease` shares with it
(``_Shared``: the rules' ``LeaseState`` under a lock, the loss signals),
one scheduler thread per process that keeps every lease's next look (a
renewal, or the end of its budget) in a heap, and a small pool of daemon
worker threads that do the looks. A lease costs no thread of its own; one
renewal stuck on a paused server holds back neither the others nor its own
lease's loss (another worker looks at the budget's end)."""

from __future__ import annotations

import heapq
import logging
import queue
import threading
from typing import Any, Callable, List, Optional

from ._core.lease import EXTENDED, FAILED, IGNORED, LOSE, LOST, RENEW, SLEEP, STOP, LeaseState, Renewal
from ._process import pid
from ._spec import now
from .errors import DlockError

log = logging.getLogger("dlock")


class _Shared:
    """What the lease and the watchdog share (the scheduler holds no
    reference to the Lease itself, so an abandoned lease can be collected)."""

    def __init__(self, backend: Any, ttl_ms: int, valid_until: float) -> None:
        self.backend = backend
        self.state = LeaseState(ttl_ms, valid_until, pid())
        # Guards the state. The condition (``wait_lost``) and the event
        # (``lost_event``) on it are made only when asked for: most leases
        # are released without anyone waiting for their loss.
        self.lock = threading.Lock()
        self._cond: Optional[threading.Condition] = None
        self._event: Optional[threading.Event] = None
        self.signalled = False  # the loss was told (callbacks run, event set)
        self.callbacks: List[Callable[[], Any]] = []
        # Held by a renewal from sending its EXTEND until its outcome is
        # applied: two renewals out at once could be run by the server in
        # one order and applied here in the other. Reentrant: an on_lost
        # callback runs on the renewing thread and may extend. A release
        # does not take it: a RELEASE may overtake an EXTEND (an EXTEND of a
        # released token answers 0 and revives nothing).
        self.renewing = threading.RLock()
        # The generation of the lease's current heap entry.
        self.gen = 0

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

    def watch(self, renew: bool) -> None:
        """Starts watching (renewing too, if ``renew``)."""
        with self.lock:
            go = self.state.watch(renew)
        if go:
            self.reschedule()

    def reschedule(self) -> None:
        """Schedules the next look at this lease: its renewal, or the end
        of its budget. Called on every change of deadline."""
        with self.lock:
            at = self.state.next_look()
            if at is None:
                return
            self.gen += 1
            gen = self.gen
        _scheduler.schedule(at, gen, self)

    def tick(self) -> None:
        """A scheduled look (on a worker thread): what the rules decide."""
        with self.lock:
            action, arg = self.state.look(now(), pid())
            under = self.state.valid_until
        if action == STOP:
            return
        if action == LOSE:
            self.mark_lost()
            return
        if action == SLEEP:
            self.reschedule()
            return
        assert action == RENEW
        ttl = int(arg)
        # While the renewal is out, the next look is the budget's end: a
        # renewal stuck on a paused server does not hold the loss back.
        self.reschedule()
        if not self.renewing.acquire(blocking=False):
            # The holder's own extend is out: it reschedules when done.
            with self.lock:
                self.state.in_flight -= 1
            self.reschedule()
            return
        try:
            with self.lock:
                released = self.state.released
                if released:
                    self.state.in_flight -= 1
            if released:
                return  # released meanwhile: no renewal starts after it
            try:
                r = self.backend.extend(ttl)
            except Exception as e:  # a backend bug must not end renewal silently
                log.exception("dlock: renewal failed")
                r = Renewal(FAILED, error=DlockError(str(e)))
            self.after_renewal(r, ttl, under)
        finally:
            self.renewing.release()

    def after_renewal(self, r: Renewal, ttl_ms: int, under: float) -> str:
        """Applies a renewal's outcome (see ``LeaseState.renewed``)."""
        with self.lock:
            verdict = self.state.renewed(r, ttl_ms, under, now())
            if verdict == EXTENDED:
                self.notify()
        if verdict == LOST:
            self.mark_lost()
        elif verdict != IGNORED:
            self.reschedule()
        return verdict

    def mark_lost(self) -> None:
        """Marks the lease lost for good and tells everyone, once: the
        callbacks first, then the event (whoever waits on it may count on
        the callbacks having run)."""
        with self.lock:
            if self.state.lost:
                return
            self.state.lost = True
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

    def check_budget(self) -> bool:
        """Marks the lease lost if its budget passed; True if it is lost."""
        with self.lock:
            passed = self.state.budget_passed(now())
            lost = self.state.lost
        if passed:
            self.mark_lost()
        return lost or passed


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
        self.pid = pid()

    def schedule(self, at: float, gen: int, sh: "_Shared") -> None:
        with self.cond:
            if self.pid != pid():  # forked: the threads did not come along
                self.__init__()  # type: ignore[misc]
            self.seq += 1
            heapq.heappush(self.heap, (at, self.seq, gen, sh))
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
            if gen == sh.gen:
                self.workers.submit(sh.tick)


_scheduler = _Scheduler()
