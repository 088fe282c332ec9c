"""What the blocking and the asyncio Redlock share beyond the rules in
``_core/redlock.py``: the exceptions a verdict comes to, the checks of the
servers given, and the lock kinds with their keyword parameters."""

from __future__ import annotations

import os
import socket
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

from ._core.redlock import (
    ANSWERED,
    BUSY,
    EXTENDED,
    LOST,
    REFUSED,
    SLOW,
    TOO_LATE,
    UNREACHABLE,
    UNREACHED,
    Tally,
    first_duplicate,
    released,
    renewal,
)
from ._lease import FAILED, Renewal
from ._spec import Duration, Key
from .errors import FATAL, DlockError, Failure, InvalidRequest, NoQuorum, Unavailable
from .locker import PER_THREAD

#: Connections a command may try on one server: a restarted server leaves
#: every pooled connection broken, and a command sent on a broken one is
#: retried on another (same token: idempotent).
MAX_TRIES = 10


def no_quorum(t: Tally) -> NoQuorum:
    return NoQuorum(t.yes, t.answered(), t.nodes)


def too_late(granted: int, nodes: int, ttl_ms: int) -> Unavailable:
    return Unavailable(
        f"{granted} of {nodes} servers granted, but only after the validity of the "
        f"{ttl_ms} ms ttl had run out: raise the ttl or lower the node timeout"
    )


def missed_error(t: Tally, ttl_ms: int) -> Optional[DlockError]:
    """What an acquire whose last attempt missed raises (None: busy)."""
    m = t.miss()
    if m == BUSY:
        return None
    if m == UNREACHABLE:
        refused: Optional[DlockError] = t.refused()
        return refused or no_quorum(t)
    assert m == SLOW
    return too_late(t.yes, t.nodes, ttl_ms)


def renewal_of(t: Tally, sent: float, ttl_ms: int, at: float) -> Renewal:
    kind, until = renewal(t, sent, ttl_ms, at)
    if kind == EXTENDED:
        return Renewal(EXTENDED, until=until)
    if kind == LOST:
        return Renewal(LOST)
    if kind == TOO_LATE:
        return Renewal(
            FAILED, error=Unavailable("a quorum renewed only after the new ttl's validity had run out")
        )
    return Renewal(FAILED, error=t.refused() or no_quorum(t))


def release_of(t: Tally) -> bool:
    r = released(t)
    if r is None:
        raise t.refused() or no_quorum(t)
    return r


def answer(a: Optional[Tuple[bool, Any]]) -> Tuple[str, Any]:
    """A fanned-out call's outcome as the rules read it."""
    if a is None:
        return UNREACHED, None
    ok, v = a
    if ok:
        return ANSWERED, v
    if isinstance(v, Failure) and v.kind == FATAL:
        return REFUSED, v.error
    return UNREACHED, None


def place(addr: Dict[str, Any]) -> Tuple[str, List[Any], Any]:
    """Where a server is: its name, the addresses it resolves to, and the
    database (the connection settings of a redis-py client)."""
    db = addr.get("db", 0) or 0
    if "path" in addr:
        return os.path.realpath(str(addr["path"])), [], db
    host, port = addr.get("host", "localhost"), int(addr.get("port", 6379))
    try:
        resolved = [ai[4][:2] for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except OSError:
        resolved = []
    return f"{host}:{port}", resolved, db


def refuse_duplicates(places: Sequence[Tuple[str, List[Any], Any]]) -> None:
    dup = first_duplicate(places)
    if dup is not None:
        a, b = places[dup[0]], places[dup[1]]
        raise InvalidRequest(
            f"{a[0]} and {b[0]} name the same server (database {b[2]}): it would count twice towards the quorum"
        )


def server_list(servers: Any, kind: str) -> List[Any]:
    """The servers given, each a URL or a client with a connection pool
    (``kind`` names the client a Redlock takes)."""
    if isinstance(servers, str):
        servers = [servers]
    try:
        out: List[Any] = list(servers)
    except TypeError:
        raise InvalidRequest(f"servers must be a list of URLs or {kind} clients, not {servers!r}") from None
    if not out:
        raise InvalidRequest("no server given")
    for s in out:
        if not isinstance(s, str) and not hasattr(s, "connection_pool"):
            raise InvalidRequest(f"a Redlock server is a URL or a {kind}, not {s!r}")
    return out


def check_limit(nodes: int, limit: Optional[int]) -> None:
    if nodes > 1 and limit is not None and limit > 1:
        raise InvalidRequest(
            "LIMIT above 1 needs a single server: majorities of independent servers cannot count permits"
        )


def require_token(token: Any) -> None:
    if not isinstance(token, str) or not token:
        raise InvalidRequest("token must not be empty")


L = TypeVar("L")


class LockKinds(Generic[L]):
    """The lock kinds, each a :meth:`lock` with some options set: one list
    of explicit keyword parameters for the blocking and the asyncio
    Redlock."""

    def lock(
        self,
        resource: Key,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        shared: bool = False,
        limit: Optional[int] = None,
        owner: Optional[Key] = None,
        watchdog: Optional[bool] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        raise_on_lost: bool = True,
    ) -> L:
        raise NotImplementedError

    def read_lock(
        self,
        resource: Key,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        owner: Optional[Key] = None,
        watchdog: Optional[bool] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        raise_on_lost: bool = True,
    ) -> L:
        """A shared hold (readers together, writers alone)."""
        return self.lock(
            resource,
            ttl=ttl,
            wait=wait,
            blocking=blocking,
            shared=True,
            owner=owner,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            raise_on_lost=raise_on_lost,
        )

    def write_lock(
        self,
        resource: Key,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        owner: Optional[Key] = None,
        watchdog: Optional[bool] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        raise_on_lost: bool = True,
    ) -> L:
        """An exclusive hold (what :meth:`lock` takes)."""
        return self.lock(
            resource,
            ttl=ttl,
            wait=wait,
            blocking=blocking,
            owner=owner,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            raise_on_lost=raise_on_lost,
        )

    def semaphore(
        self,
        resource: Key,
        limit: int,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        owner: Optional[Key] = None,
        watchdog: Optional[bool] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        raise_on_lost: bool = True,
    ) -> L:
        """``limit`` permits: above 1 only with a single server."""
        return self.lock(
            resource,
            ttl=ttl,
            wait=wait,
            blocking=blocking,
            limit=limit,
            owner=owner,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            raise_on_lost=raise_on_lost,
        )

    def reentrant_lock(
        self,
        resource: Key,
        owner: Optional[Key] = None,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        shared: bool = False,
        watchdog: Optional[bool] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        raise_on_lost: bool = True,
    ) -> L:
        """Reentrant holds; the owner defaults to the acquiring thread."""
        return self.lock(
            resource,
            ttl=ttl,
            wait=wait,
            blocking=blocking,
            shared=shared,
            owner=PER_THREAD if owner is None else owner,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            raise_on_lost=raise_on_lost,
        )

    def multi_lock(
        self,
        resources: Sequence[Key],
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        shared: bool = False,
        owner: Optional[Key] = None,
        watchdog: Optional[bool] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        raise_on_lost: bool = True,
    ) -> L:
        """A set of resources, all or none (one hash slot's worth is not
        needed: every server holds them all)."""
        res = list(resources)
        return self.lock(
            res if len(res) > 1 else (res[0] if res else ""),  # type: ignore[arg-type]
            ttl=ttl,
            wait=wait,
            blocking=blocking,
            shared=shared,
            owner=owner,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            raise_on_lost=raise_on_lost,
        )
