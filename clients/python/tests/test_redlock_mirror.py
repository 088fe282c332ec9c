"""The blocking Redlock's side of the checks test_aredlock.py makes for
asyncio (a minority's grant undone, every kind and the token calls on every
server), and the arguments both Redlocks refuse before asking any server."""

from __future__ import annotations

import asyncio
import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla
from dlock._spec import Spec
from harness import holder, holds


def redlock(servers, **kw):
    kw.setdefault("node_timeout", 0.2)  # a loaded 2-core CI: honest margins
    return dlock.Redlock([s.url for s in servers], **kw)


def held_on(servers, res):
    return [holder(s.conn(), res) for s in servers]


@pytest.fixture
def three(make_server):
    return [make_server() for _ in range(3)]


def test_a_minoritys_grants_are_released(three):
    other = Spec(["res"], ttl=30).acquire_cmd("other", None)
    fences = [s.conn().execute_command(*other) for s in three[1:]]
    assert None not in fences
    rl = redlock(three)
    assert rl.lock("res", ttl=10).acquire(blocking=False) is None
    # The one grant was undone on the connection that made it.
    assert held_on(three, "res") == [None] + [("other", f) for f in fences]


def test_every_kind_and_the_token_calls_on_every_server(three):
    with redlock(three) as rl:
        with rl.lock("res", ttl=10) as lease:
            info = rl.info("res")
            assert [i["token"] for i in info] == [lease.token] * 3
            assert rl.extend_token("res", lease.token, 10) is True
        assert rl.info("res") == [None] * 3
        assert rl.extend_token("res", lease.token, 10) is False
        r = rl.read_lock("doc").acquire(blocking=False)
        r2 = rl.read_lock("doc").acquire(blocking=False)
        assert r and r2 and [holds(s.conn(), "doc") for s in three] == [2] * 3
        assert rl.write_lock("doc").acquire(blocking=False) is None
        assert r.release() and r2.release()
        re = rl.reentrant_lock("job")
        with re as outer:
            with re as inner:
                assert inner.fences == outer.fences and [holds(s.conn(), "job") for s in three] == [2] * 3
        assert held_on(three, "job") == [None] * 3
        with pytest.raises(dlock.InvalidRequest):
            rl.release_token("res", "")
        assert rl.release_token("res", "nobody") is False
    one = redlock(three[:1])
    sem = one.semaphore("sem", 2)
    p = [sem.acquire(blocking=False) for _ in range(3)]
    assert p[0] and p[1] and p[2] is None
    assert p[0].release() and p[1].release()


@pytest.mark.parametrize("cls", [dlock.Redlock, dla.Redlock], ids=["blocking", "asyncio"])
@pytest.mark.parametrize(
    "servers",
    [[], 5, [123], [None], [b"redis://localhost"], [["redis://localhost"]], "not a url", ["redis://x:port"]],
    ids=repr,
)
def test_servers_that_are_no_servers_are_refused(cls, servers):
    with pytest.raises(dlock.InvalidRequest):
        cls(servers)


def test_the_blocking_redlock_refuses_an_asyncio_client():
    async def main():
        # Made in a loop: Python 3.9's redis.asyncio pool wants one.
        with pytest.raises(dlock.InvalidRequest, match="dlock.asyncio.Redlock"):
            dlock.Redlock([redis.asyncio.Redis(port=1)])

    asyncio.run(main())
    # The asyncio one takes a blocking client's address and login.
    assert dla.Redlock([redis.Redis(port=1)]).quorum == 1


@pytest.mark.parametrize("cls", [dlock.Redlock, dla.Redlock], ids=["blocking", "asyncio"])
def test_bad_lock_options_are_refused(cls):
    rl = cls(["redis://localhost:1", "redis://localhost:2", "redis://localhost:3"])
    for kw in [dict(ttl=0), dict(ttl=-1), dict(ttl="x"), dict(wait="x"), dict(limit=2), dict(token="")]:
        with pytest.raises(dlock.InvalidRequest):
            rl.lock("res", **kw)
    with pytest.raises(dlock.InvalidRequest):
        rl.semaphore("res", 3)
    with pytest.raises(dlock.InvalidRequest):
        rl.lock("")
