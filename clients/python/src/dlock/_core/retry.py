"""Same-token retries: the pause between attempts and how long a run of
connection failures may last."""

from __future__ import annotations

from typing import Optional

from .effects import Clock, Rand

#: The time a reply may take beyond a call's own deadline: the answer to
#: the last attempt, sent at the deadline, is on its way back.
REPLY_MARGIN = 0.25
#: The longest duration the server takes (2^47 ms), in seconds: "no limit".
LONGEST = float(1 << 47) / 1000


def backoff(attempt: int, rand: Rand) -> float:
    """Pause between same-token retries: 20..200 ms, jittered."""
    base = 20 << min(attempt, 3)
    return min(base + rand(base), 200) / 1000


class Outage:
    """A run of connection failures, and how long it may last."""

    __slots__ = ("since", "attempt", "clock", "rand")

    def __init__(self, clock: Clock, rand: Rand) -> None:
        self.since: Optional[float] = None
        self.attempt = 0
        self.clock = clock
        self.rand = rand

    def next_pause(self, retry_for: float, deadline: float) -> Optional[float]:
        """After a failure: the pause before the next try, or None once the
        outage has lasted ``retry_for`` or the pause would end at or past
        ``deadline``."""
        t = self.clock()
        if self.since is None:
            self.since = t
        pause = backoff(self.attempt, self.rand)
        self.attempt += 1
        resume = t + pause
        if resume < deadline and resume < self.since + retry_for:
            return pause
        return None


def call_deadline(start: float, wait_ms: Optional[int], retry_for: float) -> float:
    """The longest one acquire may take, from ``start``: its wait, or for a
    request that does not wait, ``retry_for``."""
    if wait_ms:
        return start + wait_ms / 1000
    return start + retry_for


def io_until(io_timeout: float, deadline: float, waiting: float, t: float) -> float:
    """The io timeout, beyond the server-side ``waiting``, of a command sent
    at ``t`` for a call that ends at ``deadline``: its reply is due by then,
    plus a reply's margin (and never more than ``io_timeout``)."""
    left = deadline - t + REPLY_MARGIN
    return max(min(io_timeout, left - waiting), 0.001)
