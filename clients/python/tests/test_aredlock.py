"""The asyncio Redlock (``dlock.asyncio.Redlock``) over 3 and 5 independent
servers, mirroring test_redlock.py: quorum, servers killed and paused, the
undo of grants that do not count, waiting, renewal and loss, and
cancellation leaving no hold and no waiter on any server."""

from __future__ import annotations

import asyncio
import time

import pytest

import dlock
import dlock.asyncio as dla
from dlock._spec import Spec
from harness import holder, holds, waiters


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


async def _until(deadline: float, what: str, f) -> None:
    end = time.monotonic() + deadline
    while not f():
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline} s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def five(make_server):
    return [make_server() for _ in range(5)]


def redlock(servers, **kw):
    kw.setdefault("node_timeout", 0.2)  # a loaded 2-core CI: honest margins
    return dla.Redlock([s.url for s in servers], **kw)


def held_on(servers, res):
    return [holder(s.conn(), res) for s in servers]


def waiting_on(servers, res):
    return [waiters(s.conn(), res) for s in servers]


def test_granted_by_all_and_released_everywhere(five):
    async def main():
        rl = redlock(five)
        assert rl.quorum == 3
        async with rl.lock("res", ttl=10) as lease:
            assert isinstance(lease, dla.Lease)
            assert all(f is not None for f in lease.fences) and len(lease.fences) == 5
            assert lease.fence == max(lease.fences)
            assert held_on(five, "res") == [(lease.token, f) for f in lease.fences]
            # Valid from before the first send, less the drift (1% + 2 ms).
            assert lease.remaining() <= 10 - 0.102
            assert await rl.lock("res", blocking=False).acquire() is None
            with pytest.raises(dlock.NotAcquired):
                async with rl.lock("res", blocking=False):
                    pass
            assert await lease.extend(10)
            info = await rl.info("res")
            assert len(info) == 5 and [i["token"] for i in info] == [lease.token] * 5
            assert await rl.extend_token("res", lease.token, 10) is True
        assert held_on(five, "res") == [None] * 5
        assert await rl.info("res") == [None] * 5
        r = await rl.read_lock("doc").acquire(blocking=False)
        r2 = await rl.read_lock("doc").acquire(blocking=False)
        assert r and r2 and [holds(s.conn(), "doc") for s in five] == [2] * 5
        assert await rl.write_lock("doc").acquire(blocking=False) is None
        assert await r.release() and await r2.release()
        async with rl.multi_lock(["{s}:a", "{s}:b"]) as s:
            assert all(f is not None for f in s.fences)
        re = rl.reentrant_lock("job")
        async with re as outer:
            async with re as inner:
                assert inner.fences == outer.fences and [holds(s.conn(), "job") for s in five] == [2] * 5
        assert held_on(five, "job") == [None] * 5
        with pytest.raises(dlock.InvalidRequest):
            rl.semaphore("sem", 2)
        with pytest.raises(dlock.InvalidRequest):
            await rl.release_token("res", "")
        assert await rl.release_token("res", "nobody") is False
        rl.close()
        one = redlock(five[:1])
        sem = one.semaphore("sem", 2)
        p = [await sem.acquire(blocking=False) for _ in range(3)]
        assert p[0] and p[1] and p[2] is None
        for q in p[:2]:
            assert await q.release()

    run(main())
    with pytest.raises(dlock.InvalidRequest, match="same server"):
        dla.Redlock([five[0].url, f"redis://localhost:{five[0].port}/0"])
    with pytest.raises(dlock.InvalidRequest):
        dla.Redlock([])


def test_a_minoritys_grants_are_released(five):
    three = five[:3]
    other = Spec(["res"], ttl=30).acquire_cmd("other", None)
    fences = [s.conn().execute_command(*other) for s in three[1:]]
    assert None not in fences

    async def main():
        rl = redlock(three)
        assert await rl.lock("res", ttl=10).acquire(blocking=False) is None
        # The one grant was undone on the connection that made it.
        assert held_on(three, "res") == [None] + [("other", f) for f in fences]

    run(main())


def test_two_killed_still_grant_three_killed_is_no_quorum_in_time(five):
    async def main():
        rl = redlock(five)
        five[0].kill9()
        five[1].kill9()
        lease = await rl.lock("res", ttl=10).acquire(blocking=False)
        assert lease is not None
        assert lease.fences[0] is None and lease.fences[1] is None
        assert all(f is not None for f in lease.fences[2:])
        assert await lease.release()
        five[2].kill9()
        t0 = time.monotonic()
        with pytest.raises(dlock.NoQuorum) as e:
            await rl.lock("res", ttl=10).acquire(blocking=False)
        assert time.monotonic() - t0 < 0.2 + 1.0, "about the node timeout"
        assert e.value.nodes == 5 and e.value.granted <= 2
        assert held_on(five[3:], "res") == [None, None], "the grants that did not count were undone"

    run(main())


def test_three_paused_is_refused_and_nothing_is_held_once_they_run(five):
    async def main():
        rl = redlock(five)
        for s in five[:3]:
            s.stop()
        try:
            t0 = time.monotonic()
            with pytest.raises(dlock.NoQuorum):
                await rl.lock("res", ttl=10).acquire(blocking=False)
            assert time.monotonic() - t0 < 0.2 + 1.0
        finally:
            for s in five[:3]:
                s.cont()
        # The paused servers run the ACQUIRE late, then the RELEASE written
        # behind it.
        await _until(5, "nothing held", lambda: held_on(five, "res") == [None] * 5)

    run(main())


def test_waiting_tasks_each_get_the_lock(five):
    servers = five[:3]
    got = []

    async def worker(rl, i):
        for _ in range(3):
            lease = await rl.lock("res", ttl=2, wait=20).acquire()
            assert lease is not None
            got.append(i)
            await asyncio.sleep(0.02)
            assert await lease.release()

    async def main():
        rl = redlock(servers)
        await asyncio.gather(*(worker(rl, i) for i in range(3)))

    run(main())
    assert sorted(got) == [0, 0, 0, 1, 1, 1, 2, 2, 2], "no livelock"


def test_the_watchdog_renews_and_loss_needs_a_majority_of_zeros(five):
    async def main():
        rl = redlock(five)
        lost = []
        lease = await rl.lock("res", ttl=0.9, watchdog=True, on_lost=lost.append).acquire(blocking=False)
        await asyncio.sleep(2.0)
        assert not lease.lost and all(h is not None for h in held_on(five, "res"))
        five[0].conn().delete("res")
        five[1].conn().delete("res")
        await asyncio.sleep(0.8)
        assert not lease.lost, "3 of 5 still hold it: renewed"
        five[2].conn().delete("res")
        await asyncio.wait_for(lease.lost_event.wait(), 0.9 / 3 + 0.7)
        assert lost == [lease]
        assert await lease.release() is False

    run(main())


def test_leaving_a_block_whose_redlock_lease_was_lost_raises(five):
    async def main():
        rl = redlock(five[:3])
        with pytest.raises(dlock.LockLost):
            async with rl.lock("res", ttl=1.0) as lease:
                for s in five[:2]:
                    s.conn().delete("res")
                assert await lease.wait_lost(2.0)

    run(main())


def test_extend_with_three_paused_keeps_the_budget_and_succeeds_after(five):
    async def main():
        rl = redlock(five)
        lease = await rl.lock("res", ttl=30).acquire(blocking=False)
        before = lease.deadline
        for s in five[:3]:
            s.stop()
        try:
            with pytest.raises(dlock.NoQuorum):
                await lease.extend(30)
            assert lease.deadline == before and not lease.lost
        finally:
            for s in five[:3]:
                s.cont()
        assert await lease.extend(30)
        assert lease.deadline > before
        assert await lease.release()
        assert await rl.release_token("res", lease.token) is False

    run(main())


def test_a_cancelled_acquire_leaves_no_hold_and_no_waiter_on_any_server(five):
    three = five[:3]

    def clear(res):
        return held_on(three, res) == [None] * 3 and waiting_on(three, res) == [0] * 3

    async def main():
        rl = redlock(three)
        held = await rl.lock("res", ttl=30).acquire(blocking=False)
        # Cancelled while queued on every server (an attempt waits a tenth
        # of the ttl: 3 s).
        task = asyncio.create_task(rl.lock("res", ttl=30, wait=20).acquire())
        await _until(10, "the waiter queued", lambda: waiting_on(three, "res") == [1] * 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(5, "the waiter left", lambda: waiting_on(three, "res") == [0] * 3)
        assert held_on(three, "res") == [(held.token, f) for f in held.fences]
        # Cancelled around the handoff, many times: never a hold left.
        for i in range(12):
            task = asyncio.create_task(rl.lock("res", ttl=30, wait=20).acquire())
            await _until(10, "the waiter queued", lambda: waiting_on(three, "res") == [1] * 3)
            await held.release()
            await asyncio.sleep(0.001 * (i % 6))
            task.cancel()
            try:
                got = await task
            except asyncio.CancelledError:
                got = None
            if got is not None:
                await got.release()  # the handoff won the race: a normal lease
            await _until(5, "nothing held", lambda: clear("res"))
            held = await rl.lock("res", ttl=30).acquire(blocking=False)
            assert held is not None, f"round {i}: free again"
        await held.release()
        # An async with block cancelled while waiting.
        blocker = await rl.lock("blk", ttl=30).acquire(blocking=False)

        async def body():
            async with rl.lock("blk", wait=20):
                raise AssertionError("never entered")

        t = asyncio.create_task(body())
        await _until(10, "queued", lambda: waiting_on(three, "blk") == [1] * 3)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await _until(5, "the waiter left", lambda: waiting_on(three, "blk") == [0] * 3)
        await blocker.release()
        await _until(5, "nothing held", lambda: clear("blk"))

    run(main())


def test_a_cancelled_acquire_undoes_a_grant_a_waiter_and_a_paused_servers_acquire(five):
    # Cancelled while server 0 (paused) has the ACQUIRE unread, server 1
    # granted it and server 2 queued it behind another holder.
    three = five[:3]
    other = Spec(["res"], ttl=30).acquire_cmd("other", None)
    fence = three[2].conn().execute_command(*other)

    async def main():
        rl = redlock(three)
        # Every server's pool gets a connection (a paused server accepts no
        # new one in time).
        async with rl.lock("warm", ttl=5):
            pass
        three[0].stop()
        try:
            task = asyncio.create_task(rl.lock("res", ttl=30, wait=20).acquire())
            await _until(
                10,
                "granted on 1, queued on 2",
                lambda: holder(three[1].conn(), "res") is not None and waiters(three[2].conn(), "res") == 1,
            )
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            three[0].cont()
        await _until(
            5,
            "nothing held or queued but the other holder",
            lambda: (
                held_on(three, "res") == [None, None, ("other", fence)]
                and waiting_on(three, "res") == [0, 0, 0]
            ),
        )
        await asyncio.sleep(0.3)
        assert held_on(three, "res") == [None, None, ("other", fence)]

    run(main())


def test_a_redlock_used_from_a_second_event_loop_orphans_nothing(five):
    three = five[:3]
    rl = redlock(three)

    async def take():
        lease = await rl.lock("res", ttl=30).acquire(blocking=False)
        assert lease is not None
        assert held_on(three, "res") == [(lease.token, f) for f in lease.fences]
        assert await lease.release()
        assert (await rl.info("res")) == [None] * 3

    run(take())
    # A second asyncio.run(): the first loop's idle connections are dead.
    run(take())
    assert held_on(three, "res") == [None] * 3
