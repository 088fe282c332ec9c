"""``on_wanted`` in the asyncio shell: the hook is called on the event
loop after the renewal that saw the waiters (``call_soon``), never inside
it, with the lease (held weakly) and the count of waiters; a coroutine
function's coroutine runs as a task of its own."""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from typing import Any, Callable

from ._abackend import in_background
from ._core.wanted import WantedState

log = logging.getLogger("dlock")

#: ``on_wanted(lease, waiters)``; may be a coroutine function.
OnWanted = Callable[[Any, int], Any]


async def _logged(aw: Any) -> None:
    try:
        await aw
    except Exception:
        log.exception("dlock: on_wanted callback failed")


def wanted_state(lease: Any, on_wanted: OnWanted) -> WantedState:
    """The rules' hook for ``lease``, on the running loop."""
    ref = weakref.ref(lease)
    loop = asyncio.get_running_loop()

    def call(waiters: int) -> None:
        held = ref()
        if held is None:
            return
        try:
            out = on_wanted(held, waiters)
        except Exception:  # a hook's failure must not reach the loop
            log.exception("dlock: on_wanted callback failed")
            return
        if inspect.isawaitable(out):
            in_background(_logged(out))

    return WantedState(lambda n: loop.call_soon(call, n))
