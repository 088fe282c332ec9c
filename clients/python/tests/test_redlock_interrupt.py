"""An exception raised by a signal handler (KeyboardInterrupt, a SIGALRM
handler's) at any instant of a blocking Redlock acquire: it propagates as
it is, and whatever the servers granted is released, also when the quorum
was reached but the lease had not reached the caller yet."""

from __future__ import annotations

import random
import signal
import time
from typing import List, Optional

import pytest

import dlock

ITERATIONS = 300
RESOURCE = "res"


class Interrupt(Exception):
    """What the SIGALRM handler raises."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupt()


def _free_everywhere(conns, deadline: float) -> bool:
    end = time.monotonic() + deadline
    while True:
        if all(c.execute_command("DLOCK.INFO", RESOURCE) is None for c in conns):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_an_interrupt_at_any_instant_of_acquire_leaves_nothing_held(make_server):
    servers = [make_server() for _ in range(3)]
    conns = [s.conn() for s in servers]
    rl = dlock.Redlock([s.url for s in servers], node_timeout=0.2)
    lock = rl.lock(RESOURCE, ttl=30, wait=1)
    rng = random.Random(40)
    interrupted = granted = left_held = 0
    escaped: List[str] = []
    previous = signal.signal(signal.SIGALRM, _interrupt)
    try:
        for _ in range(ITERATIONS):
            lease: Optional[dlock.Lease] = None
            try:
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0001, 0.003))
                    lease = lock.acquire()
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except Interrupt:
                interrupted += 1
            except Exception as e:  # anything else is a defect: counted, shown at the end
                escaped.append(repr(e))
            if lease is not None:
                granted += 1
                lease.release()
            if not _free_everywhere(conns, 2.0):
                left_held += 1
                for c in conns:
                    c.execute_command("DEL", RESOURCE)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        rl.close()
    counts = f"interrupted {interrupted}, granted {granted}, left held {left_held}, escaped {escaped}"
    assert left_held == 0 and not escaped, counts
    # The draw interrupts a good part of the acquires (each takes ~1 ms).
    assert interrupted > 0, counts
