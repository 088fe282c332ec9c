"""One test body for the blocking and the asyncio API: ``api(name)``
makes a locker of either kind; with asyncio, every call that returns a
coroutine is run on one event loop kept for the test, so the body reads
the same for both."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import dlock
import dlock.asyncio


class OnLoop:
    """A dlock asyncio object whose coroutine methods run to completion on
    ``loop`` (with a deadline); dlock objects they return are wrapped too."""

    def __init__(self, obj: Any, loop: asyncio.AbstractEventLoop) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_loop", loop)

    def _wrap(self, v: Any) -> Any:
        if inspect.isawaitable(v):
            v = self._loop.run_until_complete(asyncio.wait_for(_awaited(v), 60))
        if type(v).__module__.startswith("dlock"):
            return OnLoop(v, self._loop)
        return v

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._obj, name)
        if callable(v) and not isinstance(v, type):
            return lambda *a, **kw: self._wrap(v(*a, **kw))
        return self._wrap(v) if type(v).__module__.startswith("dlock") else v

    def __enter__(self) -> Any:
        return self._wrap(self._obj.__aenter__())

    def __exit__(self, *exc: Any) -> Any:
        return self._wrap(self._obj.__aexit__(*exc))

    def __repr__(self) -> str:
        return f"OnLoop({self._obj!r})"


async def _awaited(v: Any) -> Any:
    return await v


class Api:
    """Makes lockers of one API (``sync`` or ``asyncio``); closes its loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop() if name == "asyncio" else None

    def run(self, v: Any) -> Any:
        """``v`` awaited on the test's loop (asyncio), or as it is."""
        if self.loop is not None and inspect.isawaitable(v):
            return self.loop.run_until_complete(asyncio.wait_for(_awaited(v), 60))
        return v

    def locker(self, url: Any, **kw: Any) -> Any:
        if self.loop is None:
            return dlock.Locker(url, **kw)
        return OnLoop(dlock.asyncio.Locker(url, **kw), self.loop)

    def cluster(self, urls: Any, **kw: Any) -> Any:
        if self.loop is None:
            return dlock.Locker.cluster(urls, **kw)
        return OnLoop(dlock.asyncio.Locker.cluster(urls, **kw), self.loop)

    def close(self) -> None:
        if self.loop is not None:
            loop = self.loop
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()
