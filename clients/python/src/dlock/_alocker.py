"""The asyncio :class:`Locker`: where locks are taken, and the settings;
its lock requests are :class:`dlock.asyncio.Lock` objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Union

import redis
import redis.asyncio
import redis.asyncio.cluster

from ._abackend import _Backend
from ._pool import cap_of
from ._alease import OnLost
from ._awanted import OnWanted
from ._alock import Lock, task_owner
from ._anode import (
    Conn,
    _async_class,
    _Node,
    _pipeline,
    _settings_of,
    _Topology,
)
from ._lease import EXTENDED, LOST
from ._node import _conn_settings
from ._request import _UNSET, PER_THREAD, Wait, given_wait, lock_settings, make_spec, one_or_set, replicas
from ._single import OnRetry, Settings, commands
from ._spec import Duration, Key, check_token, now, seconds
from .errors import Failure, InvalidRequest
from .locker import _redact, decode_info

if TYPE_CHECKING:
    from ._asession import Session

__all__ = ["Locker", "Lock", "task_owner"]


class Locker:
    """Takes locks on one server or a Redis Cluster, from asyncio code:
    the same settings as :class:`dlock.Locker`. ``client`` is a
    ``redis.asyncio.Redis`` (its address and login are used; the locker
    keeps connections of its own), a ``redis.asyncio.cluster.RedisCluster``
    (see also :meth:`cluster`), a URL, or None for localhost."""

    def __init__(
        self,
        client: Union[None, str, "redis.asyncio.Redis"] = None,
        *,
        io_timeout: Duration = 2.0,
        retry_for: Duration = 2.0,
        min_replicas: Optional[int] = None,
        replicas_timeout: Duration = 1.0,
        watchdog: Optional[bool] = None,
        max_idle: int = 64,
        _seeds: Optional[List[_Node]] = None,
    ) -> None:
        self.settings = Settings(seconds(io_timeout), seconds(retry_for), replicas(min_replicas, replicas_timeout))
        self.watchdog = watchdog
        io = self.settings.io_timeout
        if _seeds is not None:
            self.topology = _Topology(seeds=_seeds)
            return
        if client is None:
            client = "redis://localhost:6379/0"
        if isinstance(client, str):
            url = client
            try:
                client = redis.asyncio.Redis.from_url(url)
            except ValueError as e:
                raise InvalidRequest(f"{_redact(url)}: {e}") from None
        cluster_cls = getattr(getattr(redis.asyncio, "cluster", None), "RedisCluster", None)
        if cluster_cls is not None and isinstance(client, cluster_cls):
            # Its startup nodes' address and login; the slot map is read on
            # first use.
            nodes = list(client.nodes_manager.startup_nodes.values())
            if not nodes:
                raise InvalidRequest("no cluster node given")
            self.topology = _Topology(
                seeds=[
                    _Node(
                        *_conn_settings(_async_class(n.connection_class), n.connection_kwargs, cap_of(n)),
                        connect_timeout=io,
                        max_idle=max_idle,
                    )
                    for n in nodes
                ]
            )
            return
        if not hasattr(client, "connection_pool"):
            raise InvalidRequest(
                f"a Locker takes a redis.asyncio.Redis, a redis.asyncio.cluster.RedisCluster "
                f"or a URL, not {client!r}"
            )
        self.topology = _Topology(single=_Node(*_settings_of(client), connect_timeout=io, max_idle=max_idle))

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
        (the slot map is read on first use; the other settings as for
        :class:`Locker`). A set's resources must share a slot: use a hash
        tag."""
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise InvalidRequest("no cluster node given")
        io = seconds(io_timeout)
        seeds = [
            _Node(*_settings_of(redis.asyncio.Redis.from_url(u)), connect_timeout=io, max_idle=max_idle)
            for u in urls
        ]
        return cls(
            None,
            io_timeout=io_timeout,
            retry_for=retry_for,
            min_replicas=min_replicas,
            replicas_timeout=replicas_timeout,
            watchdog=watchdog,
            _seeds=seeds,
        )

    def close(self) -> None:
        """Closes the idle connections (the locker stays usable)."""
        self.topology.close()

    async def __aenter__(self) -> "Locker":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

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
        """As :meth:`dlock.Locker.lock`, for ``async with`` and
        ``await lock.acquire()`` (``max_hold``, ``priority`` and ``permits`` too); ``on_wanted(lease,
        waiters)`` is called on the event loop after the renewal that saw
        the waiters (a coroutine function's coroutine runs as a task)."""
        spec = make_spec(resource, ttl, shared, limit, owner, max_hold, priority, permits)
        check_token(token)
        w = given_wait(_UNSET if wait is None else wait, blocking_timeout)
        settings = lock_settings(self.settings, retry_for, min_replicas, replicas_timeout)
        return Lock(
            self,
            spec,
            None if w is _UNSET else w,
            blocking,
            watchdog,
            on_lost,
            token,
            settings,
            on_retry,
            raise_on_lost,
            on_wanted,
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
        """A reentrant lock (``OWNER``); the owner defaults to the task that
        acquires (:func:`task_owner`): the task that calls ``acquire()``,
        also when the call is awaited through ``asyncio.wait_for``."""
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
        """The leader election held on ``name`` (see :class:`dlock.asyncio.Election`;
        ``prefer``, as for :meth:`dlock.Locker.election`: a task of the loop)."""
        return Election(self, name, id=id, ttl=ttl, retry_for=retry_for, prefer=prefer)

    async def extend_token(self, resource: Key, token: str, ttl: Duration) -> bool:
        """As :meth:`dlock.Locker.extend_token`."""
        check_token(token)
        if not token:
            raise InvalidRequest("token must not be empty")
        spec = make_spec(resource, ttl, False, None, None)
        r = await _Backend(self.topology, spec, token, self.settings).extend(spec.ttl_ms)
        if r.kind == EXTENDED:
            return True
        if r.kind == LOST:
            return False
        assert r.error is not None
        raise r.error

    async def release_token(self, resource: Key, token: str) -> bool:
        """As :meth:`dlock.Locker.release_token`."""
        check_token(token)
        if not token:
            raise InvalidRequest("token must not be empty")
        spec = make_spec(resource, 1.0, False, None, None)
        return await _Backend(self.topology, spec, token, self.settings).release(now())

    async def info(self, resource: Key) -> Optional[Dict[str, Any]]:
        """As :meth:`dlock.Locker.info`."""
        spec = make_spec(resource, 1.0, False, None, None)

        async def op(conn: Conn, asking: bool) -> Any:
            r = (await _pipeline(conn, commands(asking, ("DLOCK.INFO", resource), None)))[-1]
            if isinstance(r, Exception):
                raise r
            return r

        try:
            v = await self.topology.run(spec.route_key(), self.settings.io_timeout, 0.0, op)
        except Failure as f:
            raise f.into_error() from None
        answer: Optional[Dict[str, Any]] = decode_info(v)
        return answer

    async def position(self, resource: Key, token: str) -> Optional[int]:
        """As :meth:`dlock.Locker.position`: ``DLOCK.POSITION``."""
        from . import _queue

        return _queue.decode_position(await self._read(resource, _queue.position_command(resource, token)))

    async def resize(self, resource: Key, n: int) -> Optional[int]:
        """As :meth:`dlock.Locker.resize`: ``DLOCK.RESIZE``."""
        from . import _queue

        return _queue.decode_resize(await self._read(resource, _queue.resize_command(resource, n)))

    async def waiters(self, resource: Key, *, offset: int = 0, count: int = 10) -> List[Dict[str, Any]]:
        """As :meth:`dlock.Locker.waiters`: ``DLOCK.WAITERS``."""
        from . import _queue

        return _queue.decode_waiters(await self._read(resource, _queue.waiters_command(resource, offset, count)))

    async def _read(self, resource: Key, command: Any) -> Any:
        spec = make_spec(resource, 1.0, False, None, None)

        async def op(conn: Conn, asking: bool) -> Any:
            r = (await _pipeline(conn, commands(asking, command, None)))[-1]
            if isinstance(r, Exception):
                raise r
            return r

        try:
            return await self.topology.run(spec.route_key(), self.settings.io_timeout, 0.0, op)
        except Failure as f:
            raise f.into_error() from None

    async def check(self, resource: Key, fence: int) -> bool:
        """As :meth:`dlock.Locker.check`: ``DLOCK.CHECK``."""
        from . import _guard

        return await _guard.acheck_fence(self.topology, self.settings, resource, fence)

    def session(self, ttl: Duration = 30.0, *, bind: bool = False, lock_delay: Optional[Duration] = None) -> "Session":
        """As :meth:`dlock.Locker.session`: a session whose keeper is a task
        of the loop it is opened on."""
        from ._asession import Session

        return Session(self, ttl, bind, lock_delay)


from ._aelection import Election  # noqa: E402
