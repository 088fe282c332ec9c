"""The asyncio API (``dlock.asyncio`` on ``redis.asyncio``): every kind,
waiting and handoff, the watchdog and loss, lost replies, and cancellation
leaving no hold and no waiter behind."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio

import dlock
import dlock.asyncio as dla
from harness import calls, holder, holds, waiters


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _until(deadline: float, what: str, f) -> None:
    end = time.monotonic() + deadline
    while not f():
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline} s waiting for {what}")
        await asyncio.sleep(0.02)


def test_every_kind(server):
    c = server.conn()

    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        async with lk.lock("plain", ttl=30) as lease:
            assert holder(c, "plain") == (lease.token, lease.fence)
            assert 29 < lease.remaining() <= 30 and not lease.lost
            assert await lk.lock("plain").acquire(blocking=False) is None
            with pytest.raises(dlock.NotAcquired):
                async with lk.lock("plain", blocking=False):
                    pass
        assert holder(c, "plain") is None
        r1 = await lk.read_lock("doc").acquire(blocking=False)
        r2 = await lk.read_lock("doc").acquire(blocking=False)
        assert r1 and r2 and holds(c, "doc") == 2
        assert await lk.write_lock("doc").acquire(blocking=False) is None
        assert await r1.release() and await r2.release()
        sem = lk.semaphore("sem", 2)
        p = [await sem.acquire(blocking=False) for _ in range(3)]
        assert p[0] and p[1] and p[2] is None
        assert (await lk.info("sem"))["kind"] == "semaphore"
        for q in p[:2]:
            assert await q.release()
        re = lk.reentrant_lock("job")
        async with re as outer:
            async with re as inner:
                assert inner.fence == outer.fence and holds(c, "job") == 2

                async def other_task():
                    return await re.acquire(blocking=False)

                assert await asyncio.create_task(other_task()) is None, "another task, another owner"
        assert holder(c, "job") is None
        async with lk.multi_lock(["{o}:a", "{o}:b"]) as s:
            assert holder(c, "{o}:a") == (s.token, s.fence) == holder(c, "{o}:b")
            assert await s.extend(10)
        assert holder(c, "{o}:b") is None
        t = await lk.lock("bytok").acquire(blocking=False)
        assert await lk.extend_token("bytok", t.token, 60)
        assert await lk.release_token("bytok", t.token)
        assert not await lk.release_token("bytok", t.token)
        lk.close()

    run(main())


def test_waiting_handoff_and_the_wait_budget(server):
    c = server.conn()

    async def main():
        lk = dla.Locker(f"redis://127.0.0.1:{server.port}/0")
        held = await lk.lock("res", ttl=30).acquire(blocking=False)
        acquires = calls(c, "dlock.acquire")
        waiting = asyncio.create_task(lk.lock("res", ttl=5, wait=10).acquire())
        await _until(10, "the waiter queued", lambda: waiters(c, "res") == 1)
        assert await held.release()
        lease = await waiting
        assert lease is not None and lease.fence > held.fence
        assert calls(c, "dlock.acquire") == acquires + 1, "no polling"
        pttl = c.pttl("res")  # before the clock, as in test_kinds: a slow reply cannot fail the bound
        assert lease.deadline <= time.monotonic() + pttl / 1000 + 0.001
        t0 = time.monotonic()
        assert await lk.lock("res", wait=0.4).acquire() is None
        assert 0.35 <= time.monotonic() - t0 < 1.5
        t0 = time.monotonic()
        assert await lk.lock("res", wait=0).acquire() is None, "WAIT 0 would wait forever"
        assert time.monotonic() - t0 < 1.0
        assert waiters(c, "res") == 0
        assert await lease.release()

    run(main())


def test_the_watchdog_renews_and_signals_loss_within_a_third_of_the_ttl(server):
    c = server.conn()

    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        async with lk.lock("res", ttl=0.6) as lease:
            await asyncio.sleep(2.4)
            assert holder(c, "res") == (lease.token, lease.fence) and not lease.lost
            assert calls(c, "dlock.extend") >= 3
        assert holder(c, "res") is None
        n = calls(c, "dlock.extend")
        await asyncio.sleep(0.5)
        assert calls(c, "dlock.extend") == n, "never a renewal after release"
        seen = []
        ttl = 3.0
        lease = await lk.lock("res", ttl=ttl, watchdog=True, on_lost=seen.append).acquire(blocking=False)
        c.delete("res")
        t0 = time.monotonic()
        await asyncio.wait_for(lease.lost_event.wait(), ttl / 3 + 0.7)
        assert time.monotonic() - t0 <= ttl / 3 + 0.7
        assert seen == [lease] and lease.lost
        assert await lease.release() is False
        # Without a watchdog the budget passing is a loss too.
        short = await lk.lock("res2", ttl=0.3, watchdog=False).acquire(blocking=False)
        assert await short.wait_lost(2.0)
        with pytest.raises(dlock.LockLost):
            async with lk.lock("res3", ttl=1.5) as l3:
                c.delete("res3")
                assert await l3.wait_lost(1.5)

    run(main())


def test_a_cancelled_acquire_leaves_no_hold_and_no_waiter(server):
    c = server.conn()

    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        held = await lk.lock("res", ttl=30).acquire(blocking=False)
        # Cancelled while queued.
        task = asyncio.create_task(lk.lock("res", ttl=30, wait=20).acquire())
        await _until(10, "the waiter queued", lambda: waiters(c, "res") == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(5, "the waiter left", lambda: waiters(c, "res") == 0)
        assert holder(c, "res") == (held.token, held.fence)
        # Cancelled in the very turn the lock is handed over, many times:
        # never a hold left behind.
        for i in range(20):
            task = asyncio.create_task(lk.lock("res", ttl=30, wait=20).acquire())
            await _until(10, "the waiter queued", lambda: waiters(c, "res") == 1)
            await held.release()
            await asyncio.sleep(0.0005 * (i % 5))
            task.cancel()
            try:
                got = await task
            except asyncio.CancelledError:
                got = None
            if got is not None:
                await got.release()  # the handoff won the race: a normal lease
            await _until(5, "nothing held", lambda: holder(c, "res") is None and waiters(c, "res") == 0)
            held = await lk.lock("res", ttl=30).acquire(blocking=False)
            assert held is not None, f"round {i}: free again"
        await held.release()
        # An async with block cancelled while waiting.
        blocker = await lk.lock("blk", ttl=30).acquire(blocking=False)

        async def body():
            async with lk.lock("blk", wait=20):
                raise AssertionError("never entered")

        t = asyncio.create_task(body())
        await _until(10, "queued", lambda: waiters(c, "blk") == 1)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await _until(5, "the waiter left", lambda: waiters(c, "blk") == 0)
        await blocker.release()
        await asyncio.sleep(0.2)
        assert holder(c, "blk") is None

    run(main())


def test_lost_replies_are_retried_with_the_same_token(server, make_proxy):
    from test_faults import dlock_writes

    proxy = make_proxy(server.port, 7, 300, dlock_writes)
    c = server.conn()

    async def main():
        lk = dla.Locker(proxy.url, retry_for=10)
        for i in range(40):
            lease = await lk.lock("res", ttl=30).acquire(blocking=False)
            assert lease is not None, f"cycle {i}"
            assert holder(c, "res") == (lease.token, lease.fence), f"cycle {i}"
            assert await lease.extend(30), f"cycle {i}"
            assert await lease.release(), f"cycle {i}"
            assert holder(c, "res") is None

    run(main())
    assert len(proxy.dropped_named("DLOCK.ACQUIRE")) >= 3


def test_a_paused_server_is_unavailable_in_bounded_time(server):
    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port), io_timeout=0.3, retry_for=0.3)
        await (await lk.lock("warm").acquire(blocking=False)).release()
        server.stop()
        try:
            t0 = time.monotonic()
            with pytest.raises(dlock.Unavailable):
                await lk.lock("res", ttl=10).acquire(blocking=False)
            assert time.monotonic() - t0 < 3.0
        finally:
            server.cont()

    run(main())


def test_a_server_without_the_module_is_named(make_server):
    plain = make_server(module=False)

    async def main():
        with pytest.raises(dlock.ModuleNotLoaded, match="loadmodule"):
            await dla.Locker(plain.url).lock("r").acquire(blocking=False)

    run(main())


def test_resize_grows_a_held_semaphore(server):
    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))

        async def take():
            return await lk.lock("pool", ttl=30, limit=2).acquire(blocking=False)

        a, b = await take(), await take()
        assert a is not None and b is not None
        assert await take() is None, "full"
        assert await lk.resize("pool", 3) == 2
        c = await take()
        assert c is not None, "3 of 3, under the old limit"
        assert await lk.resize("free", 3) is None
        for bad in (0, 1, 2**20 + 1, True, "3"):
            with pytest.raises(dlock.InvalidRequest):
                await lk.resize("pool", bad)
        assert await a.release() and await b.release() and await c.release()

    run(main())
