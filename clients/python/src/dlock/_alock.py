"""The asyncio :class:`Lock`: the blocking Lock's API, awaitable.

Every call that acts for "the calling task" (``acquire``, ``release``,
``extend``, ``run``) is a plain function that reads the calling task, and
checks its arguments, when it is called, and returns the coroutine that
does the work. So ``await asyncio.wait_for(lock.acquire(), 3)``, which on
Python 3.11 runs the coroutine in a task of its own, acquires for the
caller: a reentrant lock nests, and ``lock.release()`` finds the lease."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import socket
import threading
import weakref
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Optional,
    Type,
    TypeVar,
)

from ._abackend import _Backend, in_background
from ._alease import Lease, OnLost
from ._awanted import OnWanted, wanted_state
from ._core.retry import REPLY_MARGIN
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
    resources_text,
)
from ._single import OnRetry, Settings
from ._spec import _max_hold, Duration, Key, Spec, check_token, new_token, now
from .errors import InvalidRequest, LockLost, NotAcquired

if TYPE_CHECKING:
    from ._alocker import Locker

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_NONCE = os.urandom(4).hex()
_HOST = socket.gethostname()
_task_ids: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = weakref.WeakKeyDictionary()
_task_counter = [0]
_task_lock = threading.Lock()


def _owner_of(task: "Optional[asyncio.Task[Any]]") -> str:
    with _task_lock:
        n = _task_ids.get(task) if task is not None else None
        if n is None:
            _task_counter[0] += 1
            n = _task_counter[0]
            if task is not None:
                _task_ids[task] = n
    return f"{_HOST}:{os.getpid()}:{_NONCE}:task-{n}"


def task_owner() -> str:
    """The default owner of a reentrant lock in asyncio: this host,
    process and task (a task is what nests ``async with`` blocks)."""
    return _owner_of(_calling_task())


def _calling_task() -> "Optional[asyncio.Task[Any]]":
    """The task that calls (None outside a running event loop: the
    coroutine then reads it when it runs)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class Lock:
    """One lock request for asyncio, reusable by any number of tasks: the
    blocking :class:`dlock.Lock`'s API with ``await``.

    - ``async with lock as lease:`` (:class:`~dlock.NotAcquired` when not
      granted; :class:`~dlock.LockLost` on leaving if the lease was lost).
    - ``await lock.acquire()``: the Lease (truthy) or None, renewed with the
      watchdog; kept for the calling task: ``await lock.release()``,
      ``await lock.extend(ttl)`` and ``lock.owned()`` act on it.
      ``await lock.locked()`` asks the server whether anyone holds it.
    - ``@lock`` on a coroutine function; ``await lock.run(fn, *args)``.

    The calling task is the one that *calls* ``acquire()``/``release()``,
    also when the returned coroutine is awaited through
    ``asyncio.wait_for`` or made a task of its own.

    Leaving an ``async with`` block releases the most recent block the
    calling task entered on this Lock; in a task that entered none (an
    ``AsyncExitStack`` closed in another task, an async fixture's teardown,
    another event loop), the most recent block of this Lock entered
    anywhere in the process and not left yet. With no block open, leaving
    raises :class:`~dlock.NotOwned`.
    """

    def __init__(
        self,
        locker: "Locker",
        spec: Spec,
        wait: Wait,
        blocking: bool,
        watchdog: Optional[bool],
        on_lost: Optional[OnLost],
        token: Optional[str],
        settings: Settings,
        on_retry: Optional[OnRetry],
        raise_on_lost: bool,
        on_wanted: Optional[OnWanted] = None,
    ) -> None:
        self.locker = locker
        self.on_wanted = on_wanted
        self.spec = spec
        self.wait = wait
        self.blocking = blocking
        self.watchdog = watchdog
        self.on_lost = on_lost
        self.token = token
        self.settings = settings
        self.on_retry = on_retry
        self.raise_on_lost = raise_on_lost
        self._by_task: "weakref.WeakKeyDictionary[asyncio.Task[Any], Held[Lease]]" = weakref.WeakKeyDictionary()
        # What ``owned()`` looks at outside any task (no loop running): it
        # stays empty, as every coroutine runs in a task.
        self._no_task: Held[Lease] = Held()
        self._entered: Entered[Lease] = Entered()
        self._given = GivenToken()

    @property
    def resource(self) -> Key:
        return self.spec.resources[0]

    def _held(self, task: "Optional[asyncio.Task[Any]]") -> "Held[Lease]":
        if task is None:
            # Called outside a running loop: the task that runs the coroutine.
            task = _calling_task()
        if task is None:
            return self._no_task
        h = self._by_task.get(task)
        if h is None:
            h = self._by_task[task] = Held()
        return h

    def _watchdog(self, watchdog: Optional[bool]) -> bool:
        for choice in (watchdog, self.watchdog, self.locker.watchdog):
            if choice is not None:
                return bool(choice)
        return True

    async def _take(
        self, task: "Optional[asyncio.Task[Any]]", wait_ms: Optional[int], token: Optional[str], watchdog: bool
    ) -> Optional[Lease]:
        if task is None:
            task = _calling_task()  # called outside a running loop
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, _owner_of(task), _max_hold(spec), spec.priority, spec.permits)
        given = token or self.token
        if given:
            self._given.reserve(given)
        backend = _Backend(self.locker.topology, spec, given or new_token(), self.settings)
        lease: Optional[Lease] = None
        try:
            try:
                got = await backend.acquire(wait_ms, self.on_retry)
                if got is None:
                    return None
                lease = Lease(backend, got[0], got[1], watchdog, self.on_lost)
                if self.on_wanted is not None:
                    backend.rules.wanted = wanted_state(lease, self.on_wanted)
                self._held(task).add(lease)
                return lease
            finally:
                if given:
                    self._given.settle(given, lease)
        except BaseException:
            # An interrupt between the grant and its caller: give it back.
            if lease is not None:
                lease._give_back()
            elif backend.rules.granted:
                in_background(backend.abandon(now() + REPLY_MARGIN))
            raise

    # --- as threading.Lock and redis-py's asyncio Lock ---------------------------

    def acquire(
        self,
        blocking: Optional[bool] = None,
        wait: Wait = _UNSET,
        *,
        blocking_timeout: Wait = _UNSET,
        token: Optional[str] = None,
        watchdog: Optional[bool] = None,
    ) -> Coroutine[Any, Any, Optional[Lease]]:
        """``await lock.acquire()``: the Lease (truthy), or None when busy or
        the wait ran out; the same arguments as :meth:`dlock.Lock.acquire`.
        Checks them, and reads the calling task (the reentrant owner, and
        whose lease it is), at the call. Cancelling it leaves no hold and
        no waiter behind."""
        check_token(token)
        ms = call_wait_ms(self.blocking, self.wait, blocking, given_wait(wait, blocking_timeout))
        return self._take(_calling_task(), ms, token, self._watchdog(watchdog))

    def release(self) -> Coroutine[Any, Any, bool]:
        """``await lock.release()``: releases the most recent lease this Lock
        holds for the calling task: True; :class:`~dlock.NotOwned` when it
        holds none, :class:`~dlock.LockLost` when the lease had been lost
        (``raise_on_lost=False``: False)."""
        return self._release(_calling_task())

    async def _release(self, task: "Optional[asyncio.Task[Any]]") -> bool:
        held = self._held(task)
        lease = held.latest("release", self.resource)
        held.discard(lease)
        released = await lease.release()
        if not released and self.raise_on_lost:
            raise LockLost(f"the lease on {resources_text(self.spec)} was lost before its release")
        return released

    def extend(self, ttl: Optional[Duration] = None) -> Coroutine[Any, Any, bool]:
        """``await lock.extend(ttl)``: extends the most recent lease this
        Lock holds for the calling task, as :meth:`dlock.Lock.extend`."""
        return self._extend(_calling_task(), ttl)

    async def _extend(self, task: "Optional[asyncio.Task[Any]]", ttl: Optional[Duration]) -> bool:
        lease = self._held(task).latest("extend", self.resource)
        extended = await lease.extend(ttl)
        if not extended and self.raise_on_lost:
            raise LockLost(f"the lease on {resources_text(self.spec)} was lost before the extend")
        return extended

    def owned(self) -> bool:
        """Whether this Lock holds a live lease for the calling task (asks
        no server; not awaitable)."""
        return self._held(_calling_task()).owned()

    async def locked(self) -> bool:
        """Whether anyone holds the resource (any member of a set)."""
        quorum: Optional[int] = getattr(self.locker, "quorum", None)
        for r in self.spec.resources:
            if is_held(await self.locker.info(r), quorum):
                return True
        return False

    # --- async with, decorator, run ---------------------------------------------

    async def _enter(self, task: "Optional[asyncio.Task[Any]]", busy_raises: bool) -> Optional[Lease]:
        ms = call_wait_ms(self.blocking, self.wait, None, _UNSET)
        lease = await self._take(task, ms, None, self._watchdog(None))
        if lease is None:
            if busy_raises:
                raise NotAcquired(f"{resources_text(self.spec)} is busy")
            return None
        try:
            self._entered.push(lease, self._held(task))
        except BaseException:
            lease._give_back()
            raise
        return lease

    async def _exit(
        self, task: "Optional[asyncio.Task[Any]]", et: Optional[Type[BaseException]], ev: Optional[BaseException]
    ) -> None:
        lease = self._entered.pop(self._held(task), self.resource)
        await lease._leave(et, ev, self.raise_on_lost)

    async def __aenter__(self) -> Lease:
        lease = await self._enter(_calling_task(), True)
        assert lease is not None
        return lease

    async def __aexit__(
        self,
        et: Optional[Type[BaseException]],
        ev: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self._exit(_calling_task(), et, ev)

    def __call__(self, fn: F) -> F:
        """``@locker.lock("res", wait=5)`` on a coroutine function: each call
        runs inside ``async with`` this lock."""
        if not inspect.iscoroutinefunction(fn):
            raise InvalidRequest(
                f"{fn!r} is not a coroutine function: decorate it with a blocking dlock.Lock"
            )

        @functools.wraps(fn)
        async def under_lock(*args: Any, **kwargs: Any) -> Any:
            async with self:
                return await fn(*args, **kwargs)

        return under_lock  # type: ignore[return-value]

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> Coroutine[Any, Any, Optional[T]]:
        """``await lock.run(fn, *args)``: awaits ``fn(*args)`` under the lock,
        as :meth:`dlock.Lock.run`: its result, or None when not granted."""
        return self._run(_calling_task(), fn, args)

    async def _run(
        self, task: "Optional[asyncio.Task[Any]]", fn: Callable[..., Awaitable[T]], args: Any
    ) -> Optional[T]:
        if await self._enter(task, False) is None:
            return None
        try:
            out = await fn(*args)
        except BaseException as e:
            await self._exit(task, type(e), e)
            raise
        await self._exit(task, None, None)
        return out

    def __repr__(self) -> str:
        return f"<async Lock {self.spec.resources!r}>"

