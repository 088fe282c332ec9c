"""A lock held through the asyncio API (:class:`Lease`) and the task that
renews it and marks it lost when its budget passes: the asyncio shell over
the rules of ``_core.lease`` (the blocking ``Lease`` is the other)."""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
import weakref
from typing import Any, Callable, List, Optional, Sequence, Union

from ._abackend import _Backend, in_background
from ._core.lease import (
    EXTENDED,
    FAILED,
    IGNORED,
    LEAVE_DONE,
    LEAVE_FOREIGN,
    LOSE,
    LOST,
    RENEW,
    SLEEP,
    STOP,
    LeaseState,
    Renewal,
    cap_of,
)
from ._core.retry import REPLY_MARGIN
from ._lease import FOREIGN, note_release_failure
from ._spec import Duration, Key, now, seconds
from ._spec import ttl_ms as to_ttl_ms
from .errors import DlockError, InvalidRequest, lost_error

log = logging.getLogger("dlock")

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
        self._st = LeaseState(backend.spec.ttl_ms, valid_until, os.getpid())
        self._st.cap = cap_of(backend)
        self._event = asyncio.Event()
        self._changed = asyncio.Event()
        self._callbacks: List[Callable[[], Any]] = []
        self._renewing = asyncio.Lock()
        self._renews = watchdog
        self._task: Optional["asyncio.Task[None]"] = None
        if on_lost is not None:
            self._callbacks.append(lambda: on_lost(self))
        if now() >= valid_until:
            self._mark_lost()
        elif watchdog or on_lost is not None:
            self._watch()

    # --- state -----------------------------------------------------------------

    def _mark_lost(self) -> None:
        if self._st.lost:
            return
        self._st.lost = True
        cbs, self._callbacks = self._callbacks, []
        for cb in cbs:
            try:
                cb()
            except Exception:  # a callback's failure must not stop the signal
                log.exception("dlock: on_lost callback failed")
        self._event.set()
        self._changed.set()

    def _check_budget(self) -> bool:
        """Marks the lease lost if its budget passed; True if it is lost."""
        if self._st.budget_passed(now()):
            self._mark_lost()
        return self._st.lost

    def _watch(self) -> None:
        if self._st.watch(self._renews) or self._task is None:
            self._changed.set()
            if self._task is None or self._task.done():
                self._task = asyncio.ensure_future(_watch(weakref.ref(self), self._changed))

    def _give_back(self) -> None:
        """An interrupt kept this lease from its caller: stop renewing and
        release it, best effort, in the background."""
        self._st.released = True
        self._changed.set()
        b: Any = self._b  # a Redlock's lease has a backend of its own
        if isinstance(b, _Backend):
            in_background(b.abandon(now() + REPLY_MARGIN))
        else:
            in_background(_release_quietly(b, self._st.valid_until))

    def _check_owner(self) -> None:
        if not self._st.owned_by(os.getpid()):
            raise InvalidRequest(FOREIGN)

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
        return self._st.ttl_ms / 1000

    @property
    def deadline(self) -> float:
        return self._st.valid_until

    def remaining(self) -> float:
        return max(0.0, self._st.valid_until - now())

    @property
    def lost(self) -> bool:
        """True once the lease is known lost or its budget has passed (even
        while a renewal is out); never after a release that returned True."""
        return self._st.lost_at(now())

    @property
    def loss_reason(self) -> Optional[str]:
        """Why the lease was lost, for a capped lease (``max_hold``): its
        budget ended at the cap (``MAXHOLD the hold reached its cap ...``),
        or the server refused an extend past it, as the server sent it
        (``MAXHOLD the hold may live N ms more: ...``). None while held,
        and for a lease that simply ended (expired, released, taken over)."""
        return self._st.reason_at(now())

    @property
    def released(self) -> bool:
        return self._st.released

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the lease is lost (answered 0, or the budget passed);
        asking for it starts the task that watches the budget."""
        if not self._check_budget() and not self._st.released:
            self._watch()
        return self._event

    def add_lost_callback(self, fn: OnLost) -> None:
        if self._st.lost:
            fn(self)
            return
        self._callbacks.append(lambda: fn(self))
        if not self._check_budget() and not self._st.released:
            self._watch()

    async def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Waits until the lease is lost (or its budget passes) or
        ``timeout`` seconds pass; True if lost."""
        end = None if timeout is None else now() + seconds(timeout)
        st = self._st
        while True:
            t = now()
            if st.lost_at(t):
                self._mark_lost()
                return True
            if st.released or (end is not None and t >= end):
                return False
            until = st.valid_until if end is None else min(end, st.valid_until)
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(until - t, 0.0005))
            except asyncio.TimeoutError:
                pass

    # --- what the holder does -----------------------------------------------------

    def _after_renewal(self, r: Renewal, ttl_ms: int, under: float, watchdog: bool = False) -> str:
        verdict = self._st.renewed(r, ttl_ms, under, now(), watchdog)
        if verdict == LOST:
            self._mark_lost()
        elif verdict != IGNORED:
            self._changed.set()
        return verdict

    async def _renew(self, ttl_ms: int, under: float) -> str:
        """One renewal (already counted out by the rules), applied."""
        try:
            r = await self._b.extend(ttl_ms)
        except asyncio.CancelledError:
            self._st.in_flight -= 1
            raise
        except Exception as e:  # a backend bug must not end renewal silently
            log.exception("dlock: renewal failed")
            r = Renewal(FAILED, error=DlockError(str(e)))
        return self._after_renewal(r, ttl_ms, under, watchdog=True)

    async def extend(self, ttl: Optional[Duration] = None) -> bool:
        """Extends the lease to ``ttl`` seconds from now (default: the
        current ttl), counted from the send. False: it had already ended,
        or its budget passed (also while this ``EXTEND`` went unanswered:
        its wait ends with the budget).
        Raises :class:`~dlock.InvalidRequest` in a forked child."""
        self._check_owner()
        ms = self._st.ttl_ms if ttl is None else to_ttl_ms(ttl)
        async with self._renewing:
            under = self._st.valid_until
            if not self._st.begin_extend(now()):
                if not self._st.released:
                    self._mark_lost()
                return False
            try:
                # A one-server lease's renewal waits no longer than its
                # budget: an answer after it would be a loss anyway.
                b: Any = self._b
                if type(b) is _Backend:
                    r = await b.extend_within(ms, under)
                else:
                    r = await b.extend(ms)
            except BaseException:
                self._st.in_flight -= 1
                raise
            verdict = self._after_renewal(r, ms, under)
        if verdict == EXTENDED:
            return True
        if verdict in (LOST, IGNORED):
            return False
        assert r.error is not None
        raise r.error

    async def release(self) -> bool:
        """Stops the watchdog, then releases. True: the lock was still held
        and is now free; False: it had already ended or its budget had
        passed (the ``RELEASE`` is sent all the same, and its failure changes
        no answer). A renewal still out is not waited for (a ``RELEASE`` may
        overtake it: the ``EXTEND`` then answers 0 and revives nothing), and
        none starts after. Raises :class:`~dlock.InvalidRequest` in a forked
        child."""
        return await self._release(wait_if_lost=True)

    async def _release(self, wait_if_lost: bool) -> bool:
        self._check_owner()
        st = self._st
        over = st.begin_release(now())
        if over is None:
            return False
        self._changed.set()
        if not over:
            released = await self._b.release(st.valid_until)
        elif wait_if_lost:
            await _release_quietly(self._b, st.valid_until)
            released = False
        else:
            in_background(_release_quietly(self._b, st.valid_until))
            released = False
        if not st.released_as(released, over):
            self._mark_lost()
            return False
        return True

    async def _leave(self, exc_type: Any, exc: Optional[BaseException], raise_on_lost: bool) -> None:
        """Leaving an ``async with`` block (see the blocking ``Lease._leave``):
        releases; LockLost if the lease was lost (when asked to, and only if
        the block raised nothing); the block's exception never replaced; an
        early release not repeated; nothing at all in a forked child."""
        plan = self._st.leaving(os.getpid())
        if plan == LEAVE_FOREIGN:
            return
        if plan == LEAVE_DONE:
            lost = self._st.release_ok is False
        else:
            try:
                # A lease known lost: its RELEASE is a courtesy nobody waits
                # for (the server may be gone).
                lost = not await self._release(wait_if_lost=False)
            except DlockError as e:
                if exc_type is None:
                    raise
                note_release_failure(exc, e, self.resource)
                return
        if lost and exc_type is None and raise_on_lost:
            raise lost_error(self.resource, self._st.loss_reason)

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        await self._leave(et, ev, True)

    def __del__(self) -> None:
        st = getattr(self, "_st", None)
        if st is None or st.released or not st.owned_by(os.getpid()):
            return
        st.released = True
        try:
            self._changed.set()
        except Exception:
            pass
        if not st.lost:
            warnings.warn(
                f"dlock lease on {self.resource!r} was never released; it ends with its ttl",
                ResourceWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        state = "released" if self.released else ("lost" if self.lost else "held")
        return f"<async Lease {self.resource!r} fence={self.fence} {state}>"

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


async def _release_quietly(backend: _Backend, valid_until: float) -> None:
    try:
        await backend.release(valid_until)
    except DlockError as e:
        log.debug("dlock: releasing a lost lease failed: %s", e)


async def _watch(ref: "weakref.ref[Lease]", changed: asyncio.Event) -> None:
    """The task behind a lease: does what the rules decide at each look
    (renew, mark lost, sleep until the next look). A renewal runs as a task
    of its own, so that the budget's end is watched while it is out. Holds
    the lease only weakly between wake-ups: an abandoned lease is not
    renewed."""
    while True:
        lease = ref()
        if lease is None:
            return
        st = lease._st
        action, arg = st.look(now(), os.getpid())
        if action == STOP:
            return
        if action == LOSE:
            lease._mark_lost()
            return
        if action == RENEW:
            # The rules counted the renewal out: the next look is the
            # budget's end (or the renewal's outcome, whichever first).
            in_background(_renew_in_turn(lease, int(arg), st.valid_until))
            continue
        assert action == SLEEP
        wake = arg - now()
        changed.clear()
        del lease, st
        try:
            await asyncio.wait_for(changed.wait(), max(wake, 0.0005))
        except asyncio.TimeoutError:
            pass


async def _renew_in_turn(lease: Lease, ttl_ms: int, under: float) -> None:
    """The watchdog's renewal, after any renewal of the holder's."""
    async with lease._renewing:
        if lease._st.released or lease._st.lost:
            lease._st.in_flight -= 1
            lease._changed.set()
            return
        await lease._renew(ttl_ms, under)
