"""``position`` and ``waiters`` (``DLOCK.POSITION``, ``DLOCK.WAITERS``) on
the blocking and asyncio lockers: places follow the queue, every field
comes through, bad arguments are refused before anything is sent."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis.asyncio

import dlock
import dlock.asyncio as dla
from harness import wait_until, waiters


@pytest.fixture
def locker(server):
    with dlock.Locker(server.conn()) as lk:
        yield lk


def _wait_in_thread(locker, resource, **kw):
    out = []

    def take():
        lease = locker.lock(resource, ttl=30, wait=60, **kw).acquire()
        out.append(lease)
        lease.release()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    return t, out


def test_positions_and_waiters_follow_the_queue(server, locker):
    c = server.conn()
    assert locker.position("job", "nobody") is None
    assert locker.waiters("job") == []
    holder = locker.lock("job", ttl=30).acquire(blocking=False)
    first = _wait_in_thread(locker, "job")
    wait_until(10, "first queued", lambda: waiters(c, "job") == 1)
    second = _wait_in_thread(locker, "job", shared=True, owner="svc")
    wait_until(10, "second queued", lambda: waiters(c, "job") == 2)

    page = locker.waiters("job")
    assert [w["position"] for w in page] == [1, 2]
    assert page[0]["mode"] == "exclusive" and "owner" not in page[0]
    assert page[1]["mode"] == "shared" and page[1]["owner"] == "svc"
    assert all(w["limit"] == 1 and 0 < w["timeout"] <= 60_000 and w["waited"] >= 0 for w in page)
    assert "set" not in page[0] and "session" not in page[0]
    tokens = [w["token"] for w in page]
    assert [locker.position("job", t) for t in tokens] == [1, 2]
    assert locker.position("job", holder.token) is None
    assert locker.waiters("job", offset=1, count=1)[0]["token"] == tokens[1]
    assert locker.waiters("job", offset=2) == []

    assert holder.release()
    for t, _ in (first, second):
        t.join(20)
    assert locker.position("job", tokens[1]) is None
    assert locker.waiters("job", count=1000) == []


def test_waiters_show_the_permits_asked_for(server, locker):
    c = server.conn()
    holder = locker.lock("pool", ttl=30, limit=5, permits=5).acquire(blocking=False)
    assert holder
    big = _wait_in_thread(locker, "pool", limit=5, permits=3)
    wait_until(10, "big queued", lambda: waiters(c, "pool") == 1)
    one = _wait_in_thread(locker, "pool", limit=5)
    wait_until(10, "one queued", lambda: waiters(c, "pool") == 2)

    page = locker.waiters("pool")
    assert [(w["position"], w["limit"], w["permits"]) for w in page] == [(1, 5, 3), (2, 5, 1)]

    assert holder.release()
    for t, got in (big, one):
        t.join(20)
        assert got, "3 + 1 of 5 permits fit"
    assert locker.waiters("pool") == []


@pytest.mark.parametrize(
    "call",
    [
        lambda lk: lk.position("r", ""),
        lambda lk: lk.position("r", None),
        lambda lk: lk.waiters("r", count=0),
        lambda lk: lk.waiters("r", count=1001),
        lambda lk: lk.waiters("r", count=True),
        lambda lk: lk.waiters("r", offset=-1),
        lambda lk: lk.waiters("r", offset=2**63),
        lambda lk: lk.waiters("r", offset="1"),
    ],
)
def test_bad_arguments_are_refused(locker, call):
    with pytest.raises(dlock.InvalidRequest):
        call(locker)


def test_the_asyncio_locker(server, locker):
    c = server.conn()
    holder = locker.lock("job", ttl=30).acquire(blocking=False)
    t, _ = _wait_in_thread(locker, "job")
    wait_until(10, "queued", lambda: waiters(c, "job") == 1)

    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        page = await lk.waiters("job")
        assert [w["position"] for w in page] == [1]
        assert await lk.position("job", page[0]["token"]) == 1
        assert await lk.position("job", "x") is None
        assert await lk.waiters("job", offset=1) == []
        with pytest.raises(dlock.InvalidRequest):
            await lk.waiters("job", count=0)
        with pytest.raises(dlock.InvalidRequest):
            await lk.position("job", "")

    asyncio.run(asyncio.wait_for(main(), 60))
    assert holder.release()
    t.join(20)
