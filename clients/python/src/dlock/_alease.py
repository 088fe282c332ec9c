"""A lock held through the asyncio API (:class:`Lease`) and the task that
renews it and marks it lost when its budget passes."""

from __future__ import annotations

import asyncio
import warnings
import weakref
from typing import Any, Callable, List, Optional, Sequence, Union

from ._abackend import _Backend
from ._lease import EXTENDED, FAILED, LOST, Renewal, budget_over, retry_pause
from ._spec import (
    Duration,
    Key,
    now,
    seconds,
)
from ._spec import (
    ttl_ms as to_ttl_ms,
)
from .errors import (
    DlockError,
    LockLost,
)

OnLost = Callable[["Lease"], Any]


class Lease:
    """A lock held through the asyncio API: :attr:`fence`, :attr:`token`,
    :attr:`deadline` (``time.monotonic()``), :meth:`remaining`, :attr:`lost`
    and :attr:`lost_event` (an :class:`asyncio.Event`) as in the blocking
    API; ``await lease.extend(ttl)``, ``await lease.release()``,
    ``await lease.wait_lost(timeout)``. The watchdog (and the watch on the
    budget) is a task of the loop the lease was acquired on."""

    def __init__(
        self,
        backend: _Backend,
        fence: int,
        valid_until: float,
        watchdog: bool,
        on_lost: Optional[OnLost],
    ) -> None:
        self._b = backend
        self._fence = fence
        self._ttl_ms = backend.spec.ttl_ms
        self._valid_until = valid_until
        self._lost = False
        self._released = False
        self._event = asyncio.Event()
        self._changed = asyncio.Event()
        self._callbacks: List[Callable[[], Any]] = []
        self._renewing = asyncio.Lock()
        self._renews = watchdog
        self._task: Optional[asyncio.Task] = None
        if on_lost is not None:
            self._callbacks.append(lambda: on_lost(self))
        if now() >= valid_until:
            self._mark_lost()
        elif watchdog or on_lost is not None:
            self._watch()

    # --- state -----------------------------------------------------------------

    def _over(self, t: float) -> bool:
        return budget_over(self._lost, self._valid_until, t)

    def _mark_lost(self) -> None:
        if self._lost:
            return
        self._lost = True
        cbs, self._callbacks = self._callbacks, []
        for cb in cbs:
            try:
                cb()
            except Exception:
                import logging

                logging.getLogger("dlock").exception("dlock: on_lost callback failed")
        self._event.set()
        self._changed.set()

    def _watch(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(_watch(weakref.ref(self), self._changed, self._renews))

    @property
    def fence(self) -> int:
        return self._fence

    @property
    def fences(self) -> List[Optional[int]]:
        return [self._fence]

    @property
    def token(self) -> str:
        return self._b.token

    @property
    def resource(self) -> Key:
        return self._b.spec.resources[0]

    @property
    def resources(self) -> List[Key]:
        return list(self._b.spec.resources)

    @property
    def ttl(self) -> float:
        return self._ttl_ms / 1000

    @property
    def deadline(self) -> float:
        return self._valid_until

    def remaining(self) -> float:
        return max(0.0, self._valid_until - now())

    @property
    def lost(self) -> bool:
        return self._over(now())

    @property
    def released(self) -> bool:
        return self._released

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the lease is lost (answered 0, or the budget passed);
        asking for it starts the task that watches the budget."""
        if not self._lost:
            if now() >= self._valid_until:
                self._mark_lost()
            elif not self._released:
                self._watch()
        return self._event

    def add_lost_callback(self, fn: OnLost) -> None:
        if self._lost:
            fn(self)
            return
        self._callbacks.append(lambda: fn(self))
        if now() >= self._valid_until:
            self._mark_lost()
        elif not self._released:
            self._watch()

    async def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Waits until the lease is lost (or its budget passes) or
        ``timeout`` seconds pass; True if lost."""
        end = None if timeout is None else now() + seconds(timeout)
        while True:
            t = now()
            if self._over(t):
                self._mark_lost()
                return True
            if self._released or (end is not None and t >= end):
                return False
            until = self._valid_until if end is None else min(end, self._valid_until)
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(until - t, 0.0005))
            except asyncio.TimeoutError:
                pass

    # --- what the holder does -----------------------------------------------------

    def _apply(self, r: Renewal, ttl_ms: int) -> bool:
        if r.kind == EXTENDED:
            if self._over(now()):
                self._mark_lost()
                return False
            self._valid_until = r.until
            self._ttl_ms = ttl_ms
            self._changed.set()
            return True
        if r.kind == LOST:
            self._mark_lost()
            return False
        assert r.error is not None
        raise r.error

    async def extend(self, ttl: Optional[Duration] = None) -> bool:
        """Extends the lease to ``ttl`` seconds from now (default: the
        current ttl), counted from the send. False: it had already ended."""
        ms = self._ttl_ms if ttl is None else to_ttl_ms(ttl)
        async with self._renewing:
            if self._over(now()):
                self._mark_lost()
                return False
            return self._apply(await self._b.extend(ms), ms)

    async def release(self) -> bool:
        """Stops the watchdog (letting a renewal under way finish: never a
        renewal after the release), then releases. True: the lock was still
        held and is now free; False: it had already ended or its budget had
        passed."""
        if self._released:
            return False
        self._released = True
        self._changed.set()
        t = self._task
        if t is not None and t is not asyncio.current_task():
            try:
                await asyncio.shield(t)
            except BaseException:
                pass
        over = self._over(now())
        released = await self._b.release(self._valid_until) and not over
        if not released:
            self._mark_lost()
        return released

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        if not await self.release() and et is None:
            raise LockLost(f"the lease on {self.resource!r} was lost before its release")

    def __del__(self) -> None:
        if getattr(self, "_released", True):
            return
        self._released = True
        try:
            self._changed.set()
        except Exception:
            pass
        if not self._lost:
            warnings.warn(
                f"dlock lease on {self.resource!r} was never released; it ends with its ttl",
                ResourceWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        state = "released" if self._released else ("lost" if self.lost else "held")
        return f"<async Lease {self.resource!r} fence={self.fence} token={self.token} {state}>"

    # --- guarded writes (the rules: dlock._guard) ---------------------------------

    async def write(self, *command: Union[str, bytes, int]) -> Any:
        """As :meth:`dlock.Lease.write`: ``DLOCK.GUARD`` with this lease's
        fence; the command's reply."""
        from . import _guard

        return await _guard.awrite(self, command)

    async def write_batch(self, commands: Sequence[Sequence[Union[str, bytes, int]]]) -> List[Any]:
        """As :meth:`dlock.Lease.write_batch`: all or none; the replies."""
        from . import _guard

        return await _guard.awrite_batch(self, commands)

    async def check(self) -> bool:
        """As :meth:`dlock.Lease.check`: ``DLOCK.CHECK``; False marks the
        lease lost."""
        from . import _guard

        return await _guard.acheck(self)


async def _watch(ref: "weakref.ref[Lease]", changed: asyncio.Event, renew: bool) -> None:
    """The task behind a lease: renews a third of the ttl after the last
    grant or renewal was sent, retries a failed renewal while the budget
    lasts, and marks the lease lost when the budget passes. Holds the lease
    only weakly between wake-ups: an abandoned lease is not renewed."""
    retry_under: Optional[float] = None
    retry_at = 0.0
    while True:
        lease = ref()
        if lease is None or lease._released or lease._lost:
            return
        t = now()
        if t >= lease._valid_until:
            lease._mark_lost()
            return
        if renew:
            if retry_under is not None and retry_under == lease._valid_until:
                due = retry_at
            else:
                due = lease._valid_until - (lease._ttl_ms - lease._ttl_ms // 3) / 1000
            wake = min(due, lease._valid_until)
        else:
            due = None
            wake = lease._valid_until
        if due is None or t < due:
            changed.clear()
            del lease
            try:
                await asyncio.wait_for(changed.wait(), max(wake - t, 0.0005))
            except asyncio.TimeoutError:
                pass
            continue
        async with lease._renewing:
            if lease._released or lease._lost:
                return
            if now() >= lease._valid_until:
                lease._mark_lost()
                return
            ttl, under = lease._ttl_ms, lease._valid_until
            try:
                r = await lease._b.extend(ttl)
            except Exception as e:
                r = Renewal(FAILED, error=DlockError(str(e)))
            if r.kind == EXTENDED:
                if not lease._over(now()):
                    lease._valid_until = r.until
                    retry_under = None
                    lease._changed.set()
                    continue
                lease._mark_lost()
                return
            if r.kind == LOST:
                lease._mark_lost()
                return
            retry_under, retry_at = under, now() + retry_pause(ttl)


