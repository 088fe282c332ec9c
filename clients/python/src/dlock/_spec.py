"""What to acquire, and the commands that acquire, extend and release it.
Validated here, before any server is asked. Durations and the token live
here too: both the blocking and the asyncio code use them."""

from __future__ import annotations

import datetime
import os
import time
from typing import Any, List, Optional, Sequence, Tuple, Union

from .errors import InvalidRequest

#: A duration: seconds (int or float) or a ``datetime.timedelta``.
Duration = Union[int, float, datetime.timedelta]
Key = Union[str, bytes]

#: The server's largest ttl and wait: 2^47 ms.
MAX_MS = 1 << 47
#: The most resources one ``DLOCK.MACQUIRE`` takes.
MAX_SET = 64
#: The largest ``LIMIT`` (permits of a semaphore) the server takes: 2^20.
MAX_LIMIT = 1 << 20
#: The highest ``PRIORITY`` the server takes.
MAX_PRIORITY = 1000
#: Socket timeouts are capped here (about 11 days): the platform's clock
#: arithmetic overflows long before 2^47 ms. A wait that long times out and
#: is retried with the same token.
MAX_SOCKET_TIMEOUT = 1_000_000.0

now = time.monotonic


def _number(d: object, what: str) -> float:
    """``d`` (seconds, or a ``timedelta``) as a float of seconds, clamped to
    0..2^47 ms; anything else is an :class:`InvalidRequest`."""
    if isinstance(d, datetime.timedelta):
        return max(0.0, min(d.total_seconds(), MAX_MS / 1000))
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise InvalidRequest(f"{what} must be seconds (a number) or a timedelta, not {d!r}")
    if d != d:  # NaN
        raise InvalidRequest(f"{what} must be a number of seconds, not NaN")
    # Compared before any arithmetic: an int too large for a float
    # (10**400) overflows in it.
    if d >= MAX_MS / 1000:
        return MAX_MS / 1000
    if d <= 0:
        return 0.0
    return float(d)


def to_ms(d: Duration, what: str = "duration") -> int:
    """Whole milliseconds of ``d`` (never negative), at most 2^47."""
    if isinstance(d, datetime.timedelta):
        ms = d // datetime.timedelta(milliseconds=1)
        return max(0, min(ms, MAX_MS))
    s = _number(d, what)
    if s >= MAX_MS / 1000:
        return MAX_MS
    # The epsilon keeps 0.57 s at 570 ms (0.57 * 1000 = 569.99...).
    ms = int(s * 1000 + 1e-6) if s > 0 else 0
    return max(0, min(ms, MAX_MS))


def seconds(d: Duration, what: str = "a duration") -> float:
    """``d`` in seconds, clamped to 0..2^47 ms."""
    return _number(d, what)


def ttl_ms(ttl: Duration) -> int:
    """A ttl the server accepts: 1 ms to 2^47 ms, in whole milliseconds."""
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl > MAX_MS / 1000:
        raise InvalidRequest(f"ttl must be at most 2^47 ms ({MAX_MS} ms)")
    ms = to_ms(ttl, "ttl")
    if isinstance(ttl, datetime.timedelta) and ttl > datetime.timedelta(milliseconds=MAX_MS):
        raise InvalidRequest(f"ttl must be at most 2^47 ms ({MAX_MS} ms)")
    if ms < 1:
        raise InvalidRequest("ttl must be at least 1 ms")
    return ms


#: Tokens drawn ahead, in batches: ``os.urandom`` releases the GIL, and
#: with many threads contending for a lock each release of the GIL is a
#: switch between threads. ``list.pop`` is atomic under the GIL, so no two
#: calls get the same token; a forked child forgets the batch (it must
#: never use a token its parent may use too).
_TOKEN_BATCH = 64
_tokens: List[str] = []


def _draw_tokens() -> None:
    h = os.urandom(16 * _TOKEN_BATCH).hex()
    _tokens.extend([h[i : i + 32] for i in range(0, len(h), 32)])


if hasattr(os, "register_at_fork"):  # not on Windows, where nothing forks
    os.register_at_fork(after_in_child=_tokens.clear)


def new_token() -> str:
    """A fresh 128-bit random token for one acquisition (32 hex digits),
    from the OS's random source (as ``uuid.uuid4`` draws it, drawn 64 at a
    time)."""
    while True:
        try:
            return _tokens.pop()
        except IndexError:
            _draw_tokens()


def as_bytes(k: Key) -> bytes:
    return k if isinstance(k, bytes) else k.encode()


def _encodable(k: str, what: str) -> None:
    """Refuses a str the wire cannot carry (a lone surrogate such as
    ``"\\ud800"`` has no UTF-8 form), before anything is sent."""
    try:
        k.encode()
    except UnicodeEncodeError as e:
        raise InvalidRequest(
            f"{what} {k!r} cannot be encoded as UTF-8 ({e.reason} at position {e.start}); "
            "pass bytes for a name that is not text"
        ) from None


class OwnerPlaceholder:
    """An owner found when the lock is acquired (the acquiring thread or
    task): a :class:`Spec` takes it in place of a str or bytes."""


def as_str(k: Key) -> str:
    return k.decode("utf-8", "replace") if isinstance(k, bytes) else k


class Spec:
    """The shape of a lock request (shared by Locker and Redlock)."""

    __slots__ = ("resources", "ttl_ms", "shared", "limit", "owner", "max_hold_ms", "priority", "permits", "_route", "_acquire", "_options", "_extend", "_release")

    def __init__(
        self,
        resources: Sequence[Key],
        ttl: Duration = 30.0,
        shared: bool = False,
        limit: Optional[int] = None,
        owner: Optional[Key] = None,
        max_hold: Optional[Duration] = None,
        priority: Optional[int] = None,
        permits: Optional[int] = None,
    ) -> None:
        if isinstance(resources, (str, bytes)):
            resources = [resources]
        try:
            self.resources: List[Key] = list(resources)
        except TypeError:
            raise InvalidRequest(f"a resource is a str or bytes, not {resources!r}") from None
        self.ttl_ms = ttl_ms(ttl)
        #: ``MAXHOLD``: the lease may live this long from its grant, at
        #: most; the lease (and its budget) is the smaller of the two.
        self.max_hold_ms: Optional[int] = None
        if max_hold is not None:
            try:
                self.max_hold_ms = ttl_ms(max_hold)
            except InvalidRequest as e:
                raise InvalidRequest(str(e).replace("ttl", "max_hold", 1)) from None
            self.ttl_ms = min(self.ttl_ms, self.max_hold_ms)
        self.shared = bool(shared)
        self.limit = limit
        self.owner = owner
        self.priority = priority
        #: ``PERMITS k``: the hold counts as k of the semaphore's permits.
        self.permits = permits
        self.validate()
        self._shape()

    def is_set(self) -> bool:
        return len(self.resources) > 1

    def route_key(self) -> bytes:
        """The key that routes the request (every member of a set must share
        its slot in Redis Cluster: use a hash tag)."""
        return self._route

    def validate(self) -> None:
        r = self.resources
        if not r:
            raise InvalidRequest("no resource to lock")
        if len(r) > MAX_SET:
            raise InvalidRequest("a set takes at most 64 resources")
        seen = set()
        for k in r:
            if not isinstance(k, (str, bytes)):
                raise InvalidRequest(f"a resource is a str or bytes, not {k!r}")
            if len(k) == 0:
                raise InvalidRequest("resource must not be empty")
            if isinstance(k, str):
                _encodable(k, "resource")
            b = as_bytes(k)
            if b in seen:
                raise InvalidRequest("a set names the same resource twice")
            seen.add(b)
        if self.limit is not None:
            if isinstance(self.limit, bool) or not isinstance(self.limit, int):
                raise InvalidRequest("limit must be an integer")
            if self.limit < 1:
                raise InvalidRequest("limit must be at least 1")
            if self.limit > MAX_LIMIT:
                raise InvalidRequest(
                    "limit must be at most 1048576 (2^20), the server's maximum"
                )
        if self.shared and self.limit is not None and self.limit > 1:
            raise InvalidRequest("shared cannot be combined with a limit above 1")
        o = self.owner
        if o is not None and not isinstance(o, (str, bytes, OwnerPlaceholder)):
            raise InvalidRequest(f"owner must be a str or bytes, not {o!r}")
        if isinstance(o, (str, bytes)) and len(o) == 0:
            raise InvalidRequest("owner must not be empty")
        if isinstance(o, str):
            _encodable(o, "owner")
        if self.owner is not None and self.limit is not None and self.limit > 1:
            raise InvalidRequest("owner cannot be combined with a limit above 1")
        p = self.priority
        if p is not None:
            if isinstance(p, bool) or not isinstance(p, int):
                raise InvalidRequest("priority must be an integer")
            if not 0 <= p <= MAX_PRIORITY:
                raise InvalidRequest("priority must be from 0 to 1000")
        weight = self.permits
        if weight is not None:
            if isinstance(weight, bool) or not isinstance(weight, int):
                raise InvalidRequest("permits must be an integer")
            if self.limit is None or self.limit < 2:
                raise InvalidRequest("permits needs a limit above 1")
            if not 1 <= weight <= self.limit:
                raise InvalidRequest("permits must be from 1 to the limit")
        if self.is_set() and (self.limit is not None or self.owner is not None):
            raise InvalidRequest("a set of resources takes no limit and no owner")

    def _keys(self, name: str) -> Tuple[Any, ...]:
        if self.is_set():
            return (f"DLOCK.M{name}", len(self.resources), *self.resources)
        return (f"DLOCK.{name}", self.resources[0])

    def _shape(self) -> None:
        """The fixed parts of this request's commands, made once."""
        self._route = as_bytes(self.resources[0])
        self._acquire = self._keys("ACQUIRE")
        opts: List[Union[Key, int]] = []
        if self.shared:
            opts.append("SHARED")
        if self.limit is not None:
            opts += ["LIMIT", self.limit]
        # One permit is what the server grants without PERMITS.
        if self.permits is not None and self.permits > 1:
            opts += ["PERMITS", self.permits]
        if self.owner is not None:
            opts += ["OWNER", self.owner]
        if self.max_hold_ms is not None:
            opts += ["MAXHOLD", self.max_hold_ms]
        if self.priority is not None:
            opts += ["PRIORITY", self.priority]
        self._options = tuple(opts)
        self._extend = self._keys("EXTEND")
        self._release = self._keys("RELEASE")

    def acquire_cmd(self, token: str, wait_ms: Optional[int], ttl_ms: Optional[int] = None) -> Tuple[Any, ...]:
        """``ACQUIRE``/``MACQUIRE``, with ``WAIT wait_ms`` only when above 0
        (the server's ``WAIT 0`` waits forever: a wait used up is a plain
        try); ``ttl_ms`` in place of the request's (a capped hold's retry)."""
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        if wait_ms is not None and wait_ms > 0:
            return (*self._acquire, token, ttl, *self._options, "WAIT", wait_ms)
        return (*self._acquire, token, ttl, *self._options)

    def extend_cmd(self, token: str, ttl_ms: int) -> Tuple[Any, ...]:
        return (*self._extend, token, ttl_ms)

    def release_cmd(self, token: str) -> Tuple[Any, ...]:
        return (*self._release, token)

    def released(self, reply: object) -> Optional[bool]:
        """RELEASE answers 1/0, MRELEASE the members it released: True when
        every member was released, False for less, None for no integer."""
        if isinstance(reply, int) and not isinstance(reply, bool):
            return reply == len(self.resources)
        return None


def check_token(token: Optional[str]) -> None:
    if token is not None and (not isinstance(token, str) or token == ""):
        raise InvalidRequest("token must be a non-empty str")
    if token is not None:
        try:
            token.encode()
        except UnicodeEncodeError:
            # The token itself is not shown: messages never carry one.
            raise InvalidRequest("token cannot be encoded as UTF-8 (a lone surrogate)") from None



def _max_hold(spec: Spec) -> Optional[float]:
    """A spec's cap in seconds, to make the same request again."""
    return None if spec.max_hold_ms is None else spec.max_hold_ms / 1000
