"""``max_hold``: the server's ``MAXHOLD`` cap on holding. The renewal past
the cap is refused, the lease is lost as for any loss, and the loss carries
the server's reason (``lease.loss_reason``, ``LockLost.reason``; leaving the
block raises ``MaxHoldReached``), blocking and asyncio alike."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla

REFUSAL = "MAXHOLD the hold may live "


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


def test_the_watchdog_ends_the_lease_at_the_cap_with_its_reason(server):
    lk = _locker(server)
    lost = threading.Event()
    # Renewed every 0.2 s by 0.6 s: the second renewal passes the cap at
    # 0.9 s and is refused.
    with pytest.raises(dlock.MaxHoldReached) as caught:
        with lk.lock("res", ttl=0.6, max_hold=0.9, on_lost=lambda lease: lost.set()) as lease:
            assert lost.wait(10), "lost at the cap"
            assert lease.lost
            assert lease.loss_reason.startswith(REFUSAL), lease.loss_reason
    assert isinstance(caught.value, dlock.LockLost)
    assert caught.value.reason.startswith(REFUSAL)
    assert REFUSAL in str(caught.value)


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
        with pytest.raises(dlock.MaxHoldReached) as caught:
            async with lk.lock("res", ttl=0.6, max_hold=0.9) as lease:
                await asyncio.wait_for(lease.lost_event.wait(), 10)
                assert lease.loss_reason.startswith(REFUSAL)
        assert caught.value.reason.startswith(REFUSAL)

    asyncio.run(asyncio.wait_for(main(), 60))
