"""What dlock's own connections are made from: the address, login and TLS
settings (and the connection cap) of the redis-py client, pool or URL a
locker was given, for the blocking and the asyncio API; and the parsing of
a cluster's slot map."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ._pool import cap_of
from .errors import InvalidRequest

#: Where :func:`settings_of` passes the user's ``max_connections`` to a
#: :class:`Node` (taken out before connections are made).
CAP_KEY = "_dlock_max_connections"


def _conn_settings(
    cls: type, kwargs: Dict[str, Any], max_connections: Optional[int] = None
) -> Tuple[type, Dict[str, Any]]:
    """The arguments dlock's own connections are made with: the user's
    address, login and TLS; redis-py's retries off (every retry is dlock's,
    with the same token); and the user's connection cap (see
    :func:`dlock._pool.cap_of`)."""
    kw = dict(kwargs)
    for k in ("connection_pool", "connection_class", "max_connections", "single_connection_client"):
        kw.pop(k, None)
    kw.update(
        retry=None,
        retry_on_timeout=False,
        retry_on_error=[],
        health_check_interval=0,
        decode_responses=False,
    )
    if "maint_notifications_config" in kw:
        # redis-py 8 asks each new RESP3 connection for maintenance
        # notifications: a round trip per connect, an error counted by every
        # server without them (errorstat_ERR), and on that error a logging
        # call that takes the logging module's lock on the caller's thread,
        # which an exception from a signal handler can leave held. dlock's
        # connections live for a command or a wait and ride a server's move
        # on their own retries.
        kw["maint_notifications_config"] = None
        kw.pop("maint_notifications_pool_handler", None)
    kw[CAP_KEY] = max_connections
    return cls, kw


def sentinel_of(kwargs: Dict[str, Any]) -> Any:
    """The Sentinel side of a ``redis.sentinel`` master pool's connection
    arguments (what its connections ask for the master's address), or
    None."""
    proxy = kwargs.get("connection_pool")
    return proxy if hasattr(proxy, "get_master_address") else None


def _is_asyncio(obj: Any) -> bool:
    return type(obj).__module__.startswith("redis.asyncio")


def refuse_asyncio_client(client: Any) -> None:
    """Refuses a ``redis.asyncio`` client (a ``Redis``, a ``RedisCluster``,
    a Sentinel ``master_for`` client) or pool given to the blocking API: its
    connections cannot be used without an event loop, and would fail only
    at the first command."""
    pool = getattr(client, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    if _is_asyncio(client) or _is_asyncio(pool) or (cls is not None and cls.__module__.startswith("redis.asyncio")):
        raise InvalidRequest(
            f"{type(client).__module__}.{type(client).__name__} is a redis.asyncio client: "
            "use it with dlock.asyncio.Locker; the blocking API (dlock.Locker, dlock.Redlock) "
            "takes a blocking redis.Redis"
        )


def settings_of(client: Any) -> Tuple[type, Dict[str, Any]]:
    """The connection class and arguments (address, login, TLS) of a
    blocking redis-py client or connection pool. A ``Sentinel.master_for``
    client's connections keep their link to the sentinels: each new one asks
    them where the master is now."""
    refuse_asyncio_client(client)
    pool = getattr(client, "connection_pool", client)
    cls, kw = _conn_settings(pool.connection_class, pool.connection_kwargs, cap_of(pool))
    sentinel = sentinel_of(pool.connection_kwargs)
    if sentinel is not None:
        if not getattr(sentinel, "is_master", True):
            raise InvalidRequest(
                "a Sentinel client for replicas (slave_for): locks are taken on the master, use master_for"
            )
        # The pool itself (what its connections ask for the master), not the
        # weak proxy they get: the locker's connections outlive the client
        # it was given.
        kw["connection_pool"] = pool
    return cls, kw


def _async_class(cls: type) -> type:
    """The redis.asyncio connection class of a (sync or async) one."""
    import redis.asyncio.connection as ac

    if cls.__module__.startswith("redis.asyncio"):
        return cls
    name = cls.__name__
    return getattr(ac, name, ac.Connection)


def _settings_of(client: Any) -> Tuple[type, Dict[str, Any]]:
    pool = getattr(client, "connection_pool", client)
    cls, kw = _conn_settings(_async_class(pool.connection_class), pool.connection_kwargs, cap_of(pool))
    sentinel = sentinel_of(pool.connection_kwargs)
    if sentinel is not None:
        if not pool.connection_class.__module__.startswith("redis.asyncio"):
            raise InvalidRequest(
                "a blocking Sentinel client: give the asyncio Locker a "
                "redis.asyncio.sentinel.Sentinel(...).master_for(name)"
            )
        if not getattr(sentinel, "is_master", True):
            raise InvalidRequest(
                "a Sentinel client for replicas (slave_for): locks are taken on the master, use master_for"
            )
        # The pool itself, not the weak proxy its connections get: the
        # locker's connections outlive the client it was given.
        kw["connection_pool"] = pool
    return cls, kw


def split_addr(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep:
        return addr, 6379
    try:
        return host, int(port)
    except ValueError:
        return host, 6379


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def parse_slots(reply: Any, asked: str) -> Optional[List[Tuple[int, int, str]]]:
    """``CLUSTER SLOTS``: ``[[start, end, [ip, port, id, ...], replicas...], ...]``.
    An empty ip means "the address you reached me on"."""
    if not isinstance(reply, list):
        return None
    out = []
    for r in reply:
        if not isinstance(r, list) or len(r) < 3 or not isinstance(r[2], list):
            return None
        lo, hi, master = r[0], r[1], r[2]
        host = _text(master[0])
        port = int(master[1])
        if host in ("", "?"):
            host = split_addr(asked)[0]
        out.append((int(lo), int(hi), f"{host}:{port}"))
    return out


def check_settings(cls: type, kwargs: Dict[str, Any]) -> None:
    """Makes (without connecting) a connection with these settings, so that
    a client redis-py itself cannot connect with (``port="abc"``) is refused
    when the locker is made, not at its first command."""
    make_connection(cls, kwargs, probe=True)


def make_connection(cls: type, kwargs: Dict[str, Any], probe: bool = False) -> Any:
    """A new (not yet connected) connection; settings it refuses are an
    :class:`InvalidRequest`."""
    try:
        return cls(**kwargs)
    except RuntimeError:
        # redis-py's asyncio connections ask for the current event loop
        # when made on Python < 3.10: outside of one, the settings are
        # checked when the first connection is made, in a loop.
        if probe:
            return None
        raise
    except Exception as e:
        raise InvalidRequest(f"the client's connection settings: {type(e).__name__}: {e}") from None
