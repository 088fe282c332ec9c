"""The blocking :class:`Lock`: one lock request, used as redis-py's and
``threading``'s locks are (``acquire``/``release``/``locked``/``owned``/
``extend``, ``with``, a decorator) and as the Rust client's
``LockRequest::run``."""

from __future__ import annotations

import functools
import inspect
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional, Type, TypeVar

from ._core.retry import REPLY_MARGIN
from ._lease import Lease, OnLost
from ._request import (
    _UNSET,
    PER_THREAD,
    Entered,
    GivenToken,
    Held,
    Wait,
    call_wait_ms,
    given_wait,
    is_held,
    lock_settings,
    resources_text,
    thread_owner,
    wait_ms,
)
from ._single import OnRetry, SingleBackend
from ._wanted import OnWanted, wanted_state
from ._spec import _max_hold, Duration, Key, Spec, check_token, new_token, now
from .errors import DlockError, InvalidRequest, LockLost, NotAcquired

if TYPE_CHECKING:
    from .locker import Locker

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Lock:
    """One lock request, reusable, for any number of threads.

    - ``with lock as lease:`` acquires (raises :class:`~dlock.NotAcquired`
      when not granted), renews with the watchdog, and releases on leaving
      (raises :class:`~dlock.LockLost` if the lease was lost meanwhile).
    - ``lock.acquire()`` returns the :class:`~dlock.Lease` (truthy) or None,
      renews it with the watchdog as ``with`` does (unless ``watchdog=False``),
      and keeps it for the calling thread: ``lock.release()``,
      ``lock.extend(ttl)`` and ``lock.owned()`` act on the leases this Lock
      holds for the calling thread (the most recent one). ``lock.locked()``
      asks the server whether anyone holds the resource.
    - ``@lock`` runs a function under the lock; ``lock.run(fn, *args)``
      runs it and returns its result, or None when not granted.

    Each ``acquire()``/``with`` takes a hold of its own: nested on one
    thread, a reentrant lock nests; a plain lock's inner one waits for the
    outer one.

    Leaving a ``with`` block releases the most recent block the calling
    thread entered on this Lock; on a thread that entered none (an
    ``ExitStack`` closed on another thread), the most recent block of this
    Lock entered anywhere in the process and not left yet. With no block
    open, leaving raises :class:`~dlock.NotOwned`.
    """

    def __init__(
        self,
        locker: "Locker",
        spec: Spec,
        *,
        wait: Wait,
        blocking: bool,
        watchdog: Optional[bool],
        on_lost: Optional[OnLost],
        token: Optional[str],
        retry_for: Optional[Duration],
        min_replicas: Optional[int],
        replicas_timeout: Optional[Duration],
        on_retry: Optional[OnRetry],
        raise_on_lost: bool,
        blocking_timeout: Wait = _UNSET,
        on_wanted: Optional[OnWanted] = None,
    ) -> None:
        check_token(token)
        w = given_wait(_UNSET if wait is None else wait, blocking_timeout)
        self.locker = locker
        self.spec = spec
        self.wait: Wait = None if w is _UNSET else w
        self.blocking = blocking
        self.watchdog = watchdog
        self.on_lost = on_lost
        self.on_wanted = on_wanted
        self.token = token
        self.on_retry = on_retry
        self.raise_on_lost = raise_on_lost
        self.settings = lock_settings(locker.settings, retry_for, min_replicas, replicas_timeout)
        self._local = threading.local()
        self._entered: Entered[Lease] = Entered()
        self._given = GivenToken()

    @property
    def resource(self) -> Key:
        return self.spec.resources[0]

    def _held(self) -> "Held[Lease]":
        h: Optional[Held[Lease]] = getattr(self._local, "held", None)
        if h is None:
            h = self._local.held = Held()
        return h

    def _wait_ms(self, blocking: Optional[bool], wait: Any = _UNSET, blocking_timeout: Any = _UNSET) -> Optional[int]:
        return call_wait_ms(self.blocking, self.wait, blocking, given_wait(wait, blocking_timeout))

    def _watchdog(self, watchdog: Optional[bool]) -> bool:
        """Renew or not: the call's choice, else the lock's, else the
        locker's, else yes."""
        for choice in (watchdog, self.watchdog, self.locker.watchdog):
            if choice is not None:
                return bool(choice)
        return True

    def _take(self, wait_ms: Optional[int], token: Optional[str], watchdog: bool) -> Optional[Lease]:
        """One acquisition on the server (the part a Redlock does its own way)."""
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, thread_owner(), _max_hold(spec), spec.priority, spec.permits)
        given = token or self.token
        tok = given or new_token()
        if given:
            self._given.reserve(given)
        backend = SingleBackend(self.locker.topology, spec, tok, self.settings)
        lease: Optional[Lease] = None
        try:
            try:
                got = backend.acquire(wait_ms, self.on_retry)
                if got is None:
                    return None
                fence, valid_until = got
                lease = Lease(backend, spec.resources, tok, [fence], spec.ttl_ms, valid_until, watchdog, self.on_lost)
                if self.on_wanted is not None:
                    backend.rules.wanted = wanted_state(lease, self.on_wanted)
                return lease
            finally:
                if given:
                    self._given.settle(given, lease)
        except BaseException:
            # An interrupt between the grant and its caller: give it back.
            if lease is not None:
                lease._give_back()
            elif backend.rules.granted:
                try:
                    backend.abandon(now() + REPLY_MARGIN)
                except DlockError:
                    pass
            raise

    def _keep(self, wait_ms: Optional[int], token: Optional[str], watchdog: bool, entering: bool) -> Optional[Lease]:
        """Takes a lease and records it for the calling thread (and as an
        open block); an interrupt before it is recorded gives it back."""
        lease: Optional[Lease] = None
        try:
            lease = self._take(wait_ms, token, watchdog)
            if lease is not None:
                if entering:
                    self._entered.push(lease, self._held())
                else:
                    self._held().add(lease)
        except BaseException:
            if lease is not None:
                lease._give_back()
            raise
        return lease

    # --- as threading.Lock and redis-py's Lock ---------------------------------

    def acquire(
        self,
        blocking: Optional[bool] = None,
        wait: Wait = _UNSET,
        *,
        blocking_timeout: Wait = _UNSET,
        token: Optional[str] = None,
        watchdog: Optional[bool] = None,
    ) -> Optional[Lease]:
        """Acquires: the :class:`~dlock.Lease` when granted (truthy), None
        when busy or the wait ran out; ``lock.acquire(True, 5)`` and
        ``lock.acquire(blocking=False)`` read as with ``threading``.

        - ``blocking``/``wait`` override the lock's; ``blocking_timeout`` is
          redis-py's name for ``wait``. A wait of None or -1 lasts as long
          as the server allows; another negative wait is refused.
        - ``watchdog``: renew until released (default: yes, as in a ``with``
          block; the Locker's or the lock's ``watchdog=False`` turns it off).
          A lease that is never released stops being renewed once it and
          this Lock are garbage collected.
        - ``token``: acquire with this token (a retry of that acquisition).

        Connection errors are retried with the same token for
        ``retry_for`` in a row; the call ends by its wait (a call that does
        not wait: after ``retry_for``) plus 250 ms for a reply in flight."""
        check_token(token)
        ms = self._wait_ms(blocking, wait, blocking_timeout)
        return self._keep(ms, token, self._watchdog(watchdog), False)

    def release(self) -> bool:
        """Releases the most recent lease this Lock holds for the calling
        thread: True. Raises :class:`~dlock.NotOwned` (a ``RuntimeError``)
        when it holds none, and :class:`~dlock.LockLost` when the lease had
        been lost (``raise_on_lost=False``: answers False instead)."""
        held = self._held()
        lease = held.latest("release", self.resource)
        held.discard(lease)
        released = lease.release()
        if not released and self.raise_on_lost:
            raise LockLost(f"the lease on {resources_text(self.spec)} was lost before its release")
        return released

    def extend(self, ttl: Optional[Duration] = None) -> bool:
        """Extends the most recent lease this Lock holds for the calling
        thread to ``ttl`` seconds from now (default: its ttl): True.
        :class:`~dlock.NotOwned` when it holds none; :class:`~dlock.LockLost`
        when the lease was lost (``raise_on_lost=False``: False)."""
        lease = self._held().latest("extend", self.resource)
        extended = lease.extend(ttl)
        if not extended and self.raise_on_lost:
            raise LockLost(f"the lease on {resources_text(self.spec)} was lost before the extend")
        return extended

    def owned(self) -> bool:
        """Whether this Lock holds a live lease (not released, not lost) for
        the calling thread. Asks no server: a lease's loss is known from its
        budget and its watchdog."""
        return self._held().owned()

    def locked(self) -> bool:
        """Whether anyone holds the resource (any member of a set), by
        ``DLOCK.INFO``: this thread, another, another process."""
        quorum: Optional[int] = getattr(self.locker, "quorum", None)
        return any(is_held(self.locker.info(r), quorum) for r in self.spec.resources)

    # --- with, decorator, run ----------------------------------------------------

    def _enter(self, busy_raises: bool) -> Optional[Lease]:
        lease = self._keep(self._wait_ms(None), None, self._watchdog(None), True)
        if lease is None and busy_raises:
            raise NotAcquired(f"{resources_text(self.spec)} is busy")
        return lease

    def __enter__(self) -> Lease:
        lease = self._enter(True)
        assert lease is not None
        return lease

    def __exit__(
        self,
        et: Optional[Type[BaseException]],
        ev: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        lease = self._entered.pop(self._held(), self.resource)
        lease._leave(et, ev, self.raise_on_lost)

    def __call__(self, fn: F) -> F:
        """``@locker.lock("res", wait=5)``: each call of ``fn`` runs inside
        ``with`` this lock (:class:`~dlock.NotAcquired` when not granted)."""
        if inspect.iscoroutinefunction(fn):
            raise InvalidRequest(
                f"{fn!r} is a coroutine function: decorate it with a dlock.asyncio Lock"
            )

        @functools.wraps(fn)
        def under_lock(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return under_lock  # type: ignore[return-value]

    def run(self, fn: Callable[..., T], *args: Any) -> Optional[T]:
        """Runs ``fn(*args)`` under the lock, as the Rust client's
        ``LockRequest::run``: its result, or None when the lock was not
        granted (busy, or the wait ran out; a function that may return None
        itself is better run in a ``with`` block). Renewed while it runs;
        raises :class:`~dlock.LockLost` when the lease was lost meanwhile
        (``raise_on_lost=True``, the default), and ``fn``'s own exception
        as it is."""
        if self._enter(False) is None:
            return None
        try:
            out = fn(*args)
        except BaseException as e:
            self.__exit__(type(e), e, e.__traceback__)
            raise
        self.__exit__(None, None, None)
        return out

    def __repr__(self) -> str:
        return f"<Lock {self.spec.resources!r}>"



__all__ = ["Lock", "wait_ms"]
