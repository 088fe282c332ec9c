"""``max_hold``: the server's ``MAXHOLD`` cap on holding. The client's
commands for a capped hold (the refresh after a wait, the watchdog's
renewals) stay short of the cap, so the server never refuses them; the
lease is lost at the cap as for any loss, and the loss carries the cap's
reason (``lease.loss_reason``, ``LockLost.reason``; leaving the block
raises ``MaxHoldReached``), blocking and asyncio alike. A manual
``extend`` past the cap gets the server's refusal."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla

REFUSAL = "MAXHOLD the hold may live "
#: Either reason: the server's refusal, or the cap reached.
MAXHOLD = "MAXHOLD "


def _refusals(server) -> int:
    """How many ``MAXHOLD`` refusals the server has sent (``INFO errorstats``)."""
    stats = redis.Redis(port=server.port).info("errorstats")
    return int(stats.get("errorstat_MAXHOLD", {}).get("count", 0))


def _locker(server, **kw) -> dlock.Locker:
    return dlock.Locker(redis.Redis(port=server.port), **kw)


def _info(server, res):
    return redis.Redis(port=server.port).execute_command("DLOCK.INFO", res)


def test_the_lease_is_capped_and_the_cap_is_sent(server):
    lk = _locker(server)
    lease = lk.lock("res", ttl=60, max_hold=20, watchdog=False).acquire()
    try:
        assert redis.Redis(port=server.port).pttl("res") <= 20_000
        assert "maxhold" in repr(_info(server, "res"))
        assert lease.loss_reason is None
    finally:
        lease.release()


def test_the_watchdog_renews_up_to_the_cap_and_ends_the_lease_there_with_its_reason(server):
    lk = _locker(server)
    lost = threading.Event()
    # A ttl close to the cap: the renewal a third of the way in asks for
    # what is left to the cap, not the ttl (which the server would refuse).
    started = time.monotonic()
    with pytest.raises(dlock.MaxHoldReached) as caught:
        with lk.lock("res", ttl=2.7, max_hold=3.0, on_lost=lambda lease: lost.set()) as lease:
            assert lost.wait(10), "lost at the cap"
            held = time.monotonic() - started
            assert lease.lost
            assert lease.loss_reason.startswith(MAXHOLD), lease.loss_reason
    # Kept well past a third of the cap (a loaded machine only makes the
    # loss later), and lost by the cap with a generous slack.
    assert 1.5 <= held <= 5.0, held
    assert isinstance(caught.value, dlock.LockLost)
    assert caught.value.reason.startswith(MAXHOLD)
    assert MAXHOLD in str(caught.value)
    assert _refusals(server) == 0, "no renewal was refused"


def test_a_waiting_acquire_with_max_hold_within_its_ttl_is_granted_and_ends_by_the_cap(server):
    lk = _locker(server)
    # Held by another for a second: the request waits past a third of its
    # lease, and its grant is refreshed with the same token.
    other = lk.lock("res", ttl=1.0, watchdog=False).acquire()
    assert other is not None
    started = time.monotonic()
    lease = lk.lock("res", ttl=4.0, max_hold=2.0, wait=10, watchdog=False).acquire()
    assert lease is not None, "granted after the wait"
    assert redis.Redis(port=server.port).pttl("res") <= 2000
    assert lease.wait_lost(10), "lost by the cap"
    assert time.monotonic() - started <= 2.0 + 2.0
    assert lease.loss_reason.startswith(MAXHOLD)
    assert _refusals(server) == 0, "the refresh was not refused"


def test_a_wait_longer_than_the_cap_is_held_until_the_cap_counted_from_the_grant(server):
    lk = _locker(server)
    # Held by another for longer than the request's cap: the grant comes
    # (at the other's deadline) after a wait past max_hold, and the cap
    # counts from that grant.
    other = lk.lock("res", ttl=1.5, watchdog=False).acquire()
    assert other is not None
    lease = lk.lock("res", ttl=1.0, max_hold=1.0, wait=20, watchdog=False).acquire()
    granted = time.monotonic()
    assert lease is not None, "granted after the wait"
    assert not lease.lost, "a grant after a wait past max_hold is held"
    assert lease.deadline > granted, "its budget lies ahead"
    assert lease.token.encode() in str(_info(server, "res")).encode()
    assert lease.wait_lost(10), "lost by the cap"
    assert time.monotonic() - granted <= 1.0 + 2.0
    assert lease.loss_reason.startswith(MAXHOLD)
    # The refresh asked for the whole ttl once, to learn where the cap is.
    assert _refusals(server) <= 1


def test_asyncio_a_wait_longer_than_the_cap_is_held_until_the_cap_counted_from_the_grant(server):
    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        other = await lk.lock("res", ttl=1.5, watchdog=False).acquire()
        assert other is not None
        lease = await lk.lock("res", ttl=1.0, max_hold=1.0, wait=20, watchdog=False).acquire()
        granted = time.monotonic()
        assert lease is not None, "granted after the wait"
        assert not lease.lost, "a grant after a wait past max_hold is held"
        assert lease.deadline > granted
        assert await lease.wait_lost(10), "lost by the cap"
        assert time.monotonic() - granted <= 1.0 + 2.0
        assert lease.loss_reason.startswith(MAXHOLD)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_an_extend_past_the_cap_loses_the_lease_with_its_reason(server):
    lk = _locker(server)
    lease = lk.lock("res", ttl=10, max_hold=30, watchdog=False).acquire()
    assert lease.extend(20) is True
    assert lease.extend(31) is False
    assert lease.lost
    assert lease.loss_reason.startswith(REFUSAL)


def test_a_bad_max_hold_is_refused_before_any_server_is_asked(server):
    lk = _locker(server)
    for bad in (0, -1, 2**48):
        with pytest.raises(dlock.InvalidRequest, match="max_hold"):
            lk.lock("res", max_hold=bad)
    assert not redis.Redis(port=server.port).exists("res")


def test_asyncio_the_watchdog_ends_the_lease_at_the_cap_with_its_reason(server):
    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port))
        started = time.monotonic()
        with pytest.raises(dlock.MaxHoldReached) as caught:
            async with lk.lock("res", ttl=2.7, max_hold=3.0) as lease:
                await asyncio.wait_for(lease.lost_event.wait(), 10)
                held = time.monotonic() - started
                assert lease.loss_reason.startswith(MAXHOLD)
        assert 1.5 <= held <= 5.0, held
        assert caught.value.reason.startswith(MAXHOLD)
        assert _refusals(server) == 0, "no renewal was refused"

    asyncio.run(asyncio.wait_for(main(), 60))
