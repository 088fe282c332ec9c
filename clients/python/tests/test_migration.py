"""The migration table of docs/python.md ("Migrating: the dlock call for
each common call"), row by row, on a real server, blocking and asyncio
where both exist. Each test names the rows it covers (their first cell,
as written in the table); the last test reads the table and fails if a row
is covered by no test (or a test names a row the table lost)."""

from __future__ import annotations

import os
import re
from typing import Callable, Dict, Set, Tuple

import pytest

import dlock
from api_flavors import FLAVORS, Flavor, run
from harness import calls, holder, holds

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "python.md")
SECTIONS = {"redis-py": "redis-py", "threading": "threading", "python-redis-lock": "python-redis-lock", "pottery": "pottery"}

#: (section, first cell) -> the tests that cover it.
COVERED: Dict[Tuple[str, str], Set[str]] = {}


def covers(section: str, *cells: str) -> Callable:
    def mark(fn: Callable) -> Callable:
        for cell in cells:
            COVERED.setdefault((section, cell), set()).add(fn.__name__)
        return fn

    return mark


@pytest.fixture(params=FLAVORS)
def f(request, server) -> Flavor:
    return Flavor(request.param, server.port)


async def short_holder(f: Flavor, lk, res: str = "res"):
    """A lease on ``res`` that ends in 300 ms (not renewed): a waiter
    after it is handed the lock."""
    held = await f(lk.lock(res, ttl=0.3, watchdog=False).acquire(blocking=False))
    assert held, f"{res} was not free"
    return held


async def granted_after(f: Flavor, lk, call, res: str = "res"):
    """``call()`` (an acquire that waits) while ``res`` is held briefly:
    granted after the holder, with a higher fence; released again."""
    held = await short_holder(f, lk, res)
    lease = await f(call())
    assert lease and lease.fence > held.fence
    assert await f(lease.release())
    return lease


# --- redis-py -----------------------------------------------------------------


@covers(
    "redis-py",
    '`lock = r.lock("res", timeout=30)`',
    '`r.lock("res", timeout=None)` (never expires)',
    '`r.lock("res", blocking_timeout=5)`',
    '`r.lock("res", blocking=False)`',
    '`r.lock("res", sleep=0.1)`',
    "`lock.acquire()` → `True`",
    "`lock.acquire(blocking=False)` → `False` when busy",
    "`lock.acquire(blocking_timeout=5)`",
    '`lock.acquire(token="t")`',
    "`lock.release()`",
    "`LockNotOwnedError` from `release()` (the lock expired)",
    "`LockError` from `release()` (not acquired)",
    "`lock.locked()`",
    "`lock.owned()`",
    "`lock.extend(10, replace_ttl=True)`",
    "`lock.extend(10)` (adds 10 s)",
    "`lock.reacquire()`",
    '`with r.lock("res"):`',
    "`LockError` from `with` (not acquired)",
    '`r.lock("res", raise_on_release_error=False)`',
    '`r.lock("res", thread_local=False)` (release on another thread)',
)
def test_redis_py_lock(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res", ttl=30)
        lease = await f(lock.acquire())
        assert lease and lease.ttl == 30 and 29_000 < c.pttl("res") <= 30_000
        assert lock.owned() and await f(lock.locked())
        assert await f(lk.lock("res").acquire(blocking=False)) is None
        assert await f(lk.lock("res").acquire(blocking_timeout=0.2)) is None
        c.pexpire("res", 5_000)
        assert await f(lock.extend()) and 29_000 < c.pttl("res") <= 30_000, "reacquire: the ttl again"
        assert await f(lock.extend(10)) and 9_000 < c.pttl("res") <= 10_000
        assert await f(lock.extend(lease.remaining() + 10)) and 19_000 < c.pttl("res") <= 20_000
        assert await f(lock.release()) and holder(c, "res") is None
        assert not lock.owned() and not await f(lock.locked())
        with pytest.raises(dlock.NotOwned):
            await f(lock.release())
        # timeout=None: the default ttl, renewed (shown with a short one).
        lease = await f(lk.lock("res").acquire())
        assert lease.ttl == 30 and await f(lease.release())
        lease = await f(lk.lock("res", ttl=0.9).acquire())
        assert await f(lease.wait_lost(2.0)) is False and await f(lease.release())
        # Waiting: blocking_timeout on the lock or the call, one ACQUIRE each
        # (queued in the server, no polling).
        n = calls(c, "dlock.acquire")
        await granted_after(f, lk, lambda: lk.lock("res", blocking_timeout=5).acquire())
        await granted_after(f, lk, lambda: lk.lock("res").acquire(blocking_timeout=5))
        assert calls(c, "dlock.acquire") - n == 4, "two holders and two waiters, one ACQUIRE each"
        # blocking=False on the lock.
        held = await f(lk.lock("res").acquire())
        assert await f(lk.lock("res", blocking=False).acquire()) is None
        with pytest.raises(dlock.NotAcquired):
            async with f.hold(lk.lock("res", blocking=False)):
                pass
        assert await f(held.release())
        # A given token: a retry of that acquisition (same fence).
        t = dlock.new_token()
        a = await f(lk.lock("res").acquire(token=t))
        b = await f(lk.lock("res").acquire(token=t, blocking=False))
        assert a and b and a.fence == b.fence and holder(c, "res") == (t, a.fence)
        assert await f(a.release())
        # Expired meanwhile: LockLost, or False with raise_on_lost=False.
        lock = lk.lock("res")
        await f(lock.acquire())
        c.delete("res")
        with pytest.raises(dlock.LockLost):
            await f(lock.release())
        quiet = lk.lock("res", raise_on_lost=False)
        await f(quiet.acquire())
        c.delete("res")
        assert await f(quiet.release()) is False
        async with f.hold(quiet):
            c.delete("res")
        # with: the lease; released at the end.
        async with f.hold(lk.lock("res")) as lease:
            assert holder(c, "res") == (lease.token, lease.fence)
        assert holder(c, "res") is None
        # Released on another thread (task): hand the lease over.
        lease = await f(lk.lock("res").acquire())
        assert await f.elsewhere(lease.release) is True and holder(c, "res") is None
        f.close(lk)

    run(main())


@covers(
    "redis-py",
    "`await lock.acquire()`, `await lock.release()`, `async with lock:` (`redis.asyncio`)",
    "`await lock.owned()` (`redis.asyncio`)",
)
def test_redis_py_asyncio_lock(server):
    c = server.conn()
    f = Flavor("asyncio", server.port)

    async def main():
        lk = f.locker()
        lock = lk.lock("res")
        assert await lock.acquire() and lock.owned() is True
        assert await lock.release() and lock.owned() is False
        async with lock as lease:
            assert holder(c, "res") == (lease.token, lease.fence)
        assert holder(c, "res") is None
        lk.close()

    run(main())


# --- threading ----------------------------------------------------------------


@covers(
    "threading",
    "`lock = threading.Lock()`",
    "`lock.acquire()`",
    "`lock.acquire(False)`",
    "`lock.acquire(True, 5)`",
    "`lock.acquire(timeout=5)`",
    "`lock.acquire(timeout=-1)`",
    "`ValueError` from `lock.acquire(False, 5)`",
    "`RuntimeError` from `lock.release()` (unlocked)",
    "`lock.locked()`",
    "`with lock:`",
    "`threading.RLock()`",
    "`threading.BoundedSemaphore(3)`",
)
def test_threading_lock(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res")
        # Shared by threads (tasks): one holds, the other is refused.
        assert await f(lock.acquire())
        assert await f.elsewhere(lambda: lock.acquire(False)) is None
        assert await f(lock.locked()) and await f.elsewhere(lock.locked)
        assert await f(lock.release()) and not await f(lock.locked())
        await granted_after(f, lk, lambda: lk.lock("res").acquire())
        await granted_after(f, lk, lambda: lk.lock("res").acquire(True, 5))
        await granted_after(f, lk, lambda: lk.lock("res").acquire(wait=5))
        await granted_after(f, lk, lambda: lk.lock("res").acquire(wait=-1))
        with pytest.raises(ValueError):
            await f(lock.acquire(False, 5))
        with pytest.raises(RuntimeError):
            await f(lock.release())
        async with f.hold(lock) as lease:
            assert holder(c, "res") == (lease.token, lease.fence)
        # RLock: nests for one owner (this thread or task).
        rlock = lk.reentrant_lock("job")
        async with f.hold(rlock):
            async with f.hold(rlock):
                assert holds(c, "job") == 2
            assert await f.elsewhere(lambda: rlock.acquire(False)) is None
        assert holds(c, "job") == 0
        sem = lk.semaphore("pool", 3)
        permits = [await f(sem.acquire(False)) for _ in range(4)]
        assert all(permits[:3]) and permits[3] is None
        for p in permits[:3]:
            assert await f(p.release())
        f.close(lk)

    run(main())


@covers("threading", "`async with asyncio.Lock():`", "`asyncio.Lock().locked()`")
def test_asyncio_lock(server):
    c = server.conn()
    f = Flavor("asyncio", server.port)

    async def main():
        lk = f.locker()
        lock = lk.lock("res")
        assert await lock.locked() is False
        async with lock as lease:
            assert holder(c, "res") == (lease.token, lease.fence)
            assert await lock.locked() is True
        lk.close()

    run(main())


# --- python-redis-lock --------------------------------------------------------


@covers(
    "python-redis-lock",
    '`redis_lock.Lock(r, "res", expire=60)`',
    '`redis_lock.Lock(r, "res", expire=60, auto_renewal=True)`',
    "`lock.acquire()`",
    "`lock.acquire(blocking=False)`",
    "`lock.acquire(timeout=5)`",
    "`lock.release()`",
    "`NotAcquired` from `release()` (expired)",
    "`lock.locked()`",
    "`lock.extend(expire=60)`",
    "`lock.get_owner_id()`",
    '`redis_lock.Lock(r, "res", id=x).release()` (elsewhere)',
    "`lock.reset()` (forced)",
    '`with redis_lock.Lock(r, "res"):`',
)
def test_python_redis_lock(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res", ttl=60)
        lease = await f(lock.acquire())
        assert lease and 59_000 < c.pttl("res") <= 60_000
        assert await f(lk.lock("res").acquire(blocking=False)) is None
        assert await f(lock.locked())
        c.pexpire("res", 5_000)
        assert await f(lock.extend(60)) and 59_000 < c.pttl("res") <= 60_000
        assert (await f(lk.info("res")))["token"] == lease.token
        assert await f(lock.release()) and not await f(lock.locked())
        # auto_renewal: the default (shown with a short ttl).
        lease = await f(lk.lock("res", ttl=0.9).acquire())
        assert await f(lease.wait_lost(2.0)) is False and await f(lease.release())
        await granted_after(f, lk, lambda: lk.lock("res").acquire(wait=5))
        await f(lock.acquire())
        c.delete("res")
        with pytest.raises(dlock.LockLost):
            await f(lock.release())
        # Released elsewhere by its token; reset by the holder's token.
        lease = await f(lk.lock("res").acquire())
        assert await f(lk.release_token("res", lease.token)) and holder(c, "res") is None
        other = await f(lk.lock("res").acquire())
        assert await f(lk.release_token("res", (await f(lk.info("res")))["token"]))
        assert holder(c, "res") is None
        assert await f(other.release()) is False, "its lease was ended by the reset"
        async with f.hold(lk.lock("res")) as lease:
            assert holder(c, "res") == (lease.token, lease.fence)
        f.close(lk)

    run(main())


# --- pottery --------------------------------------------------------------------


@covers(
    "pottery",
    '`Redlock(key="res", masters={r}, auto_release_time=10)`',
    "`lock.acquire()`",
    "`lock.acquire(blocking=False)`",
    "`lock.acquire(timeout=5)`",
    "`lock.locked()` (ms left while held by this Redlock)",
    "`lock.extend()`",
    "`lock.release()`",
    "`ReleaseUnlockedLock` from `release()`",
    "`with Redlock(...):` (`QuorumNotAchieved`)",
    "`Redlock(..., context_manager_blocking=False)`",
    "`Redlock(..., context_manager_timeout=5)`",
    '`@synchronize(key="res", masters={r})`',
)
def test_pottery(server, f):
    c = server.conn()

    async def main():
        lk = f.locker()
        lock = lk.lock("res", ttl=10)
        lease = await f(lock.acquire())
        assert lease and 9_000 < c.pttl("res") <= 10_000
        assert lock.owned() and 9 < lease.remaining() <= 10
        assert await f(lk.lock("res").acquire(blocking=False)) is None
        for _ in range(5):
            c.pexpire("res", 5_000)
            assert await f(lock.extend()) and 9_000 < c.pttl("res") <= 10_000
        assert await f(lock.release()) and not lock.owned()
        with pytest.raises(dlock.NotOwned):
            await f(lock.release())
        await f(lock.acquire())
        c.delete("res")
        with pytest.raises(dlock.LockLost):
            await f(lock.release())
        await granted_after(f, lk, lambda: lk.lock("res").acquire(wait=5))
        held = await f(lk.lock("res").acquire())
        with pytest.raises(dlock.NotAcquired):
            async with f.hold(lk.lock("res", blocking=False)):
                pass
        with pytest.raises(dlock.NotAcquired):
            async with f.hold(lk.lock("res", wait=0.2)):
                pass
        assert await f(held.release())
        held = await short_holder(f, lk)
        async with f.hold(lk.lock("res", wait=5)) as lease:
            assert lease.fence > held.fence
        # @synchronize: the lock as a decorator.
        if f.is_async:

            @lk.lock("res")
            async def printer():
                return holder(c, "res")
        else:

            @lk.lock("res")
            def printer():
                return holder(c, "res")

        assert await f(printer()) is not None and holder(c, "res") is None
        f.close(lk)

    run(main())


@covers(
    "pottery",
    '`Redlock(key="res", masters={r}, auto_release_time=10)`',
)
def test_pottery_over_several_servers(make_server):
    servers = [make_server() for _ in range(3)]
    redlock = dlock.Redlock([s.url for s in servers])
    lock = redlock.lock("res", ttl=10)
    lease = lock.acquire()
    assert lease and all(holder(s.conn(), "res") is not None for s in servers)
    assert 9 < lease.remaining() <= 10 and lock.locked()
    assert lease.release() and not lock.locked()
    with lock as lease:
        assert lock.owned() and lock.locked() and len(lease.fences) == 3
    assert not lock.owned() and not lock.locked()
    redlock.close()


@covers("pottery", "`AIORedlock(...)`: `await lock.acquire()`, `async with lock:`")
def test_pottery_aioredlock(server):
    c = server.conn()
    f = Flavor("asyncio", server.port)

    async def main():
        lk = f.locker()
        lock = lk.lock("res")
        assert await lock.acquire() and await lock.release()
        async with lock as lease:
            assert holder(c, "res") == (lease.token, lease.fence)
        lk.close()

    run(main())


# --- the table and the tests agree ----------------------------------------------------


def table_rows() -> Set[Tuple[str, str]]:
    """(section, first cell) of every row of the migration tables."""
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    start = text.index("### Migrating: the dlock call for each common call")
    end = text.index("\n## ", start)
    rows: Set[Tuple[str, str]] = set()
    section = None
    for line in text[start:end].splitlines():
        m = re.match(r"#### From (.*)", line)
        if m:
            section = next(v for k, v in SECTIONS.items() if m.group(1).replace("`", "").startswith(k))
            continue
        if not line.startswith("| ") or line.startswith("| ---"):
            continue
        first = line.split(" | ")[0][2:].strip()
        if first in SECTIONS or first == section:  # the header row
            continue
        assert section is not None, f"a row before any section: {line}"
        rows.add((section, first))
    return rows


def test_every_row_of_the_migration_table_is_tested():
    rows = table_rows()
    assert len(rows) > 50
    untested = sorted(rows - COVERED.keys())
    assert not untested, f"rows of docs/python.md's migration table no test covers: {untested}"
    gone = sorted(COVERED.keys() - rows)
    assert not gone, f"tests cover rows the table no longer has: {gone}"
