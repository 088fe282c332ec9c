"""``on_wanted``: a held lock hears, from its renewals, that someone
waits for it. Renewals send ``EXTEND ... WANTED`` (only when a hook is
set), whose reply counts the requests queued on the resource; the hook is
told when that count goes from 0 to more than 0 (once per such change,
again after it went back to 0). How it is told is the shell's (a callback
pool, the event loop): never on the renewal's own path. A server that
refuses the option (a dlock release before it) is logged once, and
renewals go on without it: the lock is never lost over it."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

log = logging.getLogger("dlock")

#: How the shell tells the hook: called with the count of waiters.
Tell = Callable[[int], Any]


class WantedState:
    """One lease's hook: the edge, and whether the server takes the option."""

    __slots__ = ("tell", "wanted", "refused")

    def __init__(self, tell: Tell) -> None:
        self.tell = tell
        self.wanted = False
        self.refused = False

    def asks(self) -> bool:
        """Whether renewals send ``WANTED``."""
        return not self.refused

    def seen(self, waiters: int) -> None:
        """A renewal's count: tells the hook on a change from 0 to more."""
        now = waiters > 0
        fire = now and not self.wanted
        self.wanted = now
        if fire:
            self.tell(waiters)

    def refuse(self, error: BaseException) -> bool:
        """Whether ``error``, the reply to an ``EXTEND ... WANTED``, is a
        server that does not know the option; if so renewals stop asking
        (logged once)."""
        text = str(error)
        if "wrong number of arguments" not in text and "syntax error" not in text:
            return False
        if not self.refused:
            self.refused = True
            log.warning("dlock: the server cannot say who waits (on_wanted is not called): %s", text)
        return True


def _name(k: Any) -> Optional[str]:
    if isinstance(k, bytes):
        return k.decode("utf-8", "replace")
    return k if isinstance(k, str) else None


def read_reply(reply: Any) -> Optional[Tuple[int, Optional[int]]]:
    """``(extended, waiters)`` of an ``EXTEND``/``MEXTEND ... WANTED``
    reply (a map, or a flat list in RESP2; fields read by name, others
    skipped), or of the plain integer reply (no count). For a set, the most
    waiters of any member. None: neither."""
    if isinstance(reply, int) and not isinstance(reply, bool):
        return reply, None
    pairs: List[Tuple[Any, Any]]
    if isinstance(reply, dict):
        d: Dict[Any, Any] = reply
        pairs = list(d.items())
    elif isinstance(reply, list) and len(reply) % 2 == 0:
        pairs = list(zip(reply[0::2], reply[1::2]))
    else:
        return None
    extended: Optional[int] = None
    waiters: Optional[int] = None
    for k, v in pairs:
        name = _name(k)
        if name == "extended" and isinstance(v, int):
            extended = v
        elif name == "waiters" and isinstance(v, int):
            waiters = max(v, 0)
        elif name == "waiters" and isinstance(v, list):
            waiters = max([n for n in v if isinstance(n, int)] + [0])
    if extended is None:
        return None
    return extended, waiters
