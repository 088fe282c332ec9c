"""Bad arguments: every one is an ``InvalidRequest`` naming what was wrong,
raised before anything is sent (the server runs no dlock command), from
every entry point, blocking and asyncio alike."""

from __future__ import annotations

import asyncio
import datetime

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla

BAD_TEXT = "bad\ud800name"  # a lone surrogate: no UTF-8 form


def dlock_calls(c: redis.Redis) -> int:
    """How many dlock commands the server ran."""
    stats = c.info("commandstats")
    return sum(int(v.get("calls", 0)) for k, v in stats.items() if k.startswith("cmdstat_dlock."))


# Each case: (what the message must name, a call on a blocking Locker).
# The asyncio Locker runs the same calls (awaited where they are coroutines).
CASES = [
    ("resource", lambda lk: lk.lock(BAD_TEXT)),
    ("resource", lambda lk: lk.read_lock(BAD_TEXT)),
    ("resource", lambda lk: lk.write_lock(BAD_TEXT)),
    ("resource", lambda lk: lk.semaphore(BAD_TEXT, 2)),
    ("resource", lambda lk: lk.reentrant_lock(BAD_TEXT)),
    ("owner", lambda lk: lk.reentrant_lock("job", owner=BAD_TEXT)),
    ("owner", lambda lk: lk.lock("job", owner=BAD_TEXT)),
    ("resource", lambda lk: lk.multi_lock(["ok", BAD_TEXT])),
    ("resource", lambda lk: lk.extend_token(BAD_TEXT, "t" * 32, 5)),
    ("resource", lambda lk: lk.release_token(BAD_TEXT, "t" * 32)),
    ("token", lambda lk: lk.extend_token("r", "tok\ud800", 5)),
    ("token", lambda lk: lk.release_token("r", "tok\ud800")),
    ("token", lambda lk: lk.lock("r", token="tok\ud800")),
    ("resource", lambda lk: lk.info(BAD_TEXT)),
    # Numbers a type would let through.
    ("limit", lambda lk: lk.semaphore("s", float("inf"))),
    ("limit", lambda lk: lk.semaphore("s", float("nan"))),
    ("limit", lambda lk: lk.semaphore("s", 10**400)),
    ("limit", lambda lk: lk.semaphore("s", 2.0)),
    ("ttl", lambda lk: lk.lock("r", ttl=10**400)),
    ("ttl", lambda lk: lk.lock("r", ttl=float("nan"))),
    ("ttl", lambda lk: lk.lock("r", ttl=float("inf"))),
    ("ttl", lambda lk: lk.lock("r", ttl="5")),
    ("ttl", lambda lk: lk.extend_token("r", "t" * 32, float("nan"))),
    ("owner", lambda lk: lk.reentrant_lock("job", owner=5)),
    ("owner", lambda lk: lk.reentrant_lock("job", owner=b"")),
    ("resource", lambda lk: lk.lock(5)),
    ("resource", lambda lk: lk.lock(None)),
    ("resource", lambda lk: lk.multi_lock(["ok", 5])),
    ("resource", lambda lk: lk.multi_lock(["ok", b""])),
    ("resource", lambda lk: lk.multi_lock(5)),
]


IDS = [f"{i:02}-{what}" for i, (what, _) in enumerate(CASES)]


@pytest.mark.parametrize("what,call", CASES, ids=IDS)
def test_blocking_bad_argument_is_invalid_request(server, what, call):
    c = server.conn()
    lk = dlock.Locker(redis.Redis(port=server.port))
    before = dlock_calls(c)
    with pytest.raises(dlock.InvalidRequest) as e:
        r = call(lk)
        # A Lock is made lazily by some entry points: acquiring it counts.
        if isinstance(r, dlock.Lock):
            r.acquire(blocking=False)
    assert what in str(e.value)
    assert dlock_calls(c) == before


@pytest.mark.parametrize("what,call", CASES, ids=IDS)
def test_asyncio_bad_argument_is_invalid_request(server, what, call):
    c = server.conn()

    async def main() -> None:
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        before = dlock_calls(c)
        with pytest.raises(dlock.InvalidRequest) as e:
            r = call(lk)
            if asyncio.iscoroutine(r):
                await r
            elif isinstance(r, dla.Lock):
                await r.acquire(blocking=False)
        assert what in str(e.value)
        assert dlock_calls(c) == before

    asyncio.run(asyncio.wait_for(main(), 60))


def made_in_a_loop(make):
    """``make()`` run inside an event loop: redis-py's asyncio objects ask
    for the current loop when made on Python < 3.10."""

    async def inside():
        return make()

    return asyncio.run(inside())


@pytest.mark.parametrize(
    "kw",
    [
        {"io_timeout": "2"},
        {"io_timeout": float("nan")},
        {"retry_for": None},
        {"retry_for": 10**400},
        {"replicas_timeout": object(), "min_replicas": 1},
        {"max_idle": "8"},
        {"max_idle": -1},
    ],
)
def test_bad_locker_settings_are_invalid_request(kw):
    """Settings are checked when the Locker is made (nothing is connected
    then): never a TypeError, ValueError or OverflowError of their own."""
    url = "redis://127.0.0.1:1/0"
    if "retry_for" in kw and kw["retry_for"] == 10**400:
        # Too large is not wrong: clamped to the longest duration.
        assert dlock.Locker(url, **kw).settings.retry_for > 0
        assert made_in_a_loop(lambda: dla.Locker(url, **kw)).settings.retry_for > 0
        return
    with pytest.raises(dlock.InvalidRequest):
        dlock.Locker(url, **kw)
    with pytest.raises(dlock.InvalidRequest):
        made_in_a_loop(lambda: dla.Locker(url, **kw))


def test_huge_and_odd_waits_are_clamped_or_refused(server):
    """A wait of 10**400 s is a wait as long as the server allows (not an
    OverflowError); a NaN wait is refused."""
    lk = dlock.Locker(redis.Redis(port=server.port))
    lease = lk.lock("w", wait=10**400).acquire()
    assert lease is not None
    assert lease.release()
    lease = lk.lock("w", wait=datetime.timedelta(days=10**6)).acquire()
    assert lease is not None and lease.release()
    with pytest.raises(dlock.InvalidRequest):
        lk.lock("w", wait=float("nan")).acquire()


def test_bytes_names_that_are_not_text_work(server):
    """What a str cannot carry goes as bytes: a resource, an owner and set
    members that are not UTF-8."""
    res, owner = b"\xff\xfe-res", b"\xff-owner"
    lk = dlock.Locker(redis.Redis(port=server.port))
    with lk.reentrant_lock(res, owner=owner) as outer:
        with lk.reentrant_lock(res, owner=owner) as inner:
            assert inner.fence == outer.fence
        assert lk.info(res) is not None
    with lk.multi_lock([b"\xff:a", b"\xff:b"]) as s:
        assert s.fence > 0
    assert lk.info(res) is None

    async def main() -> None:
        alk = dla.Locker(redis.asyncio.Redis(port=server.port))
        async with alk.reentrant_lock(res, owner=owner) as outer:
            async with alk.reentrant_lock(res, owner=owner) as inner:
                assert inner.fence == outer.fence
            assert await alk.info(res) is not None
        async with alk.multi_lock([b"\xff:a", b"\xff:b"]) as s:
            assert s.fence > 0
        assert await alk.info(res) is None

    asyncio.run(asyncio.wait_for(main(), 60))


def test_client_settings_redis_py_cannot_use_are_refused_when_the_locker_is_made():
    with pytest.raises(dlock.InvalidRequest, match="connection settings"):
        dlock.Locker(redis.Redis(port="abc"))
    with pytest.raises(dlock.InvalidRequest, match="connection settings"):
        made_in_a_loop(lambda: dla.Locker(redis.asyncio.Redis(port="abc")))
