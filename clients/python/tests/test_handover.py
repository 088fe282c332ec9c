"""Handing an election's lead to a chosen candidate against a real server
(blocking API): ``Leadership.hand_over`` (a candidate deep in the queue
leads at once, the one ahead keeps its place; nobody by that id changes
nothing) and ``Locker.election(..., prefer=)`` (the lead goes to the
preferred candidate as soon as it waits, and stays). Every wait has a
deadline."""

from __future__ import annotations

import threading

import pytest

import dlock
from harness import wait_until, waiters

STEP = 10.0


def campaign_in_thread(locker, name, id, **kw):
    box = {}

    def run():
        box["lead"] = locker.election(name, id=id, ttl=10, **kw).campaign(30)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_a_lead_is_handed_over_to_a_candidate_deep_in_the_queue(server):
    c = server.conn()
    locker = dlock.Locker(server.url)
    a = locker.election("leader", id="a", ttl=10).campaign(0)
    tb, b = campaign_in_thread(locker, "leader", "b")
    wait_until(STEP, "b queued", lambda: waiters(c, "leader") == 1)
    tp, p = campaign_in_thread(locker, "leader", "p")
    wait_until(STEP, "p queued", lambda: waiters(c, "leader") == 2)
    assert a.hand_over("nobody") is False
    assert not a.lost
    with pytest.raises(dlock.InvalidRequest):
        a.hand_over("x/y")
    with pytest.raises(dlock.InvalidRequest):
        a.hand_over("")
    assert a.hand_over("p") is True
    assert a.lost
    assert "handed over" in a.lease.loss_reason
    tp.join(STEP)
    assert p["lead"].term > a.term
    # b kept its place: it leads once p resigns.
    assert waiters(c, "leader") == 1
    assert p["lead"].resign()
    tb.join(STEP)
    assert not b["lead"].lost
    b["lead"].resign()


def test_a_preferred_candidate_gets_the_lead_as_soon_as_it_waits(server):
    c = server.conn()
    locker = dlock.Locker(server.url)
    a = locker.election("leader", id="a", ttl=3, prefer="p").campaign(0)
    tb, b = campaign_in_thread(locker, "leader", "b", prefer="p")
    wait_until(STEP, "b queued", lambda: waiters(c, "leader") == 1)
    assert not a.lost
    p = locker.election("leader", id="p", ttl=3, prefer="p").campaign(30)
    assert a.wait_lost(STEP), "a handed its lead over"
    assert not p.wait_lost(2), "p keeps its lead"
    assert waiters(c, "leader") == 1
    p.resign()
    tb.join(STEP)
    b["lead"].resign()
    with pytest.raises(dlock.InvalidRequest):
        locker.election("leader", prefer="a/b")


def test_a_wait_lost_woken_by_the_handover_sees_the_loss(server):
    # The handover's end is forced between its two steps: the mark of the
    # loss is held back until the waiter has answered (or a second passed),
    # so a waiter woken by the lead's end before the loss was marked would
    # answer False.
    c = server.conn()
    locker = dlock.Locker(server.url)
    a = locker.election("leader", id="a", ttl=10).campaign(0)
    tp, p = campaign_in_thread(locker, "leader", "p")
    wait_until(STEP, "p queued", lambda: waiters(c, "leader") == 1)
    answered = threading.Event()
    box = {}

    def wait():
        box["lost"] = a.wait_lost(STEP)
        answered.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    sh = a.lease._sh
    mark_lost = sh.mark_lost
    handing = threading.current_thread()

    def held_back():
        if threading.current_thread() is handing:
            answered.wait(1.0)
        mark_lost()

    sh.mark_lost = held_back
    assert a.hand_over("p") is True
    waiter.join(STEP)
    assert box.get("lost") is True, "the waiter saw the lead end without its loss"
    tp.join(STEP)
    p["lead"].resign()


def test_asyncio_hand_over_and_prefer(server):
    import asyncio

    import dlock.asyncio as dla

    c = server.conn()
    blocking = dlock.Locker(server.url)

    async def main():
        locker = dla.Locker(server.url)
        a = await locker.election("leader", id="a", ttl=3).campaign(0)
        tp, p = campaign_in_thread(blocking, "leader", "p")
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: wait_until(STEP, "p queued", lambda: waiters(c, "leader") == 1)
        )
        assert await a.hand_over("nobody") is False
        with pytest.raises(dlock.InvalidRequest):
            await a.hand_over("x/y")
        assert await a.hand_over("p") is True
        assert a.lost
        await asyncio.get_running_loop().run_in_executor(None, tp.join, STEP)
        assert p["lead"].term > a.term
        p["lead"].resign()
        # A lead that prefers q hands over once q campaigns.
        lead = await locker.election("leader", id="c", ttl=3, prefer="q").campaign(0)
        tq, q = campaign_in_thread(blocking, "leader", "q")
        assert await lead.lease.wait_lost(STEP), "the lead went to q"
        await asyncio.get_running_loop().run_in_executor(None, tq.join, STEP)
        assert q["lead"].term > lead.term
        q["lead"].resign()

    asyncio.run(asyncio.wait_for(main(), 60))


def first_handover_only():
    """A proxy filter that selects the first ``DLOCK.RELEASE ... TO`` only."""
    seen = []

    def select(args):
        if len(args) > 3 and args[0].upper() == b"DLOCK.RELEASE" and args[3].upper() == b"TO" and not seen:
            seen.append(args)
            return True
        return False

    return select


def test_a_handover_whose_reply_is_lost_is_sent_again_and_ends_the_lead(server, make_proxy):
    # The handover runs on the server but its reply never arrives: sent
    # again, it finds the lead handed over already (0), so the leader
    # knows its lead ended instead of believing it still leads.
    c = server.conn()
    proxy = make_proxy(server.port, 1, 1000, first_handover_only())
    a = dlock.Locker(proxy.url).election("leader", id="a", ttl=10).campaign(0)
    tp, p = campaign_in_thread(dlock.Locker(server.url), "leader", "p")
    wait_until(STEP, "p queued", lambda: waiters(c, "leader") == 1)
    assert a.hand_over("p") is False
    assert len(proxy.dropped_named("DLOCK.RELEASE")) == 1
    assert a.lost
    tp.join(STEP)
    assert p["lead"].term > a.term
    p["lead"].resign()


def test_asyncio_a_handover_whose_reply_is_lost_is_sent_again(server, make_proxy):
    import asyncio

    import dlock.asyncio as dla

    c = server.conn()
    proxy = make_proxy(server.port, 1, 1000, first_handover_only())
    tp, p = None, None

    async def main():
        nonlocal tp, p
        a = await dla.Locker(proxy.url).election("leader", id="a", ttl=10).campaign(0)
        tp, p = campaign_in_thread(dlock.Locker(server.url), "leader", "p")
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: wait_until(STEP, "p queued", lambda: waiters(c, "leader") == 1)
        )
        assert await a.hand_over("p") is False
        assert a.lost
        await a.resign()

    asyncio.run(main())
    assert len(proxy.dropped_named("DLOCK.RELEASE")) == 1
    tp.join(STEP)
    assert p["lead"].term > 0
    p["lead"].resign()
