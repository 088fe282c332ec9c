"""Leader election on a Redis Cluster, blocking and asyncio: an election's
lock and its observers go to the master of its resource's slot, and an
observer waiting while the slot moves follows it (``TRYAGAIN``, then
``MOVED``) without telling the same leader twice. One 3-master cluster
serves the module."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import dlock
import dlock.asyncio as dla
from harness import Cluster, holder, wait_until

STEP = 10.0


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(3, 0)
    yield c
    c.kill()


def other_master(cluster, m):
    return next(x for x in cluster.masters() if x != m)


def observers(cluster, i) -> int:
    return int(cluster.node(i).conn().info("dlock").get("dlock_observers", 0))


def test_an_election_follows_its_slot(cluster):
    c = cluster
    locker = dlock.Locker.cluster([c.node(c.masters()[0]).url])
    seen = set()
    for i in range(12):
        name = f"leader:{i}"
        election = locker.election(name, id=f"w{i}")
        with election.campaign(wait=0) as lead:
            owner = c.node_for_slot(c.key_slot(name))
            seen.add(owner)
            assert holder(c.node(owner).conn(), name) == (lead.token, lead.term)
            assert election.leader() == dlock.Leads(f"w{i}", lead.term, lead.token)
        assert election.leader() == dlock.Nobody()
    assert len(seen) == 3, "elections spread over every master"

    # An observer waiting while the slot moves follows it: the same leader
    # is not told again, the next change is.
    name = "leader:moving"
    election = locker.election(name, id="w1", retry_for=STEP * 3)
    lead = election.campaign(wait=0)
    changes = election.observe()
    assert lead is not None and changes.next_leader(STEP) == dlock.Leads("w1", lead.term, lead.token)
    slot = c.key_slot(name)
    src = c.node_for_slot(slot)
    dst = other_master(c, src)
    later = []
    t = threading.Thread(target=lambda: later.append(changes.next_leader(STEP * 3)))
    t.start()
    wait_until(STEP, "the observer waiting on the slot's master", lambda: observers(c, src) == 1)
    c.migrate_slot(slot, src, dst)
    wait_until(STEP, "the observer waiting on the new master", lambda: observers(c, dst) == 1)
    assert later == [], f"told {later} though the leader did not change"
    assert lead.resign()
    t.join(STEP * 3)
    assert later == [dlock.Nobody()]


def test_async_an_election_follows_its_slot(cluster):
    c = cluster

    async def until(what, f):
        end = time.monotonic() + STEP
        while not f():
            assert time.monotonic() < end, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def main():
        locker = dla.Locker.cluster([c.node(c.masters()[1]).url])
        for i in range(6):
            name = f"aleader:{i}"
            election = locker.election(name, id=f"w{i}")
            async with election.campaign(wait=0) as lead:
                owner = c.node_for_slot(c.key_slot(name))
                assert holder(c.node(owner).conn(), name) == (lead.token, lead.term)
                assert await election.leader() == dla.Leads(f"w{i}", lead.term, lead.token)
            assert await election.leader() == dla.Nobody()
        name = "aleader:moving"
        election = locker.election(name, id="w1", retry_for=STEP * 3)
        lead = await election.campaign(wait=0)
        changes = election.observe()
        assert lead is not None and await changes.next_leader(STEP) == dla.Leads("w1", lead.term, lead.token)
        slot = c.key_slot(name)
        src = c.node_for_slot(slot)
        dst = other_master(c, src)
        waiting = asyncio.ensure_future(changes.next_leader(STEP * 3))
        await until("the observer waiting on the slot's master", lambda: observers(c, src) == 1)
        await asyncio.get_running_loop().run_in_executor(None, c.migrate_slot, slot, src, dst)
        await until("the observer waiting on the new master", lambda: observers(c, dst) == 1)
        assert not waiting.done(), "told of a change though the leader did not change"
        assert await lead.resign()
        assert await asyncio.wait_for(waiting, STEP * 3) == dla.Nobody()

    asyncio.run(asyncio.wait_for(main(), 90))
