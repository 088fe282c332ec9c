"""The Lock used as redis-py's and ``threading``'s locks are, blocking and
asyncio alike (one body each, see api_flavors.py): ``acquire`` giving the
Lease or None, ``release``/``extend``/``owned`` acting on the calling
thread's (task's) leases, ``locked`` asking the server, ``threading``'s
waits (-1 is forever), the watchdog on ``acquire()`` as in ``with``, the
decorator and ``run``; and (asyncio) reentrancy through ``wait_for``."""

from __future__ import annotations

import asyncio

import pytest

import dlock
from api_flavors import FLAVORS, Flavor, run
from harness import holder, holds


@pytest.fixture(params=FLAVORS)
def f(request, server) -> Flavor:
    return Flavor(request.param, server.port)


def test_acquire_gives_the_lease_or_none_and_release_ends_it(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res", ttl=30)
        assert await f(lock.locked()) is False and not lock.owned()
        lease = await f(lock.acquire(blocking=False))
        assert lease and holder(c, "res") == (lease.token, lease.fence)
        assert await f(lock.locked()) and lock.owned()
        # Elsewhere (another thread or task): not owned there, locked for all,
        # busy for a single try; nothing of its own to release.
        assert await f.elsewhere(lock.owned) is False
        assert await f.elsewhere(lock.locked) is True
        assert await f.elsewhere(lambda: lock.acquire(blocking=False)) is None
        with pytest.raises(dlock.NotOwned):
            await f.elsewhere(lock.release)
        assert holder(c, "res") == (lease.token, lease.fence), "the failed calls changed nothing"
        assert await f(lock.release()) is True
        assert holder(c, "res") is None and lease.released
        assert not lock.owned() and await f(lock.locked()) is False
        # Nothing held: NotOwned, a RuntimeError as threading's release raises.
        with pytest.raises(dlock.NotOwned) as e:
            await f(lock.release())
        assert isinstance(e.value, RuntimeError) and isinstance(e.value, dlock.DlockError)
        with pytest.raises(dlock.NotOwned):
            await f(lock.extend(10))
        # A lease released by hand is no longer the Lock's to release.
        lease = await f(lock.acquire())
        assert await f(lease.release())
        with pytest.raises(dlock.NotOwned):
            await f(lock.release())
        f.close(lk)

    run(main())


def test_threading_style_positional_waits(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res", ttl=30)
        lease = await f(lock.acquire(True, 5))
        assert lease and holder(c, "res") == (lease.token, lease.fence)
        assert await f(lk.lock("res").acquire(False)) is None
        assert await f(lk.lock("res").acquire(True, 0)) is None, "a zero wait is a single try"
        assert await f(lk.lock("res").acquire(blocking_timeout=0)) is None
        # threading refuses acquire(False, 5); so does dlock (nothing is sent).
        for bad in (lambda: lock.acquire(False, 5), lambda: lock.acquire(blocking=False, blocking_timeout=1)):
            with pytest.raises(dlock.InvalidRequest):
                await f(bad())
        assert await f(lock.release())
        f.close(lk)

    run(main())


def test_wait_minus_one_waits_until_granted_and_other_negatives_are_refused(server, f):
    """Defect 8: ``wait=-1`` was a single try, while a negative ttl was refused."""
    c = server.conn()

    async def main():
        lk = f.locker()
        for forever in (
            lambda: lk.lock("res", wait=-1).acquire(),
            lambda: lk.lock("res", blocking_timeout=-1).acquire(),
            lambda: lk.lock("res", wait=0).acquire(wait=-1),
            lambda: lk.lock("res", wait=0).acquire(True, -1),
            lambda: lk.lock("res", wait=0).acquire(blocking_timeout=-1.0),
        ):
            # Held by a lease that ends in 300 ms (not renewed): a wait of
            # -1 is granted when it ends; a single try would answer None.
            held = await f(lk.lock("res", ttl=0.3, watchdog=False).acquire(blocking=False))
            assert held
            lease = await f(forever())
            assert lease and lease.fence > held.fence
            assert await f(lease.release())
        for bad in (
            lambda: lk.lock("res", wait=-2),
            lambda: lk.lock("res", wait=-0.5),
            lambda: lk.lock("res", blocking_timeout=-3),
            lambda: lk.lock("res", wait=5, blocking_timeout=5),
            lambda: lk.lock("res").acquire(wait=-2),
            lambda: lk.lock("res").acquire(True, -0.001),
            lambda: lk.lock("res").acquire(blocking_timeout=-2),
            lambda: lk.lock("res").acquire(wait=1, blocking_timeout=1),
            lambda: lk.read_lock("res", wait=-2),
            lambda: lk.semaphore("res", 2, blocking_timeout=-2),
        ):
            with pytest.raises(dlock.InvalidRequest):
                await f(bad())
        assert holder(c, "res") is None, "nothing was sent"
        f.close(lk)

    run(main())


def test_acquire_renews_as_with_does_unless_told_not_to(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res", ttl=0.9)
        lease = await f(lock.acquire())
        # Over two ttls later, still held: the watchdog renewed it.
        assert await f(lease.wait_lost(2.0)) is False
        assert holder(c, "res") == (lease.token, lease.fence) and lock.owned()
        assert await f(lock.release())
        # watchdog=False on the call, the lock or the Locker: the budget passes.
        for lock in (lk.lock("a", ttl=0.3), lk.lock("b", ttl=0.3, watchdog=False)):
            lease = await f(lock.acquire(watchdog=False) if lock.resource == "a" else lock.acquire())
            assert await f(lease.wait_lost(5.0)) is True
            assert not lock.owned(), "a lost lease is not owned"
        off = f.locker(watchdog=False)
        lease = await f(off.lock("c", ttl=0.3).acquire())
        assert await f(lease.wait_lost(5.0)) is True
        f.close(off)
        f.close(lk)

    run(main())


def test_release_and_extend_act_on_the_latest_lease_and_report_loss(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.reentrant_lock("job", ttl=30)
        first = await f(lock.acquire(blocking=False))
        second = await f(lock.acquire(blocking=False))
        assert first and second and holds(c, "job") == 2
        assert await f(lock.extend(20)) and second.ttl == 20 and first.ttl == 30
        assert await f(lock.release()) and second.released and not first.released
        assert lock.owned() and holds(c, "job") == 1
        assert await f(lock.release()) and first.released and holds(c, "job") == 0
        # A lease lost meanwhile: LockLost, or False with raise_on_lost=False.
        for raise_on_lost in (True, False):
            lock = lk.lock("res", ttl=30, raise_on_lost=raise_on_lost)
            for call in (lambda: lock.extend(30), lambda: lock.release()):
                lease = await f(lock.acquire(blocking=False))
                c.delete("res")
                if raise_on_lost:
                    with pytest.raises(dlock.LockLost):
                        await f(call())
                else:
                    assert await f(call()) is False
                assert lease.lost
                if not lease.released:
                    await f(lease.release())
        f.close(lk)

    run(main())


def test_locked_looks_at_every_member_of_a_set(server, f):
    async def main():
        lk = f.locker()
        s = lk.multi_lock(["{o}:a", "{o}:b"])
        other = await f(lk.lock("{o}:b").acquire(blocking=False))
        assert await f(s.locked()) and not s.owned()
        assert await f(other.release())
        assert await f(s.locked()) is False
        f.close(lk)

    run(main())


def test_the_decorator_runs_the_function_under_the_lock(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        seen = []
        if f.is_async:

            @lk.lock("res", ttl=30)
            async def work(x, y=0):
                seen.append(holder(c, "res"))
                return x + y

            with pytest.raises(dlock.InvalidRequest, match="not a coroutine function"):
                lk.lock("res")(lambda: None)
        else:

            @lk.lock("res", ttl=30)
            def work(x, y=0):
                seen.append(holder(c, "res"))
                return x + y

            async def coro():
                pass

            with pytest.raises(dlock.InvalidRequest, match="coroutine function"):
                lk.lock("res")(coro)
        assert work.__name__ == "work"
        assert await f(work(2, y=3)) == 5
        assert seen[0] is not None and holder(c, "res") is None
        held = await f(lk.lock("res").acquire(blocking=False))
        busy = lk.lock("res", blocking=False)
        if f.is_async:

            @busy
            async def never():
                raise AssertionError("ran without the lock")
        else:

            @busy
            def never():
                raise AssertionError("ran without the lock")

        with pytest.raises(dlock.NotAcquired):
            await f(never())
        assert await f(held.release())
        f.close(lk)

    run(main())


def test_run_returns_the_result_or_none_when_not_granted(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res", ttl=30, blocking=False)

        def body(x, y):
            assert holder(c, "res") is not None and lock.owned()
            return x * y

        async def abody(x, y):
            return body(x, y)

        work = abody if f.is_async else body
        assert await f(lock.run(work, 6, 7)) == 42
        assert holder(c, "res") is None and not lock.owned()
        held = await f(lk.lock("res").acquire(blocking=False))
        assert await f(lock.run(work, 1, 2)) is None, "busy: not run"
        assert await f(held.release())

        # The function's exception passes through; the lock is released.
        def fails():
            raise KeyError("boom")

        async def afails():
            fails()

        with pytest.raises(KeyError):
            await f(lock.run(afails if f.is_async else fails))
        assert holder(c, "res") is None

        # A lease lost while it ran: LockLost.
        def loses():
            c.delete("res")

        async def aloses():
            loses()

        with pytest.raises(dlock.LockLost):
            await f(lock.run(aloses if f.is_async else loses))
        f.close(lk)

    run(main())


def test_asyncio_reentrant_acquire_through_wait_for_nests(server):
    """Defect 9: ``asyncio.wait_for`` runs the acquire in a task of its own
    on Python 3.11; the owner must be the task that called ``acquire()``."""
    import redis.asyncio

    import dlock.asyncio as dla

    c = server.conn()

    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        lock = lk.reentrant_lock("job", ttl=30)
        async with lock as outer:
            inner = await asyncio.wait_for(lock.acquire(), 5)
            assert inner and inner.fence == outer.fence and holds(c, "job") == 2
            assert lock.owned()
            # The lease is the calling task's: release finds it, through
            # wait_for too.
            assert await asyncio.wait_for(lock.release(), 5) and inner.released
            assert holds(c, "job") == 1
            again = await asyncio.wait_for(lock.run(asyncio.sleep, 0, "ran"), 5)
            assert again == "ran" and holds(c, "job") == 1
        assert holder(c, "job") is None
        # Another task is another owner.

        async def other():
            return await lock.acquire(blocking=False)

        async with lock:
            assert await asyncio.create_task(other()) is None
        lk.close()

    run(main())
