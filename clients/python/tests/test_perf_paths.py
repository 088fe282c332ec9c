"""What the lean hot path keeps: a waiting ``ACQUIRE`` outlives the kernel
timeout its connection kept from a shorter call, a forked child never draws
its parent's next token, and the watchdog's scheduler is not woken per
lease taken and released."""

from __future__ import annotations

import os
import threading
import time

import redis

import dlock
from dlock import _spec, _watchdog

DEADLINE = 60.0


def test_a_waiting_acquire_outlives_its_connections_kernel_timeout(server):
    # io_timeout 1 s: a plain try leaves its connection a 1 s kernel
    # timeout, which the waiting ACQUIRE (due in its wait + 1 s) keeps; its
    # read goes on past it instead of failing and retrying.
    locker = dlock.Locker(redis.Redis(port=server.port), io_timeout=1.0)
    lock = locker.lock("kt", ttl=30)
    holder = lock.acquire()
    assert holder
    assert locker.lock("kt", ttl=30, blocking=False).acquire() is None  # a short call on the pool
    retries = []
    got = []

    def wait() -> None:
        lease = locker.lock("kt", ttl=30, wait=DEADLINE, on_retry=retries.append).acquire()
        got.append(lease)
        if lease:
            lease.release()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(2.5)  # two kernel timeouts of the waiting read
    assert lock.release()
    t.join(DEADLINE)
    assert not t.is_alive()
    assert got and got[0], got
    assert retries == [], f"the waiting read failed on the kernel's timeout: {retries}"


def test_a_forked_child_never_draws_its_parents_next_token():
    _spec.new_token()  # a batch drawn ahead
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next token, to the parent
        try:
            os.write(w, _spec.new_token().encode())
        finally:
            os._exit(0)
    os.close(w)
    child = b""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        chunk = os.read(r, 64)
        if not chunk:
            break
        child += chunk
    os.close(r)
    os.waitpid(pid, 0)
    assert len(child) == 32
    assert _spec.new_token() != child.decode()


def test_taking_and_releasing_watched_leases_does_not_wake_the_scheduler_per_lease(server):
    # Renewals 0.5 s after each grant, past the scheduler's idle tick: the
    # released leases' entries are dropped without a wake-up each.
    locker = dlock.Locker(redis.Redis(port=server.port))
    lock = locker.lock("wd", ttl=1.5)
    lock.acquire().release()  # the scheduler's thread is up
    cond = _watchdog._scheduler.cond
    waits = [0]
    plain_wait = cond.wait

    def counted_wait(timeout=None):
        waits[0] += 1
        return plain_wait(timeout)

    cond.wait = counted_wait  # type: ignore[method-assign]
    try:
        cycles = 0
        end = time.monotonic() + 1.5  # entries come due while leases come and go
        while time.monotonic() < end:
            lease = lock.acquire()
            assert lease
            assert lease.release()
            cycles += 1
    finally:
        del cond.wait
    assert cycles >= 100, cycles
    assert waits[0] < cycles / 10, f"{waits[0]} scheduler wake-ups for {cycles} leases"
