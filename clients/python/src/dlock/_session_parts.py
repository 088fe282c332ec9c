"""What the blocking and the asyncio sessions share: the request bound to
a session, its settings, how a session command's reply is read, and the
rule for a forked child. The session's own rules (budget, schedule) are in
``_core.session``."""

from __future__ import annotations

import datetime
from typing import Any, List, Optional, Tuple

from ._core import session as core
from ._spec import Duration, Key, Spec, to_ms, ttl_ms
from .errors import InvalidRequest, reply_text

NOT_ON_A_CLUSTER = (
    "sessions live on one server: a cluster's locks would need one session per master, "
    "which this client does not keep yet; use a Locker on one server"
)


class SessionSpec(Spec):
    """A lock request bound to a session: ``ACQUIRE ... SESSION id``."""

    __slots__ = ("session_id",)

    def __init__(self, session_id: str, resources: List[Key], ttl: Duration, shared: bool, limit: Optional[int], owner: Optional[Key]) -> None:
        super().__init__(resources, ttl, shared, limit, owner)
        self.session_id = session_id

    def acquire_cmd(self, token: str, wait_ms: Optional[int], ttl_ms: Optional[int] = None) -> Tuple[Any, ...]:
        return (*super().acquire_cmd(token, wait_ms, ttl_ms), "SESSION", self.session_id)


def settings_of(ttl: Duration, lock_delay: Optional[Duration]) -> Tuple[int, Optional[int]]:
    """The session's ttl and lock-delay in ms, as the server takes them."""
    ms = ttl_ms(ttl)
    if isinstance(lock_delay, datetime.timedelta):
        negative = lock_delay < datetime.timedelta(0)
    else:
        negative = isinstance(lock_delay, (int, float)) and lock_delay < 0
    if negative:
        raise InvalidRequest("lock_delay must be from 0 to 60 s")
    try:
        delay = core.lock_delay_ms(None if lock_delay is None else to_ms(lock_delay, "lock_delay"))
    except core.Invalid as e:
        raise InvalidRequest(str(e)) from None
    return ms, delay


class Own:
    """An error reply the session reads itself (``NOSESSION``, an unknown
    command)."""

    def __init__(self, text: str) -> None:
        self.text = text


def sorted_reply(r: Any) -> Any:
    """A session command's reply: ``NOSESSION`` and an unknown command are
    read by the session itself (``Own``); other error replies are raised
    for the connection's handling."""
    if isinstance(r, Exception):
        text = reply_text(r)
        if core.is_no_session(text) or core.lacks_sessions(text):
            return Own(text)
        raise r
    return r


def within(io_timeout: float, left: float) -> float:
    """A keep-alive's io timeout: at most what is left of the budget."""
    return max(min(io_timeout, left), 0.001)


def inherited(session_id: str, pid: int, here: int) -> Optional[InvalidRequest]:
    """In a forked child (``here`` is not ``pid``, the process that made
    the session): the error its use raises; None in the session's own
    process. A child never renews, closes or binds to what its parent
    holds."""
    if here == pid:
        return None
    return InvalidRequest(
        f"session {session_id} belongs to process {pid}, which opened it: a forked child "
        "never renews or closes it; make a session of its own (locker.session(...))"
    )


def resources_of(resource: Any) -> List[Key]:
    """One resource, or a set of them (``DLOCK.MACQUIRE``)."""
    if isinstance(resource, (str, bytes)):
        return [resource]
    try:
        return list(resource)
    except TypeError:
        raise InvalidRequest(f"a resource is a str or bytes (or a list of them), not {resource!r}") from None
