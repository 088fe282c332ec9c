"""``on_wanted=``: a held lock hears, from its renewals, that someone
waits (``EXTEND ... WANTED``), once per change from nobody to someone."""

from __future__ import annotations

import queue
import threading
import time

import pytest

import dlock
from dlock._core.wanted import WantedState, read_reply
from harness import waiters


@pytest.fixture
def locker(server):
    with dlock.Locker(server.conn()) as lk:
        yield lk


def _until(what, f, within=10.0):
    end = time.monotonic() + within
    while not f():
        assert time.monotonic() < end, what
        time.sleep(0.01)


def _waiter(locker, resource):
    got = queue.Queue()

    def take():
        lease = locker.lock(resource, ttl=30, wait=30).acquire()
        got.put(lease)
        if lease:
            lease.release()

    threading.Thread(target=take, daemon=True).start()
    return got


def test_an_extend_tells_the_hook_when_someone_starts_waiting(server, locker):
    c = server.conn()
    told = queue.Queue()
    lock = locker.lock("res", ttl=30, on_wanted=lambda lease, n: told.put((lease, n)))
    lease = lock.acquire(blocking=False, watchdog=False)
    assert lease
    assert lease.extend(), "nobody waits: extended, nothing told"
    got = _waiter(locker, "res")
    _until("a waiter queued", lambda: waiters(c, "res") == 1)
    assert lease.extend()
    held, n = told.get(timeout=10)
    assert held is lease and n == 1
    assert lease.extend(), "still wanted: told once per change"
    lease.release()
    assert got.get(timeout=10)
    assert told.empty()


def test_the_watchdog_tells_the_hook(server, locker):
    c = server.conn()
    told = queue.Queue()
    with locker.lock("res", ttl=1, on_wanted=lambda lease, n: told.put(n)) as lease:
        got = _waiter(locker, "res")
        _until("a waiter queued", lambda: waiters(c, "res") == 1)
        assert told.get(timeout=10) == 1
        assert not lease.lost
    assert got.get(timeout=10)


def test_the_edge_and_the_reply_forms():
    told = []
    w = WantedState(told.append)
    for n in [0, 2, 3, 0, 0, 1, 4]:
        w.seen(n)
    assert told == [2, 1]
    assert read_reply(1) == (1, None)
    assert read_reply([b"extended", 1, b"waiters", 3]) == (1, 3)
    assert read_reply({b"waiters": [0, 2], b"priority": 1, b"extended": 0}) == (0, 2)
    assert read_reply([b"waiters", 3]) is None
    assert read_reply(None) is None


def test_a_refused_option_is_logged_once_and_no_longer_asked(caplog):
    w = WantedState(lambda n: None)
    assert not w.refuse(dlock.DlockError("ERR something else"))
    assert w.asks()
    arity = dlock.DlockError("ERR wrong number of arguments for 'dlock.extend' command")
    assert w.refuse(arity) and w.refuse(arity)
    assert not w.asks()
    assert len([r for r in caplog.records if "who waits" in r.getMessage()]) == 1


def test_asyncio_the_hook_runs_on_the_loop_after_the_renewal(server):
    import asyncio

    import redis.asyncio

    import dlock.asyncio as dla

    c = server.conn()

    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        told = asyncio.Queue()

        async def hook(lease, n):  # a coroutine function runs as a task
            await told.put((lease, n))

        lease = await lk.lock("res", ttl=30, on_wanted=hook).acquire(blocking=False, watchdog=False)
        assert lease
        assert await lease.extend()
        other = asyncio.ensure_future(lk.lock("res", ttl=30, wait=30).acquire())
        end = time.monotonic() + 10
        while waiters(c, "res") != 1:
            assert time.monotonic() < end, "a waiter queued"
            await asyncio.sleep(0.01)
        assert await lease.extend()
        held, n = await asyncio.wait_for(told.get(), 10)
        assert held is lease and n == 1
        assert await lease.extend()
        assert await lease.release()
        got = await asyncio.wait_for(other, 10)
        assert got and await got.release()
        assert told.empty()

        # The watchdog, and a plain function as the hook.
        plain = []
        async with lk.lock("w", ttl=1, on_wanted=lambda lease, n: plain.append(n)):
            other = asyncio.ensure_future(lk.lock("w", ttl=30, wait=30).acquire())
            end = time.monotonic() + 10
            while plain != [1]:
                assert time.monotonic() < end, "the watchdog told the hook"
                await asyncio.sleep(0.01)
        got = await asyncio.wait_for(other, 10)
        assert got and await got.release()

    asyncio.run(asyncio.wait_for(main(), 60))
