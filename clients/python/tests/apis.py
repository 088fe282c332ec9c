"""One test body for the blocking and the asyncio API: ``api.locker(...)``
makes a locker of either kind. With asyncio, an event loop runs on a
thread of its own for the whole test (so that watchdogs and keepers run
while the test waits), and every call and attribute read of a dlock object
is made on that loop, a call's coroutine awaited there; the body reads the
same for both."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Callable

import dlock
import dlock.asyncio

#: The longest one call may take.
CALL_DEADLINE = 60.0


class OnLoop:
    """A dlock asyncio object used from the test's thread: see the module."""

    def __init__(self, obj: Any, api: "Api") -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_api", api)

    def _wrap(self, v: Any) -> Any:
        return OnLoop(v, self._api) if type(v).__module__.startswith("dlock") else v

    def __getattr__(self, name: str) -> Any:
        v = self._api.on_loop(lambda: getattr(self._obj, name))
        if callable(v) and not isinstance(v, type):
            return lambda *a, **kw: self._wrap(self._api.on_loop(lambda: v(*a, **kw)))
        return self._wrap(v)

    def __enter__(self) -> Any:
        return self._wrap(self._api.on_loop(self._obj.__aenter__))

    def __exit__(self, *exc: Any) -> Any:
        return self._api.on_loop(lambda: self._obj.__aexit__(*exc))

    def __repr__(self) -> str:
        return f"OnLoop({self._obj!r})"


class Api:
    """Makes lockers of one API (``sync`` or ``asyncio``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = None
        if name == "asyncio":
            self.loop = asyncio.new_event_loop()
            self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
            self.thread.start()

    def on_loop(self, f: Callable[[], Any]) -> Any:
        """``f()`` called on the loop, its awaitable result awaited there."""

        async def call() -> Any:
            v = f()
            if inspect.isawaitable(v):
                v = await v
            return v

        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(CALL_DEADLINE)

    def run(self, v: Any) -> Any:
        """``v`` as it is (a call through :class:`OnLoop` was awaited)."""
        return v

    def locker(self, url: Any, **kw: Any) -> Any:
        if self.loop is None:
            return dlock.Locker(url, **kw)
        return OnLoop(self.on_loop(lambda: dlock.asyncio.Locker(url, **kw)), self)

    def cluster(self, urls: Any, **kw: Any) -> Any:
        if self.loop is None:
            return dlock.Locker.cluster(urls, **kw)
        return OnLoop(self.on_loop(lambda: dlock.asyncio.Locker.cluster(urls, **kw)), self)

    def close(self) -> None:
        loop = self.loop
        if loop is None:
            return

        async def cancel_all() -> None:
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(CALL_DEADLINE)
        loop.call_soon_threadsafe(loop.stop)
        self.thread.join(CALL_DEADLINE)
        loop.close()
