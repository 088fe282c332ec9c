"""Redis Cluster: every command (sets too) and its WAIT n go to the master
of the resource's slot; MOVED and ASK are followed during resharding.
One 3-master cluster (a replica each) serves the whole module."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

import dlock
import dlock.asyncio as dla
from harness import holder, wait_until, waiters


def other_master(cluster, m):
    return next(x for x in cluster.masters() if x != m)


def test_commands_go_to_the_master_of_the_slot(cluster3):
    c = cluster3
    seed = c.node(c.masters()[0])
    locker = dlock.Locker(redis.cluster.RedisCluster(host="127.0.0.1", port=seed.port))
    seen = set()
    for i in range(30):
        res = f"res:{i}"
        with locker.lock(res, ttl=30, watchdog=False) as lease:
            owner = c.node_for_slot(c.key_slot(res))
            seen.add(owner)
            assert holder(c.node(owner).conn(), res) == (lease.token, lease.fence)
            assert lease.extend(30)
        assert holder(c.node(owner).conn(), res) is None
        assert locker.info(res) is None
    assert len(seen) == 3, "resources spread over every master"
    # A set sharing a hash tag goes to its slot's master; one across slots
    # is refused by the server.
    with locker.multi_lock(["{order:1}:rows", "{order:1}:stock"]) as s:
        owner = c.node_for_slot(c.key_slot("{order:1}"))
        assert holder(c.node(owner).conn(), "{order:1}:stock") == (s.token, s.fence)
    with pytest.raises(dlock.ServerError, match="^CROSSSLOT"):
        locker.multi_lock(["a", "b"]).acquire(blocking=False)


def test_moved_and_ask_during_resharding(cluster3):
    c = cluster3
    locker = dlock.Locker.cluster([c.node(c.masters()[0]).url])
    # A lock held while its slot moves: the owner extends and releases it
    # on the new master (MOVED).
    res = "moving"
    slot = c.key_slot(res)
    src = c.node_for_slot(slot)
    dst = other_master(c, src)
    lease = locker.lock(res, ttl=30).acquire(blocking=False)
    c.migrate_slot(slot, src, dst)
    assert holder(c.node(dst).conn(), res) == (lease.token, lease.fence)
    assert lease.extend(30)
    assert lease.release()
    # A new lock after the move (the locker's map is stale: MOVED).
    g = locker.lock(res, ttl=30).acquire(blocking=False)
    assert holder(c.node(dst).conn(), res) == (g.token, g.fence)
    assert g.release()

    # ASK: the slot is migrating and the key is not on the source.
    res = "asked"
    slot = c.key_slot(res)
    src = c.node_for_slot(slot)
    dst = other_master(c, src)
    c.setslot(dst, slot, "IMPORTING", c.ids[src])
    c.setslot(src, slot, "MIGRATING", c.ids[dst])
    try:
        g = locker.lock(res, ttl=30).acquire(blocking=False)
        assert g is not None, "granted by the importing node"
        t = c.node(dst).conn()
        pipe = t.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.execute_command("DLOCK.INFO", res)
        info = pipe.execute()[1]
        assert g.fence in (info.values() if isinstance(info, dict) else info)
        assert g.release()
    finally:
        # Finish the move, so that the cluster is stable for the next test.
        c.migrate_slot(slot, src, dst)


def test_min_replicas_and_waiting_on_the_slots_master(cluster3):
    c = cluster3
    locker = dlock.Locker.cluster([c.node(c.masters()[0]).url], min_replicas=1, replicas_timeout=5)
    lease = locker.lock("wres", ttl=30).acquire(blocking=False)
    owner = c.node_for_slot(c.key_slot("wres"))
    replica = c.replicas_of(owner)[0]
    r = c.node(replica).conn()
    r.execute_command("READONLY")
    assert holder(r, "wres") == (lease.token, lease.fence), "the replica has it"
    assert lease.extend(30)
    out = []
    t = threading.Thread(target=lambda: out.append(locker.lock("wres", ttl=30, wait=20).acquire()))
    t.start()
    m = c.node(owner).conn()
    wait_until(10, "the waiter queued", lambda: waiters(m, "wres") == 1)
    assert lease.release()
    t.join(20)
    assert out[0] is not None and out[0].fence > lease.fence
    assert out[0].release()


def test_the_asyncio_api_on_a_cluster(cluster3):
    c = cluster3

    async def main():
        rc = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=c.node(c.masters()[1]).port)
        assert await dla.Locker(rc).lock("via-client", ttl=5).acquire(blocking=False) is not None
        lk = dla.Locker.cluster([n.url for n in c.nodes[:2]])
        for i in range(10):
            res = f"ares:{i}"
            async with lk.lock(res, ttl=30, watchdog=False) as lease:
                owner = c.node_for_slot(c.key_slot(res))
                assert holder(c.node(owner).conn(), res) == (lease.token, lease.fence)
        async with lk.multi_lock(["{t}:1", "{t}:2"]) as s:
            assert s.fence > 0
        with pytest.raises(dlock.ServerError, match="^CROSSSLOT"):
            await lk.multi_lock(["a", "b"]).acquire(blocking=False)
        # MOVED after a resharding.
        res = "amoving"
        slot = c.key_slot(res)
        src = c.node_for_slot(slot)
        held = await lk.lock(res, ttl=30).acquire(blocking=False)
        await asyncio.get_running_loop().run_in_executor(None, c.migrate_slot, slot, src, other_master(c, src))
        assert await held.extend(30)
        assert await held.release()
        lk.close()

    asyncio.run(asyncio.wait_for(main(), 60))
