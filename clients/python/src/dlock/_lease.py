"""A held lock (:class:`Lease`): its token, fence and lease budget; extend,
release; and the watchdog that renews it and in any case marks it lost
when its budget passes. The rules (when to renew, what a renewal's outcome
does, when the lease is lost, what leaving a ``with`` block does) are
``_core.lease``'s; this module is their blocking shell.

The same lease serves a lock on one server and a Redlock over several:
what differs is the backend behind it (its ``extend(ttl_ms) -> Renewal``
and ``release(valid_until) -> bool``).

The watchdog's threads (a scheduler and a pool of workers) are
``_watchdog``'s.
"""

from __future__ import annotations

import logging
import threading
import warnings
import weakref
from typing import Any, Callable, List, Optional, Sequence, Union

from ._core.lease import (
    EXTENDED,
    FAILED,
    IGNORED,
    LEAVE_DONE,
    LEAVE_FOREIGN,
    LOST,
    Renewal,
    budget_over,
    retry_pause,
)
from ._core.retry import REPLY_MARGIN
from ._process import pid
from ._single import SingleBackend
from ._spec import Duration, Key, now, seconds, ttl_ms as to_ttl_ms
from ._watchdog import _Shared
from .errors import DlockError, InvalidRequest, lost_error

__all__ = ["EXTENDED", "FAILED", "LOST", "Lease", "OnLost", "Renewal", "budget_over", "retry_pause"]

log = logging.getLogger("dlock")

#: Called once when the lease is found lost, with the lease.
OnLost = Callable[["Lease"], Any]

FOREIGN = "the lease belongs to the parent process (it was acquired before a fork): only the parent renews or releases it"


def note_release_failure(exc: Optional[BaseException], error: BaseException, resource: Key) -> None:
    """The release after a failed block failed too: the block's exception
    goes on (never replaced), the release's error is logged and noted on
    it."""
    log.warning("dlock: releasing %r after the block failed: %s", resource, error)
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(f"dlock: releasing {resource!r} failed too: {error}")


def _extend_within(backend: Any, ttl_ms: int, budget: float) -> Renewal:
    """The holder's renewal: a plain one-server lease's I/O ends with its
    budget (an answer after it would be a loss anyway); a Redlock's round
    is bounded by its own timeout, a session's renewal by the session's."""
    if type(backend) is SingleBackend:
        return backend.extend_within(ttl_ms, budget)
    r: Renewal = backend.extend(ttl_ms)
    return r


def _release_quietly(backend: Any, valid_until: float) -> None:
    try:
        backend.release(valid_until)
    except DlockError as e:
        log.debug("dlock: releasing a lost lease failed: %s", e)


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
      ``RELEASE`` answered 0) or its budget has passed, even while a renewal
      is still out; :attr:`lost_event` (a :class:`threading.Event`) is set
      then, after the ``on_lost`` callback ran.

    ``release()`` (or leaving the ``with`` block) stops the watchdog, then
    releases. A lease that is never released is not renewed once it is
    garbage collected: it ends with its ttl. A lease belongs to the process
    that acquired it: a forked child never renews or releases it.
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

    def _give_back(self) -> None:
        """An interrupt kept this lease from its caller: stop renewing and
        release it, best effort, within a reply's margin."""
        sh = self._sh
        with sh.lock:
            sh.state.released = True
            sh.gen += 1
            sh.notify()
        try:
            if isinstance(sh.backend, SingleBackend):
                sh.backend.abandon(now() + REPLY_MARGIN)
            else:
                sh.backend.release(sh.state.valid_until)
        except DlockError as e:
            log.debug("dlock: giving back an interrupted grant failed: %s", e)

    def _check_owner(self) -> None:
        if not self._sh.state.owned_by(pid()):
            raise InvalidRequest(FOREIGN)

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
        return self._sh.state.ttl_ms / 1000

    @property
    def deadline(self) -> float:
        """The instant (``time.monotonic()``) until which the lease surely
        lasts: counted from when the grant or last renewal was sent."""
        return self._sh.state.valid_until

    def remaining(self) -> float:
        """Seconds left on the lease budget (0 once it has passed)."""
        return max(0.0, self._sh.state.valid_until - now())

    @property
    def lost(self) -> bool:
        """True once the lease is known lost (an ``EXTEND`` or ``RELEASE``
        answered 0) or its budget has passed (a renewal still under way
        does not stretch the budget). Never true after a release that
        returned True."""
        return self._sh.state.lost_at(now())

    @property
    def loss_reason(self) -> Optional[str]:
        """Why the lease was lost, for a capped lease (``max_hold``): its
        budget ended at the cap (``MAXHOLD the hold reached its cap ...``),
        or the server refused an extend past it, as the server sent it
        (``MAXHOLD the hold may live N ms more: ...``). None while held,
        and for a lease that simply ended (expired, released, taken over)."""
        with self._sh.lock:
            return self._sh.state.reason_at(now())

    @property
    def released(self) -> bool:
        return self._sh.state.released

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lease is lost: an ``EXTEND`` or ``RELEASE`` answered
        0, or the budget passed (with or without a watchdog). Asking for it
        starts watching the budget."""
        sh = self._sh
        if not sh.check_budget() and not sh.state.released:
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
            run_now = sh.state.lost
            if not run_now:
                sh.callbacks.append(call)
        if run_now:
            fn(self)
        elif not sh.check_budget() and not sh.state.released:
            self._watch()

    def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Blocks until the lease is lost (or its budget passes) or
        ``timeout`` seconds pass; True if lost. A change of deadline
        meanwhile (an ``extend`` on another thread) is followed."""
        end = None if timeout is None else now() + seconds(timeout)
        sh = self._sh
        st = sh.state
        with sh.lock:
            cond = sh.cond()
            while True:
                t = now()
                if st.lost_at(t):
                    break
                if st.released or (end is not None and t >= end):
                    return False
                until = st.valid_until if end is None else min(end, st.valid_until)
                cond.wait(until - t)
        sh.mark_lost()
        return True

    # --- what the holder does -------------------------------------------------

    def extend(self, ttl: Optional[Duration] = None) -> bool:
        """Extends the lease to ``ttl`` seconds from now (default: the
        current ttl); the budget counts from when the ``EXTEND`` was sent.
        False: the lease had already ended (or its budget had passed, also
        while this ``EXTEND`` went unanswered: its wait ends with the
        budget), and the lease is now lost. The watchdog, if any, renews with this ttl
        from now on, a third of it after this renewal. Raises
        :class:`~dlock.Unavailable` (or :class:`~dlock.TooFewReplicas`)
        when the renewal did not get through; the budget stays as it was.
        Raises :class:`~dlock.InvalidRequest` in a forked child."""
        self._check_owner()
        sh = self._sh
        ms = sh.state.ttl_ms if ttl is None else to_ttl_ms(ttl)
        if sh.state.over(now()):
            # Known over: answered without waiting for a renewal still out
            # (an on_lost callback that extends must not wait on a paused
            # server while other losses queue behind it).
            if not sh.state.released:
                sh.mark_lost()
            return False
        with sh.renewing:
            with sh.lock:
                ok = sh.state.begin_extend(now())
                under, released = sh.state.valid_until, sh.state.released
            if not ok:
                if not released:
                    sh.mark_lost()
                return False
            try:
                r = _extend_within(sh.backend, ms, under)
            except BaseException:
                with sh.lock:
                    sh.state.in_flight -= 1
                raise
            verdict = sh.after_renewal(r, ms, under)
        if verdict == EXTENDED:
            return True
        if verdict in (LOST, IGNORED):
            return False
        assert r.error is not None
        raise r.error

    def release(self) -> bool:
        """Stops the watchdog, then releases. True: the lock was still held
        and is now free. False: it had already ended, or its budget had
        passed (the lease was lost, whether or not anyone noticed before;
        the ``RELEASE`` is sent all the same, and its failure changes no
        answer). A second call answers False without asking the server.
        A renewal still out is not waited for (a ``RELEASE`` may overtake an
        ``EXTEND``: the ``EXTEND`` then answers 0 and revives nothing), and
        none starts after. Raises :class:`~dlock.InvalidRequest` in a forked
        child: the lease is its parent's."""
        return self._release(wait_if_lost=True)

    def _release(self, wait_if_lost: bool) -> bool:
        """``release()``; a lease known lost has its ``RELEASE`` sent in
        the background unless ``wait_if_lost``."""
        self._check_owner()
        sh = self._sh
        with sh.lock:
            over = sh.state.begin_release(now())
            if over is None:
                return False
            sh.gen += 1  # the scheduled look is stale
            sh.notify()
            valid_until = sh.state.valid_until
        if not over:
            released = sh.backend.release(valid_until)
        elif wait_if_lost:
            _release_quietly(sh.backend, valid_until)
            released = False
        else:
            threading.Thread(
                target=_release_quietly, args=(sh.backend, valid_until), name="dlock-release", daemon=True
            ).start()
            released = False
        with sh.lock:
            released = sh.state.released_as(released, over)
        if not released:
            sh.mark_lost()
        return released

    def _leave(self, exc_type: Any, exc: Optional[BaseException], raise_on_lost: bool) -> None:
        """Leaving a ``with`` block: releases, and raises
        :class:`~dlock.LockLost` if the lease was lost (when asked to, and
        only if the block itself raised nothing). The block's exception is
        never replaced: a release error after it is logged and noted on it.
        Released early by the holder: nothing is sent again. In a forked
        child: nothing is sent and nothing raised."""
        sh = self._sh
        with sh.lock:
            plan = sh.state.leaving(pid())
            release_ok = sh.state.release_ok
        if plan == LEAVE_FOREIGN:
            return
        if plan == LEAVE_DONE:
            lost = release_ok is False
        else:
            try:
                # A lease known lost: its RELEASE is a courtesy nobody waits
                # for (the server may be gone).
                lost = not self._release(wait_if_lost=False)
            except DlockError as e:
                if exc_type is None:
                    raise
                note_release_failure(exc, e, self.resource)
                return
        if lost and exc_type is None and raise_on_lost:
            raise lost_error(self.resource, self._sh.state.loss_reason)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self._leave(et, ev, True)

    def __del__(self) -> None:
        sh = getattr(self, "_sh", None)
        if sh is None or sh.state.released or not sh.state.owned_by(pid()):
            return
        # Not released by its holder: stop renewing, so the lease ends with
        # its ttl (a watchdog must never outlive its holder).
        with sh.lock:
            sh.state.released = True
            sh.gen += 1
            sh.notify()
        if not sh.state.lost:
            warnings.warn(
                f"dlock lease on {self._resources[0]!r} was never released; it ends with its ttl",
                ResourceWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        state = "released" if self.released else ("lost" if self.lost else "held")
        return f"<Lease {self.resource!r} fence={self.fence} remaining={self.remaining():.3f}s {state}>"

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
