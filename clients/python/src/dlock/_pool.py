"""The bookkeeping of one server's connections (no I/O, no locking of its
own: the blocking pool calls it under its lock, the asyncio pool from its
event loop's thread): the idle ones, how many are open, and who waits for
one when the user's ``max_connections`` caps them.

A waiting ``ACQUIRE ... WAIT`` may hold at most ``max_connections - 1``
connections, so one is always left for the commands that do not wait (a
release, a renewal, a plain try): those never queue behind a waiter. When
no connection may be had, callers queue first in, first out, the ones that
do not wait ahead of the waiting ones."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, List, Optional, Tuple

from .errors import InvalidRequest

Conn = Any

#: redis-py's "no limit" (its ConnectionPool's default in 7.0 and earlier; 8.1 defaults to 100).
UNLIMITED = 2**31

#: The fewest connections per server a cap leaves dlock: one for a
#: waiting acquire, one for everything else.
MIN_CAP = 2


def cap_of(pool: Any) -> Optional[int]:
    """The connection cap a redis-py pool asks for (None: no cap)."""
    n = getattr(pool, "max_connections", None)
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0 or n >= UNLIMITED:
        return None
    return max(n, MIN_CAP)


def phases(waits: float, timeout: float) -> List[Tuple[bool, float]]:
    """How a caller waits in line for a connection: ``(long, until)``,
    ``until`` counted from its start. A command that waits on the server
    (``waits`` seconds) stands in the waiting commands' line for at most
    its wait; then, its wait spent, it stands in the other line for the
    rest of ``timeout``: it runs as a plain try (its wait is computed when
    it runs) and may use the connection kept for commands that do not
    wait."""
    if waits > 0:
        return [(True, waits), (False, timeout)]
    return [(False, timeout)]


def no_free_connection(addr: str, timeout: float, cap: Optional[int]) -> str:
    return f"{addr}: no connection free within {timeout:.3f} s (max_connections {cap})"


def check_max_idle(max_idle: object) -> int:
    if isinstance(max_idle, bool) or not isinstance(max_idle, int) or max_idle < 0:
        raise InvalidRequest(f"max_idle must be a non-negative integer, not {max_idle!r}")
    return max_idle


class Grant:
    """A caller's place in the queue for a connection. Once ``granted``,
    ``conn`` is an idle connection handed over, or None: a slot to open a
    new one in."""

    __slots__ = ("waits", "conn", "granted", "wake")

    def __init__(self, waits: bool, wake: Callable[[], bool]) -> None:
        self.waits = waits
        self.conn: Optional[Conn] = None
        self.granted = False
        #: Tells the caller it was granted; False when it no longer listens
        #: (then nothing is taken for it).
        self.wake = wake


class Slots:
    """One server's connections (see the module's doc)."""

    __slots__ = ("cap", "max_idle", "idle", "open", "waiting", "short_q", "long_q")

    def __init__(self, cap: Optional[int], max_idle: int) -> None:
        self.cap = cap
        self.max_idle = max_idle
        self.idle: List[Conn] = []
        #: Connections open (idle or in use), and in use by waiting commands.
        self.open = 0
        self.waiting = 0
        self.short_q: Deque[Grant] = deque()
        self.long_q: Deque[Grant] = deque()

    def _can(self, waits: bool) -> bool:
        cap = self.cap
        if cap is None:
            return True
        if waits and self.waiting >= cap - 1:
            return False
        return bool(self.idle) or self.open < cap

    def _take(self, waits: bool) -> Optional[Conn]:
        if waits:
            self.waiting += 1
        if self.idle:
            return self.idle.pop()
        self.open += 1
        return None

    def try_take(self, waits: bool) -> Tuple[bool, Optional[Conn]]:
        """``(True, conn)`` (None: open one) when the caller may have a
        connection now without overtaking a queued caller; else
        ``(False, None)``: queue with :meth:`enqueue`."""
        idle = self.idle
        if idle and not self.short_q:
            # The common case at once: an idle connection, nobody queued
            # ahead, and the cap leaves room (``_can``).
            if not waits:
                return True, idle.pop()
            cap = self.cap
            if not self.long_q and (cap is None or self.waiting < cap - 1):
                self.waiting += 1
                return True, idle.pop()
        if self.short_q or (waits and self.long_q) or not self._can(waits):
            return False, None
        return True, self._take(waits)

    def enqueue(self, g: Grant) -> None:
        (self.long_q if g.waits else self.short_q).append(g)

    def leave(self, g: Grant) -> None:
        """A queued caller gives up (its time ran out, or it was
        cancelled) before it was granted."""
        q = self.long_q if g.waits else self.short_q
        try:
            q.remove(g)
        except ValueError:
            pass

    def dispatch(self) -> None:
        """Grants what is free to the queued callers, in order."""
        if not self.short_q and not self.long_q:
            return
        for waits, q in ((False, self.short_q), (True, self.long_q)):
            while q and self._can(waits):
                g = q.popleft()
                if not g.wake():
                    continue
                g.conn = self._take(waits)
                g.granted = True

    def put_back(self, conn: Conn, waited: bool) -> Optional[Conn]:
        """A connection in a known state comes back: kept idle, or returned
        to be closed (too many idle)."""
        if waited:
            self.waiting -= 1
        extra: Optional[Conn] = None
        if len(self.idle) < self.max_idle:
            self.idle.append(conn)
        else:
            self.open -= 1
            extra = conn
        if self.short_q or self.long_q:
            self.dispatch()
        return extra

    def forget(self, waited: bool) -> None:
        """A connection in use was closed (or never opened)."""
        self.open -= 1
        if waited:
            self.waiting -= 1
        self.dispatch()

    def take_idle(self) -> List[Conn]:
        """Every idle connection, to be closed."""
        idle, self.idle = self.idle, []
        self.open -= len(idle)
        self.dispatch()
        return idle
