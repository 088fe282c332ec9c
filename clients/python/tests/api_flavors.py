"""One test body for the blocking and the asyncio API: a test is an
``async def`` that awaits every call through ``f(...)`` (a blocking call's
value passes through), enters a lock with ``f.hold(lock)`` and runs work
"elsewhere" (another thread, or another task) with ``f.elsewhere``."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, AsyncIterator, Callable

import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla

FLAVORS = ["sync", "asyncio"]


def run(coro: Any) -> Any:
    """Runs a test body on a new event loop, with a deadline."""
    return asyncio.run(asyncio.wait_for(coro, 60))


class Flavor:
    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.is_async = name == "asyncio"

    def locker(self, **kw: Any) -> Any:
        if self.is_async:
            return dla.Locker(redis.asyncio.Redis(port=self.port), **kw)
        return dlock.Locker(redis.Redis(port=self.port), **kw)

    async def __call__(self, value: Any) -> Any:
        """A call's value: awaited when the asyncio API returned an awaitable."""
        if inspect.isawaitable(value):
            return await value
        return value

    @contextlib.asynccontextmanager
    async def hold(self, lock: Any) -> AsyncIterator[Any]:
        """``with lock as lease`` / ``async with lock as lease``."""
        if self.is_async:
            async with lock as lease:
                yield lease
        else:
            with lock as lease:
                yield lease

    async def elsewhere(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on another thread (blocking API) or in another task
        (asyncio), awaited if it returns an awaitable; its value."""
        if self.is_async:

            async def task() -> Any:
                return await self(fn())

            return await asyncio.wait_for(asyncio.create_task(task()), 30)
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(None, fn), 30)

    def close(self, locker: Any) -> None:
        locker.close()
