"""Locks on one Redis/Valkey server or a Redis Cluster: :class:`Locker`
(where locks are taken, and the settings) and :class:`Lock` (one lock
request: a context manager, or ``acquire()``)."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING, Any, Dict, Iterable, Optional, Sequence, Tuple, Union

import redis

from ._lease import Lease, OnLost
from ._node import ClusterMap, Node, Topology, check, refuse_asyncio_client, run_pipeline, settings_of
from ._single import OnRetry, Settings, SingleBackend, commands
from ._spec import (
    MAX_MS,
    Duration,
    OwnerPlaceholder,
    Key,
    Spec,
    check_token,
    new_token,
    now,
    seconds,
    to_ms,
)
from .errors import Failure, InvalidRequest, NotAcquired

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Locker", "Lock", "thread_owner"]

_NONCE = uuid.uuid4().hex[:8]
_HOST = socket.gethostname()


def thread_owner() -> str:
    """The default owner of a reentrant lock: this host, process and
    thread (``host:pid:nonce:thread``; the nonce tells apart two processes
    that reused a pid)."""
    return f"{_HOST}:{os.getpid()}:{_NONCE}:{threading.get_ident()}"


class _PerThread(OwnerPlaceholder):
    """Owner placeholder: the acquiring thread's :func:`thread_owner`."""

    def __repr__(self) -> str:
        return "<this thread>"


PER_THREAD: Any = _PerThread()
#: "Not given": use the Lock's (or the Locker's) setting.
_UNSET: Any = object()


def decode_info(v: Any) -> Any:
    """``DLOCK.INFO``'s reply as dicts (RESP2's flat arrays of pairs, or
    RESP3's maps), with str keys and str tokens where they are UTF-8."""
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return v
    if isinstance(v, dict):
        return {decode_info(k): decode_info(x) for k, x in v.items()}
    if isinstance(v, list):
        items = [decode_info(x) for x in v]
        if len(items) % 2 == 0 and items and all(isinstance(k, str) for k in items[0::2]):
            keys = items[0::2]
            if "token" in keys or "kind" in keys or "fence" in keys:
                return dict(zip(keys, items[1::2]))
        return items
    return v


class Locker:
    """Takes locks on one Redis/Valkey server loaded with the dlock module,
    or on a Redis Cluster (each resource on the master of its slot).
    Thread-safe; share one per process.

    ``client`` is a ``redis.Redis`` (its address, login and TLS settings are
    used; the locker keeps connections of its own, with timeouts and
    without redis-py's own retries, so that every retry is a same-token
    one), a ``redis.cluster.RedisCluster``, a URL such as
    ``redis://:password@127.0.0.1:6379/0``, or None for
    ``redis://localhost:6379``. Nothing is connected until the first
    request (except for a cluster, whose slot map is read at once).

    - ``io_timeout``: the longest wait for one reply, beyond a waiting
      acquire's own wait (default 2 s); new connections give up connecting
      after that too.
    - ``retry_for``: how long connection errors are retried with the same
      token (default 2 s): a non-waiting acquire, an extend or a release
      gives up after that; a waiting acquire after that long an outage.
    - ``min_replicas`` (with ``replicas_timeout``): every grant and renewal
      must be acknowledged by that many replicas (``WAIT n timeout`` on the
      connection that made the write); see :class:`~dlock.TooFewReplicas`.
    - ``watchdog``: renew every lease in the background (default: only
      leases taken by a ``with`` block).

    >>> locker = Locker(redis.Redis(port=6379))
    >>> with locker.lock("orders:42", ttl=30, wait=5) as lease:
    ...     storage.write(row, fence=lease.fence)
    """

    def __init__(
        self,
        client: Union[None, str, "redis.Redis", "redis.cluster.RedisCluster"] = None,
        *,
        io_timeout: Duration = 2.0,
        retry_for: Duration = 2.0,
        min_replicas: Optional[int] = None,
        replicas_timeout: Duration = 1.0,
        watchdog: Optional[bool] = None,
        max_idle: int = 64,
    ) -> None:
        self.settings = Settings(
            seconds(io_timeout),
            seconds(retry_for),
            _replicas(min_replicas, replicas_timeout),
        )
        self.watchdog = watchdog
        io = self.settings.io_timeout
        if client is None:
            client = "redis://localhost:6379/0"
        if isinstance(client, str):
            url = client
            try:
                client = redis.Redis.from_url(url)
            except ValueError as e:
                raise InvalidRequest(f"{_redact(url)}: {e}") from None
        refuse_asyncio_client(client)
        if isinstance(client, redis.cluster.RedisCluster):
            seeds = [
                Node(*settings_of(n.redis_connection), connect_timeout=io, max_idle=max_idle)
                for n in client.get_nodes()
                if n.redis_connection is not None
            ]
            if not seeds:
                raise InvalidRequest("no cluster node given")
            try:
                cmap = ClusterMap(seeds, io)
            except Failure as f:
                raise f.into_error() from None
            self.topology = Topology(cluster=cmap)
        elif hasattr(client, "connection_pool"):
            self.topology = Topology(single=Node(*settings_of(client), connect_timeout=io, max_idle=max_idle))
        else:
            raise InvalidRequest(
                f"a Locker takes a redis.Redis, a redis.cluster.RedisCluster or a URL, not {client!r}"
            )

    @classmethod
    def cluster(cls, urls: Sequence[str], **kw: Any) -> "Locker":
        """A locker on a Redis Cluster, from the URLs of some of its nodes.
        A set's resources must share a slot (a hash tag:
        ``{order:42}:rows``, ``{order:42}:stock``)."""
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise InvalidRequest("no cluster node given")
        io = seconds(kw.get("io_timeout", 2.0))
        rc = redis.cluster.RedisCluster.from_url(urls[0], socket_timeout=io, socket_connect_timeout=io)
        try:
            return cls(rc, **kw)
        finally:
            rc.close()

    def close(self) -> None:
        """Closes the idle connections (the locker stays usable)."""
        self.topology.close()

    def __enter__(self) -> "Locker":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()

    # --- lock requests ---------------------------------------------------------

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
        on_lost: Optional[OnLost] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        min_replicas: Optional[int] = None,
        replicas_timeout: Optional[Duration] = None,
        on_retry: Optional[OnRetry] = None,
        raise_on_lost: bool = True,
    ) -> "Lock":
        """A lock on ``resource`` (exclusive unless ``shared``, ``limit`` or
        ``owner`` say otherwise), to use as ``with locker.lock(...) as
        lease:`` or ``lease = locker.lock(...).acquire()``.

        - ``ttl``: the lease, in seconds (default 30).
        - ``blocking``/``wait``: wait in the server's FIFO queue (``WAIT``,
          never polling) up to ``wait`` seconds; ``wait=None`` waits as
          long as the server allows (2^47 ms); ``blocking=False`` is a
          single try.
        - ``watchdog``: renew at a third of the ttl until release (default:
          on for a ``with`` block, off for ``acquire()``); ``on_lost(lease)``
          is called once when the lease is found lost.
        - ``token``: acquire with this token instead of a fresh random one
          (to retry an acquisition whose reply was lost, or to hand the
          lease to another process).
        - ``retry_for``, ``min_replicas``/``replicas_timeout``: as on the
          :class:`Locker`, for this lock; ``on_retry(error)`` is told of
          each same-token retry of the acquire.
        - ``raise_on_lost``: leaving the ``with`` block raises
          :class:`~dlock.LockLost` when the lease was lost meanwhile
          (default True).
        """
        spec = _spec(resource, ttl, shared, limit, owner)
        return Lock(
            self,
            spec,
            wait=wait,
            blocking=blocking,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            min_replicas=min_replicas,
            replicas_timeout=replicas_timeout,
            on_retry=on_retry,
            raise_on_lost=raise_on_lost,
        )

    def write_lock(self, resource: Key, **kw: Any) -> "Lock":
        """The exclusive side of a read-write lock (the same as :meth:`lock`)."""
        return self.lock(resource, **kw)

    def read_lock(self, resource: Key, **kw: Any) -> "Lock":
        """A shared hold (``SHARED``): readers coexist; a writer excludes them.
        Fair: a queued writer is not passed by new readers."""
        return self.lock(resource, shared=True, **kw)

    def semaphore(self, resource: Key, limit: int, **kw: Any) -> "Lock":
        """One of ``limit`` leased permits (``LIMIT n``): a permit whose
        holder crashed comes back at its deadline."""
        return self.lock(resource, limit=limit, **kw)

    def reentrant_lock(self, resource: Key, owner: Optional[Key] = None, **kw: Any) -> "Lock":
        """A reentrant lock (``OWNER``): holds of one owner never exclude
        each other; the resource stays held until the owner's last hold
        ends. The owner defaults to the acquiring thread
        (:func:`thread_owner`), so nesting ``with`` blocks of it on one
        thread works like :class:`threading.RLock`. Pass ``shared=True`` for
        reentrant reads."""
        return self.lock(resource, owner=PER_THREAD if owner is None else owner, **kw)

    def multi_lock(self, resources: Iterable[Key], **kw: Any) -> "Lock":
        """A set of resources granted all or nothing, with one fence
        (``DLOCK.MACQUIRE``); ``shared=True`` for shared holds on every
        member. In Redis Cluster the members must share a slot: use a hash
        tag (``{order:42}:rows``)."""
        res = list(resources)
        if len(res) < 2:
            return self.lock(res[0] if res else "", **kw)
        return self.lock(res, **kw)  # type: ignore[arg-type]

    def election(
        self, name: Key, *, id: Optional[str] = None, ttl: Duration = 15.0, retry_for: Optional[Duration] = None
    ) -> "Election":
        """The leader election held on ``name`` (see :class:`dlock.Election`):
        ``id`` is what observers see of this candidate, ``ttl`` the
        leadership's lease (default 15 s)."""
        return Election(self, name, id=id, ttl=ttl, retry_for=retry_for)

    # --- by token, info ----------------------------------------------------------

    def _backend(self, spec: Spec, token: str, settings: Optional[Settings] = None) -> SingleBackend:
        return SingleBackend(self.topology, spec, token, settings or self.settings)

    def extend_token(self, resource: Key, token: str, ttl: Duration) -> bool:
        """Extends the lease ``token`` holds on ``resource`` to ``ttl`` from
        now, without a Lease (e.g. a lease another process took): True
        extended, False the token holds nothing there."""
        check_token(token)
        if not token:
            raise InvalidRequest("token must not be empty")
        spec = _spec(resource, ttl, False, None, None)
        r = self._backend(spec, token).extend(spec.ttl_ms)
        if r.kind == "extended":
            return True
        if r.kind == "lost":
            return False
        assert r.error is not None
        raise r.error

    def release_token(self, resource: Key, token: str) -> bool:
        """Releases the lease ``token`` holds on ``resource``, without a
        Lease: True released, False the token holds nothing there (also
        when a retry after a lost reply finds it gone: the caller cannot
        tell, and must not assume it held the lock to the end)."""
        check_token(token)
        if not token:
            raise InvalidRequest("token must not be empty")
        spec = _spec(resource, 1.0, False, None, None)
        return self._backend(spec, token).release(now())

    def info(self, resource: Key) -> Optional[Dict[str, Any]]:
        """``DLOCK.INFO resource`` as a dict (None when free): ``token``,
        ``fence``, ``ttl``, ``waiters`` for a plain lock; ``kind``,
        ``limit``, ``waiters``, ``holds`` otherwise."""
        spec = _spec(resource, 1.0, False, None, None)

        def op(conn: Any, asking: bool) -> Any:
            return check(run_pipeline(conn, commands(asking, ("DLOCK.INFO", resource), None)))[-1]

        try:
            v = self.topology.run(spec.route_key(), self.settings.io_timeout, 0.0, op)
        except Failure as f:
            raise f.into_error() from None
        return decode_info(v)

    def check(self, resource: Key, fence: int) -> bool:
        """Whether ``fence`` is a live hold on ``resource`` now (the
        sequencer check, ``DLOCK.CHECK``), for a service handed a fence.
        Racy by nature: the hold can end right after the answer."""
        from . import _guard

        return _guard.check_fence(self.topology, self.settings, resource, fence)

    def session(self, ttl: Duration = 30.0, *, bind: bool = False, lock_delay: Optional[Duration] = None) -> "Session":
        """A session on this locker's server (``DLOCK.SESSION``): one
        liveness lease for the locks taken through it, kept alive by one
        ``KEEPALIVE`` per third of ``ttl``; see :class:`dlock.session.Session`."""
        from .session import Session

        return Session(self, ttl, bind, lock_delay)


def _replicas(n: Optional[int], timeout: Optional[Duration]) -> Optional[Tuple[int, float]]:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidRequest("min_replicas must be a non-negative integer")
    return n, seconds(timeout if timeout is not None else 1.0)


def _spec(resource: Any, ttl: Duration, shared: bool, limit: Optional[int], owner: Any) -> Spec:
    return Spec(resource, ttl, shared, limit, owner)


def _redact(url: str) -> str:
    """``url`` with its password shown as ``***``: the login's, and a
    ``password=`` in the query (redis-py reads one there too)."""
    before, q, query = url.partition("?")
    if q:
        pairs = [
            f"{k}=***" if sep and k == "password" else f"{k}{sep}{v}"
            for k, sep, v in (p.partition("=") for p in query.split("&"))
        ]
        url = f"{before}?{'&'.join(pairs)}"
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    auth, at, host = rest.rpartition("@")
    if not at or ":" not in auth:
        return url
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


class Lock:
    """One lock request, reusable: ``with lock as lease:`` acquires (and
    raises :class:`~dlock.NotAcquired` when not granted), yields the
    :class:`~dlock.Lease`, and releases on leaving; ``acquire()`` returns the
    Lease or None. Nested ``with`` blocks of one Lock on one thread each
    take a hold of their own (a reentrant lock's nest; a plain lock's inner
    block would wait for the outer one)."""

    def __init__(
        self,
        locker: Locker,
        spec: Spec,
        *,
        wait: Optional[Duration],
        blocking: bool,
        watchdog: Optional[bool],
        on_lost: Optional[OnLost],
        token: Optional[str],
        retry_for: Optional[Duration],
        min_replicas: Optional[int],
        replicas_timeout: Optional[Duration],
        on_retry: Optional[OnRetry],
        raise_on_lost: bool,
    ) -> None:
        check_token(token)
        self.locker = locker
        self.spec = spec
        self.wait = wait
        self.blocking = blocking
        self.watchdog = watchdog
        self.on_lost = on_lost
        self.token = token
        self.on_retry = on_retry
        self.raise_on_lost = raise_on_lost
        s = locker.settings
        kw: Dict[str, Any] = {}
        if retry_for is not None:
            kw["retry_for"] = seconds(retry_for)
        if min_replicas is not None:
            kw["min_replicas"] = _replicas(min_replicas, replicas_timeout)
        elif replicas_timeout is not None and s.min_replicas is not None:
            kw["min_replicas"] = (s.min_replicas[0], seconds(replicas_timeout))
        self.settings = s.copy(**kw) if kw else s
        if wait is not None:
            to_ms(wait, "wait")
        self._local = threading.local()

    @property
    def resource(self) -> Key:
        return self.spec.resources[0]

    def _wait_ms(self, blocking: Optional[bool], wait: Any) -> Optional[int]:
        b = self.blocking if blocking is None else blocking
        if not b:
            return None
        w = self.wait if wait is _UNSET else wait
        return MAX_MS if w is None else to_ms(w, "wait")

    def acquire(
        self,
        blocking: Optional[bool] = None,
        wait: Any = _UNSET,
        *,
        token: Optional[str] = None,
        watchdog: Optional[bool] = None,
    ) -> Optional[Lease]:
        """Acquires: the :class:`~dlock.Lease` when granted, None when busy
        (or the wait ran out). ``blocking``/``wait`` override the lock's.
        Connection errors are retried with the same token (so a lost reply
        never leaves an orphaned lock or a second hold) for ``retry_for``
        in a row; the whole call ends by its wait (a call that does not
        wait: after ``retry_for``) plus 250 ms for a reply in flight (plus
        the replicas timeout when ``min_replicas`` is set)."""
        if token is not None:
            check_token(token)
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, thread_owner())
        tok = token or self.token or new_token()
        backend = SingleBackend(self.locker.topology, spec, tok, self.settings)
        got = backend.acquire(self._wait_ms(blocking, wait), self.on_retry)
        if got is None:
            return None
        fence, valid_until = got
        wd = watchdog if watchdog is not None else self.watchdog
        if wd is None:
            wd = bool(self.locker.watchdog)
        return Lease(backend, spec.resources, tok, [fence], spec.ttl_ms, valid_until, wd, self.on_lost)

    def __enter__(self) -> Lease:
        wd = self.watchdog
        if wd is None:
            wd = self.locker.watchdog if self.locker.watchdog is not None else True
        lease = self.acquire(watchdog=wd)
        if lease is None:
            raise NotAcquired(f"{self.resource!r} is busy")
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(lease)
        return lease

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease: Lease = self._local.stack.pop()
        lease._leave(et, ev, self.raise_on_lost)

    def __repr__(self) -> str:
        return f"<Lock {self.spec.resources!r}>"


# Last, so that the election module may import this one (it names the Locker in its types).
from .election import Election  # noqa: E402
