"""Leader election against a real server, blocking and asyncio alike:
candidates lead in turn with rising terms, observers see now and each
change (a handover that must wait too), a leadership taken away is lost,
and a cancelled asyncio campaign leaves no waiter. The edges are in
test_election_edges.py. Every wait has a deadline."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import dlock
import dlock.asyncio as dla
from harness import holder, wait_until, waiters

#: The longest any single step may take on a loaded machine.
STEP = 10.0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _until(deadline: float, what: str, f) -> None:
    end = time.monotonic() + deadline
    while not f():
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline} s waiting for {what}")
        await asyncio.sleep(0.02)


# --- taking turns -----------------------------------------------------------------


def test_the_next_candidate_leads_when_the_first_resigns_with_a_higher_term(server):
    c = server.conn()
    locker = dlock.Locker(server.url)
    first = locker.election("sched", id="w1", ttl=5).campaign(wait=0)
    assert first is not None and not first.lost
    assert first.token.startswith("w1/") and holder(c, "sched") == (first.token, first.term)
    second = locker.election("sched", id="w2", ttl=5)
    assert second.campaign(wait=0) is None and second.campaign(wait=0.05) is None
    got = []
    t = threading.Thread(target=lambda: got.append(second.campaign(wait=STEP * 3)))
    t.start()
    wait_until(STEP, "the second candidate queued", lambda: waiters(c, "sched") == 1)
    assert first.resign() is True and first.resign() is False
    t.join(STEP * 3)
    assert not t.is_alive() and got[0] is not None
    lead = got[0]
    assert lead.term > first.term and lead.token.startswith("w2/")
    assert holder(c, "sched") == (lead.token, lead.term)
    # Leaving the block resigns; a resign inside it leaves nothing to do.
    with lead:
        pass
    assert holder(c, "sched") is None and lead.resigned
    with second.campaign() as again:
        assert again.resign() is True
    assert holder(c, "sched") is None


def test_async_the_next_candidate_leads_when_the_first_resigns_with_a_higher_term(server):
    c = server.conn()

    async def main():
        locker = dla.Locker(server.url)
        first = await locker.election("sched", id="w1", ttl=5).campaign(wait=0)
        assert first is not None and first.token.startswith("w1/")
        assert holder(c, "sched") == (first.token, first.term)
        second = locker.election("sched", id="w2", ttl=5)
        assert await second.campaign(wait=0) is None and await second.campaign(wait=0.05) is None
        task = asyncio.ensure_future(second.campaign(wait=STEP * 3))
        await _until(STEP, "the second candidate queued", lambda: waiters(c, "sched") == 1)
        assert await first.resign() is True and await first.resign() is False
        lead = await asyncio.wait_for(task, STEP * 3)
        assert lead is not None and lead.term > first.term and lead.token.startswith("w2/")
        assert holder(c, "sched") == (lead.token, lead.term)
        async with lead:
            pass
        assert holder(c, "sched") is None and lead.resigned
        async with second.campaign() as again:
            assert holder(c, "sched") == (again.token, again.term)
            assert await again.resign() is True
        assert holder(c, "sched") is None
        # Entering a campaign that runs out raises NotAcquired.
        held = await locker.election("sched").campaign()
        with pytest.raises(dlock.NotAcquired):
            async with second.campaign(wait=0):
                pass
        await held.resign()

    run(main())


def test_three_candidates_take_turns_and_an_observer_sees_each_with_rising_terms(server):
    locker = dlock.Locker(server.url)
    seen, errors = [], []
    seen_changed = threading.Condition()
    stop = threading.Event()

    def observer():
        try:
            changes = locker.election("turns").observe()
            while not stop.is_set():
                state = changes.next_leader(0.2)
                if isinstance(state, dlock.Leads):
                    with seen_changed:
                        seen.append(state)
                        seen_changed.notify_all()
        except BaseException as e:
            errors.append(e)

    def candidate(i):
        try:
            election = locker.election("turns", id=f"c{i}", ttl=10)
            for _ in range(3):
                lead = election.campaign(wait=STEP * 3)
                assert lead is not None and not lead.lost
                # Leads until the observer has seen it: every leader shown.
                with seen_changed:
                    assert seen_changed.wait_for(lambda: any(s.term == lead.term for s in seen), STEP)
                assert lead.resign()
        except BaseException as e:
            errors.append(e)

    watcher = threading.Thread(target=observer)
    watcher.start()
    threads = [threading.Thread(target=candidate, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(STEP * 6)
    stop.set()
    watcher.join(STEP)
    assert not errors, errors
    assert not watcher.is_alive() and not any(t.is_alive() for t in threads)
    terms = [s.term for s in seen]
    assert len(seen) == 9 and terms == sorted(set(terms)), seen
    assert sorted(s.id for s in seen) == ["c0"] * 3 + ["c1"] * 3 + ["c2"] * 3


def test_async_three_candidates_take_turns_and_an_observer_sees_each_with_rising_terms(server):
    async def main():
        locker = dla.Locker(server.url)
        seen = []
        stop = asyncio.Event()

        async def observer():
            changes = locker.election("turns").observe()
            while not stop.is_set():
                state = await changes.next_leader(0.2)
                if isinstance(state, dla.Leads):
                    seen.append(state)

        async def candidate(i):
            election = locker.election("turns", id=f"c{i}", ttl=10)
            for _ in range(3):
                lead = await election.campaign(wait=STEP * 3)
                assert lead is not None and not lead.lost
                await _until(STEP, "the observer seeing the leader", lambda: any(s.term == lead.term for s in seen))
                assert await lead.resign()

        watcher = asyncio.ensure_future(observer())
        await asyncio.wait_for(asyncio.gather(*(candidate(i) for i in range(3))), STEP * 6)
        stop.set()
        await asyncio.wait_for(watcher, STEP)
        terms = [s.term for s in seen]
        assert len(seen) == 9 and terms == sorted(set(terms)), seen
        assert sorted(s.id for s in seen) == ["c0"] * 3 + ["c1"] * 3 + ["c2"] * 3

    run(main())


# --- observing -------------------------------------------------------------------


def test_observe_sees_now_and_each_change(server):
    locker = dlock.Locker(server.url)
    election = locker.election("obs", id="w1", ttl=5)
    assert election.leader() == dlock.Nobody()
    changes = election.observe()
    assert changes.next_leader(STEP) == dlock.Nobody()
    assert changes.next_leader(0.05) is None  # nothing changed
    first = election.campaign(wait=0)
    assert first is not None
    seen = changes.next_leader(STEP)
    assert seen == dlock.Leads("w1", first.term, first.token)
    assert election.leader() == seen
    # A change while the observer is waiting wakes it.
    later = []
    t = threading.Thread(target=lambda: later.append(changes.next_leader(STEP)))
    t.start()
    wait_until(STEP, "the observer waiting", lambda: server.conn().info("dlock").get("dlock_observers") == 1)
    assert first.resign()
    t.join(STEP)
    assert later == [dlock.Nobody()]
    # Without an id, observers see the token; a new leader, a new term.
    second = locker.election("obs").campaign(wait=0)
    assert second is not None and "/" not in second.token
    assert changes.next_leader(STEP) == dlock.Leads(second.token, second.term, second.token)
    assert second.term > first.term
    # Iterating gives the same states.
    it = iter(locker.election("obs").observe())
    assert next(it) == dlock.Leads(second.token, second.term, second.token)
    second.resign()
    assert next(it) == dlock.Nobody()


def test_async_observe_sees_now_and_each_change(server):
    async def main():
        locker = dla.Locker(server.url)
        election = locker.election("obs", id="w1", ttl=5)
        assert await election.leader() == dla.Nobody()
        changes = election.observe()
        assert await changes.next_leader(STEP) == dla.Nobody()
        assert await changes.next_leader(0.05) is None
        first = await election.campaign(wait=0)
        assert first is not None
        seen = await changes.next_leader(STEP)
        assert seen == dla.Leads("w1", first.term, first.token)
        assert await election.leader() == seen
        waiting = asyncio.ensure_future(changes.next_leader(STEP))
        await _until(STEP, "the observer waiting", lambda: server.conn().info("dlock").get("dlock_observers") == 1)
        assert await first.resign()
        assert await asyncio.wait_for(waiting, STEP) == dla.Nobody()
        second = await locker.election("obs").campaign(wait=0)
        assert second is not None and "/" not in second.token
        assert await changes.next_leader(STEP) == dla.Leads(second.token, second.term, second.token)
        assert second.term > first.term
        it = locker.election("obs").observe().__aiter__()
        assert await asyncio.wait_for(it.__anext__(), STEP) == dla.Leads(second.token, second.term, second.token)
        await second.resign()
        assert await asyncio.wait_for(it.__anext__(), STEP) == dla.Nobody()
        # A cancelled observer leaves nothing waiting on the server.
        assert await changes.next_leader(STEP) == dla.Nobody()
        waiting = asyncio.ensure_future(changes.next_leader())
        await _until(STEP, "the observer waiting", lambda: server.conn().info("dlock").get("dlock_observers") == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await _until(STEP, "no observer left", lambda: server.conn().info("dlock").get("dlock_observers") == 0)

    run(main())


def test_a_handover_that_must_wait_is_shown(server):
    c = server.conn()
    locker = dlock.Locker(server.url)
    # A leader's lease that ends while the server holds back writes: the
    # next candidate is owed the lock, which stays reserved for it.
    first = locker.lock("ho", ttl=1, watchdog=False, token="w1/x").acquire(blocking=False)
    changes = locker.election("ho").observe()
    assert first is not None and changes.next_leader(STEP) == dlock.Leads("w1", first.fence, "w1/x")
    got = []
    t = threading.Thread(target=lambda: got.append(locker.election("ho", id="w2").campaign(wait=STEP * 3)))
    t.start()
    wait_until(STEP, "the candidate queued", lambda: waiters(c, "ho") == 1)
    c.execute_command("CLIENT", "PAUSE", 60000, "WRITE")
    try:
        assert changes.next_leader(STEP) == dlock.HandingOver()
    finally:
        c.execute_command("CLIENT", "UNPAUSE")
    t.join(STEP * 3)
    assert got[0] is not None and changes.next_leader(STEP) == dlock.Leads("w2", got[0].term, got[0].token)
    assert got[0].resign()


def test_async_a_handover_that_must_wait_is_shown(server):
    c = server.conn()

    async def main():
        locker = dla.Locker(server.url)
        first = await locker.lock("ho", ttl=1, watchdog=False, token="w1/x").acquire(blocking=False)
        changes = locker.election("ho").observe()
        assert first is not None and await changes.next_leader(STEP) == dla.Leads("w1", first.fence, "w1/x")
        task = asyncio.ensure_future(locker.election("ho", id="w2").campaign(wait=STEP * 3))
        await _until(STEP, "the candidate queued", lambda: waiters(c, "ho") == 1)
        c.execute_command("CLIENT", "PAUSE", 60000, "WRITE")
        try:
            assert await changes.next_leader(STEP) == dla.HandingOver()
        finally:
            c.execute_command("CLIENT", "UNPAUSE")
        lead = await asyncio.wait_for(task, STEP * 3)
        assert lead is not None and await changes.next_leader(STEP) == dla.Leads("w2", lead.term, lead.token)
        assert await lead.resign()

    run(main())


# --- loss ------------------------------------------------------------------------


def test_a_leadership_taken_away_is_lost(server):
    c = server.conn()
    locker = dlock.Locker(server.url)
    election = locker.election("lost", id="w1", ttl=3)
    lead = election.campaign(wait=0)
    changes = election.observe()
    assert lead is not None and changes.next_leader(STEP) == dlock.Leads("w1", lead.term, lead.token)
    event = lead.lost_event
    assert not lead.lost and not event.is_set()
    c.delete("lost")
    # The watchdog renews at a third of the ttl and learns of it then.
    assert lead.wait_lost(STEP) and lead.lost and event.wait(STEP)
    assert changes.next_leader(STEP) == dlock.Nobody()
    assert lead.resign() is False
    with election.campaign() as again:
        assert again.term > lead.term


def test_async_a_leadership_taken_away_is_lost(server):
    c = server.conn()

    async def main():
        locker = dla.Locker(server.url)
        election = locker.election("lost", id="w1", ttl=3)
        lead = await election.campaign(wait=0)
        changes = election.observe()
        assert lead is not None and await changes.next_leader(STEP) == dla.Leads("w1", lead.term, lead.token)
        event = lead.lost_event
        assert not lead.lost and not event.is_set()
        c.delete("lost")
        assert await lead.wait_lost(STEP) and lead.lost
        await asyncio.wait_for(event.wait(), STEP)
        assert await changes.next_leader(STEP) == dla.Nobody()
        assert await lead.resign() is False

    run(main())


# --- cancellation ----------------------------------------------------------------


def test_async_a_cancelled_campaign_leaves_no_hold_and_no_waiter(server):
    c = server.conn()

    async def main():
        locker = dla.Locker(server.url)
        first = await locker.election("camp", id="w1").campaign(wait=0)
        assert first is not None
        task = asyncio.ensure_future(locker.election("camp", id="w2").campaign())
        await _until(STEP, "the candidate queued", lambda: waiters(c, "camp") == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(STEP, "the waiter gone", lambda: waiters(c, "camp") == 0)
        assert await first.resign()
        # Nobody was handed the leadership.
        assert holder(c, "camp") is None
        assert await locker.election("camp").leader() == dla.Nobody()

    run(main())
