"""The blocking watchdog under load and under interrupts: with more leases
than renewal workers and a paused server, every loss is still told when its
budget passes; exceptions raised by a signal handler at random instants in
acquire/release leave the watchdog working for the leases taken after."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest
import redis
from harness import holder

import dlock
from dlock import _watchdog

DEADLINE = 60.0


def test_every_loss_is_told_at_its_budget_with_more_leases_than_workers(server):
    # More leases than renewal workers: on the paused server every worker is
    # stuck in a renewal; the losses must not queue behind them.
    n = _watchdog._Workers.MAX_WORKERS + 36
    locker = dlock.Locker(redis.Redis(port=server.port), io_timeout=3.0, retry_for=3.0)
    told = {}
    all_told = threading.Event()

    def on_lost(lease: dlock.Lease) -> None:
        told[lease.resource] = time.monotonic()
        if len(told) == n:
            all_told.set()

    leases = [locker.lock(f"r{i}", ttl=1.0, watchdog=True, on_lost=on_lost).acquire() for i in range(n)]
    assert all(leases)
    server.stop()
    try:
        assert all_told.wait(DEADLINE), f"{len(told)} of {n} losses told"
        late = sorted(told[lease.resource] - lease.deadline for lease in leases)
        # Generous for a loaded machine: queued behind the stuck renewals,
        # they were told about io_timeout late.
        assert late[-1] <= 0.5, f"losses told late: max {late[-1]:.3f} s, median {late[n // 2]:.3f} s"
        assert all(lease.lost and lease.lost_event.is_set() for lease in leases)
    finally:
        server.cont()
    for lease in leases:
        lease.release()


class Interrupted(BaseException):
    """Raised by the signal handler, as ``KeyboardInterrupt`` would be."""


armed = [False]


def _interrupt(signum, frame):
    # One-shot timers: raised at most once per arming, never once disarmed.
    if armed[0]:
        armed[0] = False
        raise Interrupted()


# An interrupt may land in a finalizer, where Python reports it as unraisable.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_interrupts_at_random_instants_leave_the_watchdog_working(server):
    locker = dlock.Locker(redis.Redis(port=server.port))
    c = server.conn()
    taken = []
    interrupted = 0
    progress = [0]
    done = threading.Event()

    def unstick() -> None:
        # An interrupt swallowed where Python cannot raise it (a finalizer)
        # would leave the loop blocked for good on a wedged lock: poke it.
        seen = -1
        while not done.wait(2.0):
            if progress[0] == seen:
                armed[0] = True
                signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
            seen = progress[0]

    guard = threading.Thread(target=unstick, daemon=True)
    old = signal.signal(signal.SIGALRM, _interrupt)
    guard.start()
    try:
        end = time.monotonic() + DEADLINE
        for i in range(3000):
            progress[0] = i
            if time.monotonic() > end:
                break
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, random.uniform(0.0001, 0.0008))
                lease = locker.lock(f"i{i}", ttl=5, watchdog=True, blocking=False).acquire()
                taken.append(lease)
                lease.release()
                armed[0] = False
            except (Interrupted, dlock.DlockError):
                interrupted += 1
    finally:
        done.set()
        guard.join(DEADLINE)
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert interrupted > 0
    for lease in taken:
        if lease is not None:
            try:
                lease.release()
            except dlock.DlockError:
                pass
    # A fresh lease is renewed: taken on a thread, so that a wedged
    # watchdog fails the test instead of hanging it.
    got = []
    t = threading.Thread(target=lambda: got.append(locker.lock("fresh", ttl=1, watchdog=True).acquire()), daemon=True)
    t.start()
    t.join(DEADLINE)
    assert not t.is_alive(), "acquire hung: the watchdog is wedged"
    assert got and got[0]
    lease = got[0]
    time.sleep(2.5)  # past two ttls: held only if renewed
    assert holder(c, "fresh") == (lease.token, lease.fence), "not renewed"
    assert not lease.lost
    assert lease.release()
