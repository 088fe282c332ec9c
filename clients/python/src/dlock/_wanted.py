"""``on_wanted`` in the blocking shell: the hook is called on the
watchdog's callback pool (the one ``on_lost`` uses), never on the thread
that renews, with the lease (held weakly: an abandoned lease is still
collected) and the count of waiters."""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

from ._core.wanted import WantedState
from ._watchdog import _scheduler

log = logging.getLogger("dlock")

#: ``on_wanted(lease, waiters)``.
OnWanted = Callable[[Any, int], Any]


def wanted_state(lease: Any, on_wanted: OnWanted) -> WantedState:
    """The rules' hook for ``lease``, calling ``on_wanted`` on the pool."""
    ref = weakref.ref(lease)

    def call(waiters: int) -> None:
        held = ref()
        if held is None:
            return
        try:
            on_wanted(held, waiters)
        except Exception:  # a hook's failure must not stop the pool
            log.exception("dlock: on_wanted callback failed")

    return WantedState(lambda n: _scheduler.signals.submit(lambda: call(n)))
