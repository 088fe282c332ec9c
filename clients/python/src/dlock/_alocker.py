"""The asyncio :class:`Locker` and :class:`Lock`."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Union

import redis
import redis.asyncio
import redis.asyncio.cluster

from ._abackend import _Backend
from ._pool import cap_of
from ._alease import Lease, OnLost
from ._anode import (
    Conn,
    _async_class,
    _conn_settings,
    _Node,
    _pipeline,
    _settings_of,
    _Topology,
)
from ._lease import EXTENDED, LOST
from ._single import OnRetry, Settings, commands
from ._spec import (
    MAX_MS,
    Duration,
    Key,
    Spec,
    check_token,
    new_token,
    now,
    seconds,
    to_ms,
)
from .errors import (
    Failure,
    InvalidRequest,
    NotAcquired,
)
from .locker import _UNSET, PER_THREAD, _redact, _replicas, _spec, decode_info

if TYPE_CHECKING:
    from ._asession import Session

_NONCE = os.urandom(4).hex()
_HOST = socket.gethostname()
_task_ids: "weakref.WeakKeyDictionary[asyncio.Task, int]" = weakref.WeakKeyDictionary()
_task_counter = [0]
_task_lock = threading.Lock()


def task_owner() -> str:
    """The default owner of a reentrant lock in asyncio: this host,
    process and task (a task is what nests ``async with`` blocks)."""
    task = asyncio.current_task()
    with _task_lock:
        n = _task_ids.get(task) if task is not None else None
        if n is None:
            _task_counter[0] += 1
            n = _task_counter[0]
            if task is not None:
                _task_ids[task] = n
    return f"{_HOST}:{os.getpid()}:{_NONCE}:task-{n}"



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
        self.settings = Settings(seconds(io_timeout), seconds(retry_for), _replicas(min_replicas, replicas_timeout))
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
    def cluster(cls, urls: Sequence[str], **kw: Any) -> "Locker":
        """A locker on a Redis Cluster, from the URLs of some of its nodes
        (the slot map is read on first use). A set's resources must share a
        slot: use a hash tag."""
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise InvalidRequest("no cluster node given")
        io = seconds(kw.get("io_timeout", 2.0))
        max_idle = kw.pop("max_idle", 64)
        seeds = [
            _Node(*_settings_of(redis.asyncio.Redis.from_url(u)), connect_timeout=io, max_idle=max_idle)
            for u in urls
        ]
        return cls(None, _seeds=seeds, **kw)

    def close(self) -> None:
        """Closes the idle connections (the locker stays usable)."""
        self.topology.close()

    async def __aenter__(self) -> "Locker":
        return self

    async def __aexit__(self, *a: Any) -> None:
        self.close()

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
        """As :meth:`dlock.Locker.lock`, for ``async with`` and
        ``await lock.acquire()``."""
        spec = _spec(resource, ttl, shared, limit, owner)
        check_token(token)
        s = self.settings
        kw: Dict[str, Any] = {}
        if retry_for is not None:
            kw["retry_for"] = seconds(retry_for)
        if min_replicas is not None:
            kw["min_replicas"] = _replicas(min_replicas, replicas_timeout)
        elif replicas_timeout is not None and s.min_replicas is not None:
            kw["min_replicas"] = (s.min_replicas[0], seconds(replicas_timeout))
        if wait is not None:
            to_ms(wait, "wait")
        return Lock(self, spec, wait, blocking, watchdog, on_lost, token, s.copy(**kw) if kw else s, on_retry, raise_on_lost)

    def write_lock(self, resource: Key, **kw: Any) -> "Lock":
        return self.lock(resource, **kw)

    def read_lock(self, resource: Key, **kw: Any) -> "Lock":
        return self.lock(resource, shared=True, **kw)

    def semaphore(self, resource: Key, limit: int, **kw: Any) -> "Lock":
        return self.lock(resource, limit=limit, **kw)

    def reentrant_lock(self, resource: Key, owner: Optional[Key] = None, **kw: Any) -> "Lock":
        """Reentrant holds; the owner defaults to the acquiring task
        (:func:`task_owner`)."""
        return self.lock(resource, owner=PER_THREAD if owner is None else owner, **kw)

    def multi_lock(self, resources: Iterable[Key], **kw: Any) -> "Lock":
        res = list(resources)
        return self.lock(res if len(res) > 1 else (res[0] if res else ""), **kw)  # type: ignore[arg-type]

    def election(
        self, name: Key, *, id: Optional[str] = None, ttl: Duration = 15.0, retry_for: Optional[Duration] = None
    ) -> "Election":
        """The leader election held on ``name`` (see :class:`dlock.asyncio.Election`)."""
        return Election(self, name, id=id, ttl=ttl, retry_for=retry_for)

    async def extend_token(self, resource: Key, token: str, ttl: Duration) -> bool:
        if not isinstance(token, str) or not token:
            raise InvalidRequest("token must not be empty")
        check_token(token)
        spec = _spec(resource, ttl, False, None, None)
        r = await _Backend(self.topology, spec, token, self.settings).extend(spec.ttl_ms)
        if r.kind == EXTENDED:
            return True
        if r.kind == LOST:
            return False
        assert r.error is not None
        raise r.error

    async def release_token(self, resource: Key, token: str) -> bool:
        if not isinstance(token, str) or not token:
            raise InvalidRequest("token must not be empty")
        check_token(token)
        spec = _spec(resource, 1.0, False, None, None)
        return await _Backend(self.topology, spec, token, self.settings).release(now())

    async def info(self, resource: Key) -> Optional[Dict[str, Any]]:
        spec = _spec(resource, 1.0, False, None, None)

        async def op(conn: Conn, asking: bool) -> Any:
            r = (await _pipeline(conn, commands(asking, ("DLOCK.INFO", resource), None)))[-1]
            if isinstance(r, Exception):
                raise r
            return r

        try:
            v = await self.topology.run(spec.route_key(), self.settings.io_timeout, 0.0, op)
        except Failure as f:
            raise f.into_error() from None
        return decode_info(v)

    async def check(self, resource: Key, fence: int) -> bool:
        """As :meth:`dlock.Locker.check`: ``DLOCK.CHECK``."""
        from . import _guard

        return await _guard.acheck_fence(self.topology, self.settings, resource, fence)

    def session(self, ttl: Duration = 30.0, *, bind: bool = False, lock_delay: Optional[Duration] = None) -> "Session":
        """As :meth:`dlock.Locker.session`: a session whose keeper is a task
        of the loop it is opened on."""
        from ._asession import Session

        return Session(self, ttl, bind, lock_delay)


class Lock:
    """One lock request for asyncio: ``async with lock as lease:`` (raises
    :class:`~dlock.NotAcquired` when not granted) or ``await
    lock.acquire()`` (the Lease, or None)."""

    def __init__(
        self,
        locker: Locker,
        spec: Spec,
        wait: Optional[Duration],
        blocking: bool,
        watchdog: Optional[bool],
        on_lost: Optional[OnLost],
        token: Optional[str],
        settings: Settings,
        on_retry: Optional[OnRetry],
        raise_on_lost: bool,
    ) -> None:
        self.locker = locker
        self.spec = spec
        self.wait = wait
        self.blocking = blocking
        self.watchdog = watchdog
        self.on_lost = on_lost
        self.token = token
        self.settings = settings
        self.on_retry = on_retry
        self.raise_on_lost = raise_on_lost
        self._stacks: "weakref.WeakKeyDictionary[Any, List[Lease]]" = weakref.WeakKeyDictionary()

    @property
    def resource(self) -> Key:
        return self.spec.resources[0]

    async def acquire(
        self,
        blocking: Optional[bool] = None,
        wait: Any = _UNSET,
        *,
        token: Optional[str] = None,
        watchdog: Optional[bool] = None,
    ) -> Optional[Lease]:
        """Acquires: the Lease, or None when busy (or the wait ran out).
        Cancelling it leaves no hold and no waiter behind."""
        check_token(token)
        spec = self.spec
        if spec.owner is PER_THREAD:
            spec = Spec(spec.resources, spec.ttl_ms / 1000, spec.shared, spec.limit, task_owner())
        b = self.blocking if blocking is None else blocking
        w = self.wait if wait is _UNSET else wait
        wait_ms = None if not b else (MAX_MS if w is None else to_ms(w, "wait"))
        backend = _Backend(self.locker.topology, spec, token or self.token or new_token(), self.settings)
        got = await backend.acquire(wait_ms, self.on_retry)
        if got is None:
            return None
        wd = watchdog if watchdog is not None else self.watchdog
        if wd is None:
            wd = bool(self.locker.watchdog)
        return Lease(backend, got[0], got[1], wd, self.on_lost)

    def _stack(self) -> List[Lease]:
        key = asyncio.current_task()
        st = self._stacks.get(key)
        if st is None:
            st = self._stacks[key] = []
        return st

    async def __aenter__(self) -> Lease:
        wd = self.watchdog
        if wd is None:
            wd = self.locker.watchdog if self.locker.watchdog is not None else True
        lease = await self.acquire(watchdog=wd)
        if lease is None:
            raise NotAcquired(f"{self.resource!r} is busy")
        self._stack().append(lease)
        return lease

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._stack().pop()
        await lease._leave(et, ev, self.raise_on_lost)

    def __repr__(self) -> str:
        return f"<async Lock {self.spec.resources!r}>"


# Last, so that the election module may import this one (it names the Locker in its types).
from ._aelection import Election  # noqa: E402
