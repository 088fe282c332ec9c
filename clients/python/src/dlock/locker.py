"""Locks on one Redis/Valkey server or a Redis Cluster: :class:`Locker`
(where locks are taken, and the settings); the lock requests it makes are
:class:`~dlock.Lock` objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Union

import redis

from ._lease import OnLost
from ._wanted import OnWanted
from ._lock import Lock
from ._node import Node, check, refuse_asyncio_client, run_pipeline, settings_of
from ._topology import ClusterMap, Topology
# _UNSET and PER_THREAD are re-exported: the Redlock's lock reads them here.
from ._request import _UNSET as _UNSET
from ._request import PER_THREAD as PER_THREAD
from ._request import Wait, make_spec, one_or_set, replicas, thread_owner
from ._single import OnRetry, Settings, SingleBackend, commands
from ._spec import Duration, Key, Spec, check_token, now, seconds
from .errors import Failure, InvalidRequest

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Locker", "Lock", "thread_owner"]

# The Redlock's module reads these here.
_spec = make_spec
_replicas = replicas


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
    - ``watchdog``: renew leases in the background until released
      (default True: for ``with`` blocks and ``acquire()`` alike; False
      turns it off for every lock that does not ask for it).

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
                for n in client.get_nodes()  # type: ignore[no-untyped-call]
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
    def cluster(
        cls,
        urls: Union[str, Sequence[str]],
        *,
        io_timeout: Duration = 2.0,
        retry_for: Duration = 2.0,
        min_replicas: Optional[int] = None,
        replicas_timeout: Duration = 1.0,
        watchdog: Optional[bool] = None,
        max_idle: int = 64,
    ) -> "Locker":
        """A locker on a Redis Cluster, from the URLs of some of its nodes
        (the other settings as for :class:`Locker`). A set's resources
        must share a slot (a hash tag: ``{order:42}:rows``,
        ``{order:42}:stock``)."""
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise InvalidRequest("no cluster node given")
        io = seconds(io_timeout)
        rc = redis.cluster.RedisCluster.from_url(urls[0], socket_timeout=io, socket_connect_timeout=io)
        try:
            return cls(
                rc,
                io_timeout=io_timeout,
                retry_for=retry_for,
                min_replicas=min_replicas,
                replicas_timeout=replicas_timeout,
                watchdog=watchdog,
                max_idle=max_idle,
            )
        finally:
            rc.close()

    def close(self) -> None:
        """Closes the idle connections (the locker stays usable)."""
        self.topology.close()

    def __enter__(self) -> "Locker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- lock requests ---------------------------------------------------------

    def lock(
        self,
        resource: Union[Key, Sequence[Key]],
        *,
        ttl: Duration = 30.0,
        wait: Wait = None,
        blocking_timeout: Wait = _UNSET,
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
        max_hold: Optional[Duration] = None,
        on_wanted: Optional[OnWanted] = None,
        priority: Optional[int] = None,
        permits: Optional[int] = None,
    ) -> "Lock":
        """A lock on ``resource`` (exclusive unless ``shared``, ``limit`` or
        ``owner`` say otherwise), to use as ``with locker.lock(...) as
        lease:`` or ``lease = locker.lock(...).acquire()``.

        - ``ttl``: the lease, in seconds (default 30).
        - ``blocking``/``wait``: wait in the server's FIFO queue (``WAIT``,
          never polling) up to ``wait`` seconds; ``wait=None`` or ``-1``
          waits as long as the server allows (2^47 ms), another negative
          wait is refused; ``blocking=False`` is a single try.
          ``blocking_timeout`` is redis-py's name for ``wait``.
        - ``watchdog``: renew at a third of the ttl until release (default:
          on, for a ``with`` block and ``acquire()`` alike, unless the
          Locker says ``watchdog=False``); ``on_lost(lease)`` is called
          once when the lease is found lost.
        - ``token``: acquire with this token instead of a fresh random one
          (to retry an acquisition whose reply was lost, or to hand the
          lease to another process).
        - ``retry_for``, ``min_replicas``/``replicas_timeout``: as on the
          :class:`Locker`, for this lock; ``on_retry(error)`` is told of
          each same-token retry of the acquire.
        - ``on_wanted(lease, waiters)``: called when someone starts
          waiting for the lock: each renewal (the watchdog's, or
          ``extend()``) asks the server (``EXTEND ... WANTED``), and the
          hook runs, on the callback pool, when the count of requests
          queued on the resource goes from 0 to more (once per such change,
          again after it went back to 0); a holder yields by releasing. A
          server that refuses the option is logged once, and renewals go on.
        - ``raise_on_lost``: leaving the ``with`` block (and the Lock's
          ``release()``/``extend()``) raises :class:`~dlock.LockLost` when
          the lease was lost meanwhile (default True).
        - ``max_hold``: a cap on holding (the server's ``MAXHOLD``): the
          lease may live at most ``max_hold`` seconds from its grant however
          often it is renewed, and the lease is the smaller of ``ttl`` and
          ``max_hold``. Renewals stay short of the cap (see docs/python.md):
          the lease is then lost at the cap as for any loss (``on_lost``,
          ``lease.lost``), with ``lease.loss_reason`` saying so, and leaving
          the ``with`` block raises :class:`~dlock.MaxHoldReached` (a
          :class:`~dlock.LockLost` whose ``reason`` says why). A manual
          ``extend`` past the cap is refused by the server.
        - ``priority``: where the request stands in the server's queue, 0
          (the default) to 1000, higher first, FIFO within one priority,
          aged by the server's ``dlock.priority-aging-ms`` so that nobody
          starves (``PRIORITY``).
        - ``permits``: with ``limit`` n above 1, the lease counts as
          ``permits`` of the n permits (``PERMITS``), granted all at once
          or not at all, renewed and released as one; 1 (the default) to n.
        """
        spec = _spec(resource, ttl, shared, limit, owner, max_hold, priority, permits)
        return Lock(
            self,
            spec,
            wait=wait,
            blocking_timeout=blocking_timeout,
            blocking=blocking,
            watchdog=watchdog,
            on_lost=on_lost,
            token=token,
            retry_for=retry_for,
            min_replicas=min_replicas,
            replicas_timeout=replicas_timeout,
            on_retry=on_retry,
            raise_on_lost=raise_on_lost,
            on_wanted=on_wanted,
        )

    def write_lock(
        self,
        resource: Key,
        *,
        ttl: Duration = 30.0,
        wait: Wait = None,
        blocking_timeout: Wait = _UNSET,
        blocking: bool = True,
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
        """The exclusive side of a read-write lock (the same as :meth:`lock`)."""
        return self.lock(resource, ttl=ttl, wait=wait, blocking_timeout=blocking_timeout, blocking=blocking,
            limit=limit, owner=owner, watchdog=watchdog, on_lost=on_lost, token=token, retry_for=retry_for,
            min_replicas=min_replicas, replicas_timeout=replicas_timeout, on_retry=on_retry,
            raise_on_lost=raise_on_lost)

    def read_lock(
        self,
        resource: Key,
        *,
        ttl: Duration = 30.0,
        wait: Wait = None,
        blocking_timeout: Wait = _UNSET,
        blocking: bool = True,
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
        """A shared hold (``SHARED``): readers coexist; a writer excludes them.
        Fair: a queued writer is not passed by new readers."""
        return self.lock(resource, ttl=ttl, wait=wait, blocking_timeout=blocking_timeout, blocking=blocking,
            shared=True, limit=limit, owner=owner, watchdog=watchdog, on_lost=on_lost, token=token,
            retry_for=retry_for, min_replicas=min_replicas, replicas_timeout=replicas_timeout,
            on_retry=on_retry, raise_on_lost=raise_on_lost)

    def semaphore(
        self,
        resource: Key,
        limit: int,
        *,
        ttl: Duration = 30.0,
        wait: Wait = None,
        blocking_timeout: Wait = _UNSET,
        blocking: bool = True,
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
        """One of ``limit`` leased permits (``LIMIT n``): a permit whose
        holder crashed comes back at its deadline."""
        return self.lock(resource, ttl=ttl, wait=wait, blocking_timeout=blocking_timeout, blocking=blocking,
            limit=limit, owner=owner, watchdog=watchdog, on_lost=on_lost, token=token,
            retry_for=retry_for, min_replicas=min_replicas, replicas_timeout=replicas_timeout,
            on_retry=on_retry, raise_on_lost=raise_on_lost)

    def reentrant_lock(
        self,
        resource: Key,
        owner: Optional[Key] = None,
        *,
        ttl: Duration = 30.0,
        wait: Wait = None,
        blocking_timeout: Wait = _UNSET,
        blocking: bool = True,
        shared: bool = False,
        limit: Optional[int] = None,
        watchdog: Optional[bool] = None,
        on_lost: Optional[OnLost] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        min_replicas: Optional[int] = None,
        replicas_timeout: Optional[Duration] = None,
        on_retry: Optional[OnRetry] = None,
        raise_on_lost: bool = True,
    ) -> "Lock":
        """A reentrant lock (``OWNER``): holds of one owner never exclude
        each other; the resource stays held until the owner's last hold
        ends. The owner defaults to the acquiring thread
        (:func:`thread_owner`), so nesting ``with`` blocks of it on one
        thread works like :class:`threading.RLock`. Pass ``shared=True`` for
        reentrant reads."""
        return self.lock(resource, ttl=ttl, wait=wait, blocking_timeout=blocking_timeout, blocking=blocking,
            shared=shared, limit=limit, owner=PER_THREAD if owner is None else owner, watchdog=watchdog,
            on_lost=on_lost, token=token, retry_for=retry_for, min_replicas=min_replicas,
            replicas_timeout=replicas_timeout, on_retry=on_retry, raise_on_lost=raise_on_lost)

    def multi_lock(
        self,
        resources: Iterable[Key],
        *,
        ttl: Duration = 30.0,
        wait: Wait = None,
        blocking_timeout: Wait = _UNSET,
        blocking: bool = True,
        shared: bool = False,
        watchdog: Optional[bool] = None,
        on_lost: Optional[OnLost] = None,
        token: Optional[str] = None,
        retry_for: Optional[Duration] = None,
        min_replicas: Optional[int] = None,
        replicas_timeout: Optional[Duration] = None,
        on_retry: Optional[OnRetry] = None,
        raise_on_lost: bool = True,
    ) -> "Lock":
        """A set of resources granted all or nothing, with one fence
        (``DLOCK.MACQUIRE``); ``shared=True`` for shared holds on every
        member. In Redis Cluster the members must share a slot: use a hash
        tag (``{order:42}:rows``)."""
        return self.lock(one_or_set(resources), ttl=ttl, wait=wait, blocking_timeout=blocking_timeout,
            blocking=blocking, shared=shared, watchdog=watchdog, on_lost=on_lost, token=token,
            retry_for=retry_for, min_replicas=min_replicas, replicas_timeout=replicas_timeout,
            on_retry=on_retry, raise_on_lost=raise_on_lost)

    def election(
        self,
        name: Key,
        *,
        id: Optional[str] = None,
        ttl: Duration = 15.0,
        retry_for: Optional[Duration] = None,
        prefer: Optional[str] = None,
    ) -> "Election":
        """The leader election held on ``name`` (see :class:`dlock.Election`):
        ``id`` is what observers see of this candidate, ``ttl`` the
        leadership's lease (default 15 s); ``prefer``, the id of a
        candidate this one hands its lead to as soon as it waits (tried
        when it starts leading and every ttl/3)."""
        return Election(self, name, id=id, ttl=ttl, retry_for=retry_for, prefer=prefer)

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
        answer: Optional[Dict[str, Any]] = decode_info(v)
        return answer

    def position(self, resource: Key, token: str) -> Optional[int]:
        """Where ``token`` waits in ``resource``'s queue
        (``DLOCK.POSITION``): 1 is served next; None when it does not wait
        there (never queued, granted, or gone). A waiting ``acquire``
        blocks its own connection: ask from another thread. A set request
        has a place in each member's queue."""
        from . import _queue

        return _queue.decode_position(self._read(resource, _queue.position_command(resource, token)))

    def resize(self, resource: Key, n: int) -> Optional[int]:
        """Sets the limit of the semaphore ``resource`` to ``n`` while its
        permits are held (``DLOCK.RESIZE``): growing it grants the waiters
        that fit at once, shrinking it keeps every hold and grants nobody
        until they fit. The previous limit, or None when nothing holds it
        (nothing changes). The new limit is forgotten with the last permit.
        ``n`` from 2 to 2^20, else :class:`~dlock.InvalidRequest` before any
        server is asked. Setting a limit twice leaves what once does, so it
        is retried through connection errors."""
        from . import _queue

        return _queue.decode_resize(self._read(resource, _queue.resize_command(resource, n)))

    def waiters(self, resource: Key, *, offset: int = 0, count: int = 10) -> List[Dict[str, Any]]:
        """The requests waiting on ``resource`` in the order they are
        served (``DLOCK.WAITERS``), ``count`` (1 to 1000) from position
        ``offset + 1`` on: dicts with ``position``, ``token``, ``owner``
        (when named), ``mode``, ``limit``, ``permits`` (the permits asked
        for, 1 without ``PERMITS``), ``set`` (a set request's member
        count), ``session`` (when bound), ``waited`` and ``timeout`` (ms;
        -1: until granted)."""
        from . import _queue

        return _queue.decode_waiters(self._read(resource, _queue.waiters_command(resource, offset, count)))

    def _read(self, resource: Key, command: Any) -> Any:
        """Runs the read-only ``command`` on ``resource``'s server."""
        spec = _spec(resource, 1.0, False, None, None)

        def op(conn: Any, asking: bool) -> Any:
            return check(run_pipeline(conn, commands(asking, command, None)))[-1]

        try:
            return self.topology.run(spec.route_key(), self.settings.io_timeout, 0.0, op)
        except Failure as f:
            raise f.into_error() from None

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


from .election import Election  # noqa: E402
