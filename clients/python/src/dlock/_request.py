"""What a lock request is made of, shared by the blocking and the asyncio
:class:`Lock`: the wait (``threading``'s rules), the per-lock settings, the
owner placeholder of a reentrant lock, and the record of the leases a Lock
holds for each thread or task (what ``release()``, ``owned()`` and
``extend()`` on the Lock act on)."""

from __future__ import annotations

import datetime
import os
import socket
import threading
import uuid
from typing import Any, Dict, Generic, List, Optional, Protocol, Tuple, TypeVar, Union

from ._single import Settings
from ._spec import MAX_MS, Duration, Key, OwnerPlaceholder, Spec, seconds, to_ms
from .errors import InvalidRequest, NotOwned

_NONCE = uuid.uuid4().hex[:8]
_HOST = socket.gethostname()


def thread_owner() -> str:
    """The default owner of a reentrant lock: this host, process and
    thread (``host:pid:nonce:thread``; the nonce tells apart two processes
    that reused a pid)."""
    return f"{_HOST}:{os.getpid()}:{_NONCE}:{threading.get_ident()}"


class _PerThread(OwnerPlaceholder):
    """Owner placeholder: the acquiring thread's :func:`thread_owner` (the
    acquiring task's, with asyncio)."""

    def __repr__(self) -> str:
        return "<this thread>"


PER_THREAD: Any = _PerThread()


class _Unset:
    """"Not given": use the Lock's (or the Locker's) setting."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()

#: A wait as the calls take it: seconds, a timedelta, None or -1 for "as
#: long as the server allows".
Wait = Optional[Duration]


def wait_ms(wait: Wait, what: str = "wait") -> int:
    """A wait in whole ms, as ``threading`` reads a timeout: None or -1
    wait as long as the server allows (2^47 ms), any other negative is
    refused, 0 (or below 1 ms) is a single try."""
    if wait is None:
        return MAX_MS
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait < 0:
        if wait == -1:
            return MAX_MS
        raise InvalidRequest(f"{what} must be -1 (forever), None (forever) or at least 0, not {wait!r}")
    if isinstance(wait, datetime.timedelta) and wait < datetime.timedelta(0):
        raise InvalidRequest(f"{what} must not be negative, not {wait!r}")
    return to_ms(wait, what)


def given_wait(wait: Any, blocking_timeout: Any) -> Any:
    """The one of ``wait`` and ``blocking_timeout`` (redis-py's name) that
    was given, validated, or ``_UNSET``; both given is refused."""
    if wait is not _UNSET and blocking_timeout is not _UNSET:
        raise InvalidRequest("give wait or blocking_timeout (the same thing), not both")
    w = blocking_timeout if wait is _UNSET else wait
    if w is not _UNSET:
        wait_ms(w, "wait" if wait is not _UNSET else "blocking_timeout")
    return w


def call_wait_ms(default_blocking: bool, default_wait: Wait, blocking: Optional[bool], wait: Any) -> Optional[int]:
    """The wait of one acquire in ms (None: a single try, no ``WAIT``),
    from the call's ``blocking``/``wait`` (``_UNSET`` when not given) over
    the lock's. A call that says ``blocking=False`` and a wait is refused,
    as ``threading`` refuses ``acquire(False, 5)``."""
    b = default_blocking if blocking is None else bool(blocking)
    if not b:
        if blocking is not None and wait is not _UNSET and wait is not None and wait != -1:
            raise InvalidRequest("a non-blocking acquire takes no wait")
        return None
    return wait_ms(default_wait if wait is _UNSET else wait)


def replicas(n: Optional[int], timeout: Optional[Duration]) -> Optional[Tuple[int, float]]:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidRequest("min_replicas must be a non-negative integer")
    return n, seconds(timeout if timeout is not None else 1.0)


def lock_settings(
    s: Settings,
    retry_for: Optional[Duration],
    min_replicas: Optional[int],
    replicas_timeout: Optional[Duration],
) -> Settings:
    """A Locker's settings with one lock's overrides."""
    kw: Dict[str, Any] = {}
    if retry_for is not None:
        kw["retry_for"] = seconds(retry_for)
    if min_replicas is not None:
        kw["min_replicas"] = replicas(min_replicas, replicas_timeout)
    elif replicas_timeout is not None and s.min_replicas is not None:
        kw["min_replicas"] = (s.min_replicas[0], seconds(replicas_timeout))
    return s.copy(**kw) if kw else s


def make_spec(
    resource: Any,
    ttl: Duration,
    shared: bool,
    limit: Optional[int],
    owner: Any,
    max_hold: Optional[Duration] = None,
    priority: Optional[int] = None,
    permits: Optional[int] = None,
) -> Spec:
    return Spec(resource, ttl, shared, limit, owner, max_hold, priority, permits)


def one_or_set(resources: Any) -> Union[Key, List[Key]]:
    """``multi_lock``'s resources: a set of two or more, or one resource."""
    if isinstance(resources, (str, bytes)):
        return resources
    try:
        res = list(resources)
    except TypeError:
        raise InvalidRequest(f"a set of resources is a list of str or bytes, not {resources!r}") from None
    if len(res) < 2:
        return res[0] if res else ""
    return res


class _LeaseLike(Protocol):
    @property
    def released(self) -> bool: ...

    @property
    def lost(self) -> bool: ...


L = TypeVar("L", bound=_LeaseLike)


class Held(Generic[L]):
    """The leases a Lock holds for one thread (or task), oldest first:
    every lease its ``acquire()`` and ``with`` blocks took there and that
    is not released yet, and the stack of its ``with`` blocks."""

    __slots__ = ("leases", "entered")

    def __init__(self) -> None:
        self.leases: List[L] = []
        self.entered: List[L] = []

    def add(self, lease: L) -> None:
        self.prune()
        if lease not in self.leases:
            self.leases.append(lease)

    def discard(self, lease: L) -> None:
        if lease in self.leases:
            self.leases.remove(lease)

    def prune(self) -> None:
        """Forgets the leases released meanwhile (by ``lease.release()``)."""
        for x in self.leases:
            if x.released:
                self.leases = [x for x in self.leases if not x.released]
                return

    def latest(self, what: str, resource: Key) -> L:
        """The most recent lease not yet released; :class:`~dlock.NotOwned`
        when there is none."""
        self.prune()
        if not self.leases:
            raise NotOwned(f"cannot {what} {resource!r}: this Lock holds no lease for the calling thread or task")
        return self.leases[-1]

    def owned(self) -> bool:
        self.prune()
        return any(not x.lost for x in self.leases)


def is_held(info: Any, quorum: Optional[int]) -> bool:
    """Whether ``DLOCK.INFO``'s answer says the resource is held: a dict
    (one server), or for a Redlock a list of answers of which a quorum
    hold it."""
    if isinstance(info, list):
        return quorum is not None and sum(isinstance(a, dict) for a in info) >= quorum
    return info is not None


def resources_text(spec: Spec) -> str:
    r = spec.resources
    return repr(r[0]) if len(r) == 1 else repr(r)


class Entered(Generic[L]):
    """The ``with`` blocks of one Lock not yet left, process-wide, oldest
    first, each with the record of the thread or task that entered it.
    Leaving on a thread or task that entered none of this Lock's blocks
    (an ``ExitStack`` closed elsewhere, a fixture's teardown in another
    task, another event loop) leaves the most recent one. Plain list
    operations (atomic in CPython): no lock to be interrupted in."""

    __slots__ = ("stack",)

    def __init__(self) -> None:
        self.stack: List[Tuple[L, Held[L]]] = []

    def push(self, lease: L, held: "Held[L]") -> None:
        held.add(lease)
        held.entered.append(lease)
        self.stack.append((lease, held))

    def pop(self, held: "Held[L]", resource: Key) -> L:
        """The lease to leave: the calling thread's (task's) most recent
        block, else the most recent block of any; :class:`~dlock.NotOwned`
        when none is open."""
        if held.entered:
            lease = held.entered.pop()
            for pair in reversed(self.stack):
                if pair[0] is lease:
                    self.forget(pair)
                    break
            held.discard(lease)
            return lease
        try:
            lease, owner = self.stack.pop()
        except IndexError:
            raise NotOwned(f"cannot leave {resource!r}: no block of this Lock is open") from None
        try:
            owner.entered.remove(lease)
        except ValueError:
            pass
        owner.discard(lease)
        return lease

    def forget(self, pair: Tuple[L, "Held[L]"]) -> None:
        try:
            self.stack.remove(pair)
        except ValueError:
            pass


class GivenToken:
    """The acquisitions of one Lock made with a token the caller gave
    (``token=``): a given token is one acquisition, and a second acquire
    with it would be granted the same hold (same-token retries are
    idempotent), so two threads or tasks sharing the Lock would both think
    they hold it alone. While a lease of that token is live, or an acquire
    with it is under way, another acquire with it is refused."""

    __slots__ = ("_lock", "_busy")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: Dict[str, Any] = {}

    def reserve(self, token: str) -> None:
        """Claims ``token`` for an acquire; :class:`~dlock.InvalidRequest`
        when a live lease of this Lock has it or an acquire is using it."""
        with self._lock:
            held = self._busy.get(token)
            if held is not None and (held is _ACQUIRING or not (held.released or held.lost)):
                raise InvalidRequest(
                    "this Lock's given token is held by a live lease of it (or being acquired): "
                    "a given token is one acquisition; share the lease, or acquire without a token"
                )
            self._busy[token] = _ACQUIRING

    def settle(self, token: str, lease: Any) -> None:
        """The acquire with ``token`` ended: with ``lease``, or None."""
        with self._lock:
            if lease is None:
                self._busy.pop(token, None)
            else:
                self._busy[token] = lease


_ACQUIRING: Any = object()
