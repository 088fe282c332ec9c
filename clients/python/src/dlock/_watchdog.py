"""The blocking watchdog: what a :class:`~dlock.Lease` shares with it
(``_Shared``: the rules' ``LeaseState`` under a lock, the loss signals),
one scheduler thread per process that keeps every lease's next look (a
renewal, or the end of its budget) in a heap, and a small pool of daemon
worker threads that send the renewals. The scheduler's thread does every
look itself (no I/O) and marks a lease lost at its budget's end; the loss's
callbacks run on a separate pool that renewals never occupy. A lease costs
no thread of its own; one renewal stuck on a paused server holds back
neither the others (up to the workers' cap) nor any lease's loss.

Nothing on a caller's thread takes a lock of the scheduler's: a lease hands
its next look over through an atomic append, so an exception raised by a
signal handler at any instant (``KeyboardInterrupt``) cannot leave one held."""

from __future__ import annotations

import collections
import heapq
import logging
import math
import queue
import threading
from typing import Any, Callable, List, Optional

from ._core.lease import EXTENDED, FAILED, IGNORED, LOSE, LOST, RENEW, SLEEP, STOP, LeaseState, Renewal, cap_of
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
        self.state.cap = cap_of(backend)
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

    def look(self) -> None:
        """A scheduled look, on the scheduler's thread: what the rules
        decide. It sends nothing itself: a renewal goes to the workers, a
        loss's callbacks to the signal pool."""
        with self.lock:
            action, arg = self.state.look(now(), pid())
            under = self.state.valid_until
        if action == STOP:
            return
        if action == LOSE:
            cbs = self.lose()
            if cbs:
                _scheduler.signals.submit(lambda: self.tell(cbs))
            elif cbs is not None:
                self.tell(cbs)
            return
        if action == SLEEP:
            self.reschedule()
            return
        assert action == RENEW
        ttl = int(arg)
        # While the renewal is out, the next look is the budget's end: a
        # renewal stuck on a paused server does not hold the loss back.
        self.reschedule()
        _scheduler.workers.submit(lambda: self.renew(ttl, under))

    def renew(self, ttl: int, under: float) -> None:
        """Sends a renewal the rules decided on (on a worker thread)."""
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
            self.after_renewal(r, ttl, under, watchdog=True)
        finally:
            self.renewing.release()

    def after_renewal(self, r: Renewal, ttl_ms: int, under: float, watchdog: bool = False) -> str:
        """Applies a renewal's outcome (see ``LeaseState.renewed``)."""
        with self.lock:
            verdict = self.state.renewed(r, ttl_ms, under, now(), watchdog)
            if verdict == EXTENDED:
                self.notify()
        if verdict == LOST:
            self.mark_lost()
        elif verdict != IGNORED:
            self.reschedule()
        return verdict

    def mark_lost(self) -> None:
        """Marks the lease lost for good and tells everyone, once."""
        cbs = self.lose()
        if cbs is not None:
            self.tell(cbs)

    def lose(self) -> Optional[List[Callable[[], Any]]]:
        """Marks the lease lost for good: the callbacks to run, None if it
        already was (someone else tells)."""
        with self.lock:
            if self.state.lost:
                return None
            self.state.lost = True
            cbs, self.callbacks = self.callbacks, []
            self.notify()
        return cbs

    def tell(self, cbs: List[Callable[[], Any]]) -> None:
        """Tells the loss: the callbacks first, then the event (whoever
        waits on it may count on the callbacks having run)."""
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
    """Daemon threads that run work (renewals; or, in a pool of their own,
    loss callbacks): started on demand (one more whenever none is idle, up
    to ``MAX_WORKERS``), kept for reuse. Used from the scheduler's thread."""

    MAX_WORKERS = 64

    def __init__(self, name: str) -> None:
        self.name = name
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
            threading.Thread(target=self._run, name=self.name, daemon=True).start()

    def _run(self) -> None:
        while True:
            fn = self.q.get()
            try:
                fn()
            except Exception:
                log.exception("dlock: watchdog work failed")
            with self.lock:
                self.idle += 1


class _Wakeup:
    """How the scheduler's thread sleeps and is woken without a lock the
    waker would take: a token put on an atomic queue."""

    def __init__(self) -> None:
        self.q: "queue.SimpleQueue[None]" = queue.SimpleQueue()

    def wait(self, timeout: Optional[float] = None) -> None:
        try:
            self.q.get(timeout=timeout)
        except queue.Empty:
            return
        try:  # wake-ups given meanwhile are all served by this one
            while True:
                self.q.get_nowait()
        except queue.Empty:
            pass

    def notify(self) -> None:
        self.q.put(None)


class _Scheduler:
    """The process's watchdog: a heap of (when, seq, generation, lease) and
    one daemon thread that does each due look. An entry whose generation is
    no longer the lease's is stale (rescheduled since).

    Only the thread touches the heap. Callers append their entries to
    ``incoming`` (an atomic ``deque.append``) and wake the thread (an atomic
    queue put) only when the entry is due before it would wake anyway."""

    #: The heap is rid of its stale entries when it grows past this, or
    #: past twice the entries it kept the last time.
    COMPACT_AT = 1024
    #: While leases come and go, the thread with no live look to wait for
    #: wakes by itself this often, rather than be woken for each new
    #: lease: a lease whose look is due later than that needs no wake-up.
    IDLE_TICK = 0.25

    def __init__(self) -> None:
        self.cond = _Wakeup()
        self.incoming: "collections.deque[Any]" = collections.deque()
        self.heap: List[Any] = []
        self.seq = 0
        self.thread: Optional[threading.Thread] = None
        self.start_lock = threading.Lock()
        self.workers = _Workers("dlock-watchdog")
        self.signals = _Workers("dlock-signal")
        self.pid = pid()
        self.compact_at = self.COMPACT_AT
        #: When the thread wakes by itself (-inf: it is not waiting, and
        #: looks at ``incoming`` before it waits again).
        self.wake_at = -math.inf
        #: A look was scheduled since the thread last found none live.
        self.recent = False

    def schedule(self, at: float, gen: int, sh: "_Shared") -> None:
        """Schedules a look at ``sh`` (on any thread), waking the
        scheduler's thread only when the look is due before the thread
        would wake anyway. A lease released meanwhile leaves a stale entry
        behind (its generation moved on), which the thread drops when it
        comes first: a program taking and releasing leases whose renewals
        are far away does not wake the thread per lease."""
        if self.pid != pid():  # forked: the threads did not come along
            self.__init__()  # type: ignore[misc]
        incoming = self.incoming
        incoming.append((at, gen, sh))
        if self.thread is None:
            self._start()
        elif at < self.wake_at or len(incoming) >= self.COMPACT_AT:
            # Many handed over while the thread sleeps long: it takes them
            # in and drops the released ones, so that they do not pile up.
            self.cond.notify()

    def _start(self) -> None:
        # The thread claims ``self.thread`` itself: one started twice (an
        # interrupt between the start and the claim) finds it taken and ends.
        with self.start_lock:
            if self.thread is None:
                threading.Thread(target=self._run, name="dlock-scheduler", daemon=True).start()

    def _take_incoming(self) -> bool:
        """Moves the entries handed over into the heap; True if any."""
        incoming = self.incoming
        heap = self.heap
        took = False
        while True:
            try:
                at, gen, sh = incoming.popleft()
            except IndexError:
                break
            took = True
            self.seq += 1
            heapq.heappush(heap, (at, self.seq, gen, sh))
        if took:
            self.recent = True
            if len(heap) >= self.compact_at:
                heap[:] = [e for e in heap if e[2] == e[3].gen]
                heapq.heapify(heap)
                self.compact_at = max(self.COMPACT_AT, 2 * len(heap))
        return took

    def _drop_stale(self) -> None:
        """Drops the stale entries that come first. A generation only
        grows: an entry seen stale stays stale."""
        heap = self.heap
        while heap and heap[0][2] != heap[0][3].gen:
            heapq.heappop(heap)

    def _claim(self) -> bool:
        me = threading.current_thread()
        with self.start_lock:
            if self.thread is None and self.pid == pid():
                self.thread = me
        return self.thread is me

    def _run(self) -> None:
        if not self._claim():
            return
        heap = self.heap
        while True:
            self.wake_at = -math.inf
            self._take_incoming()
            self._drop_stale()
            t = now()
            if heap and heap[0][0] <= t:
                _, _, gen, sh = heapq.heappop(heap)
                if gen == sh.gen:
                    try:
                        sh.look()
                    except Exception:
                        log.exception("dlock: watchdog look failed")
                continue
            # Publish when the thread wakes, then look at what was handed
            # over meanwhile: an entry appended after this look sees the
            # published time and wakes the thread if it is due before.
            if heap:
                wake, timeout = heap[0][0], heap[0][0] - t
            elif self.recent:
                wake, timeout = t + self.IDLE_TICK, self.IDLE_TICK
            else:
                wake, timeout = math.inf, None
            self.wake_at = wake
            if self._take_incoming():
                continue
            if not heap:
                self.recent = False
            self.cond.wait(timeout)


_scheduler = _Scheduler()
