"""Redis Sentinel: a ``Sentinel(...).master_for(name)`` client finds the
master through real sentinels on every new connection (a dead sentinel
skipped, a stale one's answer checked with ``ROLE``, a wrong name
explained), and a forced failover is followed by the watchdog's renewals,
an extend and a new acquire."""

from __future__ import annotations

import asyncio
import gc

import pytest
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

import dlock
from harness import FAILOVER_DEADLINE, SENTINEL_NAME, Sentinel, SentinelGroup, dead_url, holder, wait_until


@pytest.fixture
def group():
    g = SentinelGroup(replicas=1)
    yield g
    g.kill()


#: The sentinels' own connections bounded and not retried (redis-py's
#: default backs off for seconds), so a dead or paused one delays little.
SENTINEL_KWARGS = {"socket_timeout": 1, "socket_connect_timeout": 1, "retry": Retry(NoBackoff(), 0)}


def sentinel(addrs) -> redis.sentinel.Sentinel:
    return redis.sentinel.Sentinel(addrs, sentinel_kwargs=SENTINEL_KWARGS)


def dead_addr():
    port = int(dead_url().rsplit(":", 1)[1].split("/")[0])
    return ("127.0.0.1", port)


def test_the_master_is_found_through_the_sentinels(group):
    # The client given is not kept: the locker's connections outlive it.
    with dlock.Locker(sentinel([dead_addr()] + group.addrs()).master_for(SENTINEL_NAME)) as locker:
        gc.collect()
        lease = locker.lock("res", ttl=30).acquire(blocking=False)
        assert holder(group.servers[0].conn(), "res") == (lease.token, lease.fence)
        assert lease.release()

    # A name no sentinel knows.
    with dlock.Locker(sentinel(group.addrs()).master_for("nosuch"), retry_for=0.3) as locker:
        with pytest.raises(dlock.Unavailable, match="nosuch"):
            locker.lock("res", ttl=1).acquire(blocking=False)

    # Replicas take no locks.
    with pytest.raises(dlock.InvalidRequest, match="master_for"):
        dlock.Locker(sentinel(group.addrs()).slave_for(SENTINEL_NAME))

    # A sentinel that names a replica as the master (it has not seen a
    # failover): the server is asked `ROLE`, and not used.
    stale = Sentinel(group.servers[1].port)
    try:
        client = sentinel([stale.addr]).master_for(SENTINEL_NAME)
        with dlock.Locker(client, retry_for=0.3) as locker:
            with pytest.raises(dlock.Unavailable, match="is not a master"):
                locker.lock("res", ttl=1).acquire(blocking=False)
        assert holder(group.servers[0].conn(), "res") is None
    finally:
        stale.kill()


def test_a_forced_failover_is_followed_by_renewals_and_new_acquires(group):
    """Sentinel demotes the old master seconds after the promotion: until
    then, with ``min-replicas-to-write 1``, it refuses writes
    (``NOREPLICAS``) on the connections still pooled to it, and the client
    finds the new master."""
    client = sentinel(group.addrs()).master_for(SENTINEL_NAME)
    with dlock.Locker(client, min_replicas=1, replicas_timeout=5) as locker, dlock.Locker(client) as plain:
        lease = locker.lock("held", ttl=15, watchdog=True).acquire(blocking=False)
        assert plain.lock("warm", ttl=1).acquire(blocking=False).release()  # a pooled connection
        group.servers[0].conn().config_set("min-replicas-to-write", 1)
        group.sentinels[0].conn().execute_command("SENTINEL", "FAILOVER", SENTINEL_NAME)
        new = group.wait_new_master(0)
        c = group.servers[new].conn()
        window = plain.lock("window", ttl=15).acquire(blocking=False)
        assert holder(c, "window") == (window.token, window.fence)
        assert holder(c, "held") == (lease.token, lease.fence)
        # The watchdog's next renewal lands on the new master.
        before = c.pttl("held")
        wait_until(FAILOVER_DEADLINE, "a renewal on the new master", lambda: c.pttl("held") > before)
        # min_replicas: once the old master replicates the new one.
        wait_until(
            FAILOVER_DEADLINE,
            "the old master to replicate",
            lambda: "online" in str(c.info("replication").get("slave0", "")),
        )
        assert lease.extend(15)
        assert not lease.lost
        other = locker.lock("other", ttl=15).acquire(blocking=False)
        assert holder(c, "other") == (other.token, other.fence)
        assert other.release() and lease.release() and window.release()
        assert holder(c, "held") is None


def test_the_asyncio_locker_finds_the_master_through_the_sentinels(group):
    import redis.asyncio.retry
    import redis.asyncio.sentinel

    import dlock.asyncio as dla

    ASYNC_SENTINEL_KWARGS = dict(SENTINEL_KWARGS, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))

    c = group.servers[0].conn()

    async def main():
        s = redis.asyncio.sentinel.Sentinel([dead_addr()] + group.addrs(), sentinel_kwargs=ASYNC_SENTINEL_KWARGS)
        lk = dla.Locker(s.master_for(SENTINEL_NAME))
        gc.collect()
        lease = await lk.lock("res", ttl=30).acquire(blocking=False)
        assert holder(c, "res") == (lease.token, lease.fence)
        assert await lease.release()
        stale = Sentinel(group.servers[1].port)
        try:
            s = redis.asyncio.sentinel.Sentinel([stale.addr], sentinel_kwargs=ASYNC_SENTINEL_KWARGS)
            lk = dla.Locker(s.master_for(SENTINEL_NAME), retry_for=0.3)
            with pytest.raises(dlock.Unavailable, match="is not a master"):
                await lk.lock("res", ttl=1).acquire(blocking=False)
        finally:
            stale.kill()

    asyncio.run(asyncio.wait_for(main(), 60))
    with pytest.raises(dlock.InvalidRequest, match="redis.asyncio.sentinel"):
        dla.Locker(sentinel(group.addrs()).master_for(SENTINEL_NAME))
