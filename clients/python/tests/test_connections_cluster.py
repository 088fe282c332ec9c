"""``max_connections`` in Redis Cluster: the cap of the client's nodes
applies to dlock's connections to every master (the slot map's too)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio.cluster

import dlock
import dlock.asyncio as dla
from harness import Cluster, holder, waiters

DEADLINE = 60.0
CAP = 3
WAITERS = 6


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(3, 0)
    yield c
    c.kill()


def _wait_for_waiters(conn: redis.Redis, resource: str, n: int) -> None:
    end = time.monotonic() + DEADLINE
    while waiters(conn, resource) < n:
        assert time.monotonic() < end, "waiters never queued"
        time.sleep(0.02)


def test_blocking_cluster_max_connections(cluster):
    c = cluster
    seed = c.node(c.masters()[0])
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=seed.port, max_connections=CAP)
    lk = dlock.Locker(rc)
    res = "capped-in-cluster"
    owner = c.node(c.node_for_slot(c.key_slot(res))).conn()
    held = lk.lock(res, ttl=60).acquire()
    assert held is not None
    got: list = []

    def waiter() -> None:
        lease = lk.lock(res, ttl=60, wait=DEADLINE).acquire()
        got.append(lease.fence if lease is not None else None)
        if lease is not None:
            lease.release()

    threads = [threading.Thread(target=waiter) for _ in range(WAITERS)]
    for t in threads:
        t.start()
    _wait_for_waiters(owner, res, CAP - 1)
    assert waiters(owner, res) == CAP - 1
    for node in lk.topology.nodes():
        assert node.max_connections == CAP
    assert held.release()
    for t in threads:
        t.join(DEADLINE)
    assert len(got) == WAITERS and None not in got and got == sorted(got)
    assert holder(owner, res) is None
    rc.close()


def test_asyncio_cluster_max_connections(cluster):
    c = cluster
    seed = c.node(c.masters()[0])
    res = "capped-in-cluster-a"
    owner = c.node(c.node_for_slot(c.key_slot(res))).conn()

    async def main() -> None:
        rc = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=seed.port, max_connections=CAP)
        lk = dla.Locker(rc)
        held = await lk.lock(res, ttl=60).acquire()
        assert held is not None
        got: list = []

        async def waiter() -> None:
            lease = await lk.lock(res, ttl=60, wait=DEADLINE).acquire()
            assert lease is not None
            got.append(lease.fence)
            await lease.release()

        tasks = [asyncio.ensure_future(waiter()) for _ in range(WAITERS)]
        while waiters(owner, res) < CAP - 1:
            await asyncio.sleep(0.02)
        assert waiters(owner, res) == CAP - 1
        assert await held.release()
        await asyncio.gather(*tasks)
        assert got == sorted(got) and len(set(got)) == WAITERS
        lk.close()
        await rc.aclose() if hasattr(rc, "aclose") else await rc.close()

    asyncio.run(asyncio.wait_for(main(), DEADLINE))
    assert holder(owner, res) is None
