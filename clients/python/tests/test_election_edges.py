"""Leader election at its edges, blocking and asyncio alike: a forked child
never resigns its parent's leadership, several holders name no leader, every reply form (RESP2, RESP3, decoding clients) is
read, an observer gives up after retry_for and resumes after an outage, one
waiting when the server dies retries, leaving a leadership's block on an
exception keeps it, and bad arguments are refused with nothing sent. Every
wait has a deadline."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla
from harness import calls, holder, wait_until

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


# --- leaving on an exception ------------------------------------------------------

def _noted(e: BaseException) -> bool:
    if sys.version_info < (3, 11):
        return True
    return any("resigning failed" in n for n in getattr(e, "__notes__", []))


def test_leaving_on_an_exception_keeps_it_when_resigning_fails(server):
    locker = dlock.Locker(server.url, io_timeout=1)
    election = locker.election("gone", ttl=30, retry_for=0.3)
    with pytest.raises(ValueError, match="the body's") as raised:
        with election.campaign():
            server.kill9()
            raise ValueError("the body's")
    assert _noted(raised.value)
    server.restart()
    # Without an exception of its own, the block raises the resign's.
    with pytest.raises(dlock.Unavailable):
        with election.campaign():
            server.kill9()


def test_async_leaving_on_an_exception_keeps_it_when_resigning_fails(server):
    async def main():
        locker = dla.Locker(server.url, io_timeout=1)
        election = locker.election("gone", ttl=30, retry_for=0.3)
        with pytest.raises(ValueError, match="the body's") as raised:
            async with election.campaign():
                server.kill9()
                raise ValueError("the body's")
        assert _noted(raised.value)
        server.restart()
        with pytest.raises(dlock.Unavailable):
            async with election.campaign():
                server.kill9()

    run(main())


# --- a forked child -----------------------------------------------------------------
#
# The child leaves the parent's block by sys.exit(): it must send nothing
# (the parent still leads) and its resign() refuses. It reports through its
# exit status: 0 all as expected, 4 resign() did not refuse, 3 leaving the
# block raised something of its own.


def _wait_child(pid: int) -> int:
    end = time.monotonic() + STEP * 3
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= end:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the child did not end in time")
        time.sleep(0.02)


def _child_exit(e: BaseException) -> None:
    os._exit(0 if isinstance(e, SystemExit) and e.code == 0 else 3)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_never_resigns_its_parents_leadership(server):
    c = server.conn()
    election = dlock.Locker(server.url).election("fork", id="p")
    parent = os.getpid()
    try:
        with election.campaign() as lead:
            pid = os.fork()
            if pid == 0:
                try:
                    lead.resign()
                    os._exit(4)
                except dlock.InvalidRequest as e:
                    if "parent process" not in str(e):
                        os._exit(4)
                sys.exit(0)
            assert _wait_child(pid) == 0
            assert holder(c, "fork") == (lead.token, lead.term), "still the parent's"
            assert calls(c, "dlock.release") == 0
    except BaseException as e:
        if os.getpid() != parent:
            _child_exit(e)
        raise
    assert holder(c, "fork") is None and calls(c, "dlock.release") == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_async_a_forked_child_never_resigns_its_parents_leadership(server):
    c = server.conn()
    parent = os.getpid()

    async def main():
        election = dla.Locker(server.url).election("fork", id="p")
        try:
            async with election.campaign() as lead:
                pid = os.fork()
                if pid == 0:
                    try:
                        await lead.resign()
                        os._exit(4)
                    except dlock.InvalidRequest as e:
                        if "parent process" not in str(e):
                            os._exit(4)
                    sys.exit(0)
                end = time.monotonic() + STEP * 3
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        break
                    assert time.monotonic() < end, "the child did not end in time"
                    await asyncio.sleep(0.02)
                assert os.waitstatus_to_exitcode(status) == 0
                assert holder(c, "fork") == (lead.token, lead.term), "still the parent's"
                assert calls(c, "dlock.release") == 0
        except BaseException as e:
            if os.getpid() != parent:
                _child_exit(e)  # never the child's event loop's teardown
            raise
        assert holder(c, "fork") is None and calls(c, "dlock.release") == 1

    run(main())


# --- several holders ----------------------------------------------------------


def test_several_holders_name_no_leader(server):
    locker = dlock.Locker(server.url)
    r1 = locker.read_lock("cfg").acquire(blocking=False)
    r2 = locker.read_lock("cfg").acquire(blocking=False)
    assert r1 and r2
    election = locker.election("cfg")
    with pytest.raises(dlock.ServerError, match=r"no leader: 2 holders share the resource \(a rwlock\)"):
        election.leader()
    changes = election.observe()
    with pytest.raises(dlock.ServerError, match="no leader"):
        changes.next_leader(STEP)
    # The next call waits for the holders to change: one reader left leads.
    assert changes.next_leader(0.05) is None
    assert r2.release()
    assert changes.next_leader(STEP) == dlock.Leads(r1.token, r1.fence, r1.token)
    r1.release()
    # A semaphore held once shows its holder; twice, no leader.
    p1 = locker.semaphore("gpu", 3).acquire(blocking=False)
    assert p1 and locker.election("gpu").leader() == dlock.Leads(p1.token, p1.fence, p1.token)
    p2 = locker.semaphore("gpu", 3).acquire(blocking=False)
    with pytest.raises(dlock.ServerError, match=r"2 holders share the resource \(a semaphore\)"):
        locker.election("gpu").leader()
    p1.release(), p2.release()


def test_async_several_holders_name_no_leader(server):
    async def main():
        locker = dla.Locker(server.url)
        r1 = await locker.read_lock("cfg").acquire(blocking=False)
        r2 = await locker.read_lock("cfg").acquire(blocking=False)
        assert r1 and r2
        election = locker.election("cfg")
        with pytest.raises(dlock.ServerError, match=r"no leader: 2 holders share the resource \(a rwlock\)"):
            await election.leader()
        changes = election.observe()
        with pytest.raises(dlock.ServerError, match="no leader"):
            await changes.next_leader(STEP)
        assert await changes.next_leader(0.05) is None
        assert await r2.release()
        assert await changes.next_leader(STEP) == dla.Leads(r1.token, r1.fence, r1.token)
        await r1.release()

    run(main())


CLIENTS = [{}, {"protocol": 3}, {"decode_responses": True}, {"protocol": 3, "decode_responses": True}]


@pytest.mark.parametrize("kw", CLIENTS, ids=["resp2", "resp3", "decoded", "resp3-decoded"])
def test_every_reply_form_is_read(server, kw):
    locker = dlock.Locker(redis.Redis(port=server.port, **kw))
    election = locker.election("forms", id="w")
    with election.campaign(wait=0) as lead:
        assert election.leader() == dlock.Leads("w", lead.term, lead.token)
    r1 = locker.read_lock("forms").acquire(blocking=False)
    r2 = locker.read_lock("forms").acquire(blocking=False)
    with pytest.raises(dlock.ServerError, match=r"2 holders share the resource \(a rwlock\)"):
        election.leader()
    r2.release()
    assert election.leader() == dlock.Leads(r1.token, r1.fence, r1.token)
    r1.release()

    async def main():
        alocker = dla.Locker(redis.asyncio.Redis(port=server.port, **kw))
        election = alocker.election("forms", id="w")
        async with election.campaign(wait=0) as lead:
            assert await election.leader() == dla.Leads("w", lead.term, lead.token)
        assert await election.leader() == dla.Nobody()

    run(main())


# --- outages ---------------------------------------------------------------------


def test_an_observer_resumes_after_an_outage(server):
    locker = dlock.Locker(server.url, io_timeout=1)
    election = locker.election("res", id="w1", ttl=30, retry_for=0.3)
    lead = election.campaign(wait=0)
    changes = election.observe()
    assert lead is not None and changes.next_leader(STEP) == dlock.Leads("w1", lead.term, lead.token)
    server.kill9()
    with pytest.raises(dlock.Unavailable):
        changes.next_leader(STEP)
    server.restart()
    # The lock did not survive the restart (no persistence): told at once.
    assert changes.next_leader(STEP) == dlock.Nobody()
    # An observer waiting when the server dies retries (for retry_for) and
    # tells what it finds when the server is back.
    lead = election.campaign(wait=0)
    patient = locker.election("res", retry_for=STEP * 3).observe()
    assert lead is not None and patient.next_leader(STEP) == dlock.Leads("w1", lead.term, lead.token)
    later = []
    t = threading.Thread(target=lambda: later.append(patient.next_leader(STEP * 3)))
    t.start()
    wait_until(STEP, "the observer waiting", lambda: server.conn().info("dlock").get("dlock_observers") == 1)
    server.kill9()
    server.restart()
    t.join(STEP * 3)
    assert later == [dlock.Nobody()]


def test_async_an_observer_resumes_after_an_outage(server):
    async def main():
        locker = dla.Locker(server.url, io_timeout=1)
        election = locker.election("res", id="w1", ttl=30, retry_for=0.3)
        lead = await election.campaign(wait=0)
        changes = election.observe()
        assert lead is not None and await changes.next_leader(STEP) == dla.Leads("w1", lead.term, lead.token)
        server.kill9()
        with pytest.raises(dlock.Unavailable):
            await changes.next_leader(STEP)
        server.restart()
        assert await changes.next_leader(STEP) == dla.Nobody()
        lead = await election.campaign(wait=0)
        patient = locker.election("res", retry_for=STEP * 3).observe()
        assert lead is not None and await patient.next_leader(STEP) == dla.Leads("w1", lead.term, lead.token)
        waiting = asyncio.ensure_future(patient.next_leader(STEP * 3))
        await _until(STEP, "the observer waiting", lambda: server.conn().info("dlock").get("dlock_observers") == 1)
        server.kill9()
        server.restart()
        assert await asyncio.wait_for(waiting, STEP * 3) == dla.Nobody()

    run(main())


# --- refusals ------------------------------------------------------------------


def test_refusals_are_raised_at_once(server, make_server):
    c = server.conn()
    c.set("text", "x")
    locker = dlock.Locker(server.url)
    # Not retried (a retry would ask again within retry_for).
    with pytest.raises(dlock.ServerError, match="^WRONGTYPE"):
        locker.election("text", retry_for=0.5).leader()
    assert calls(c, "dlock.observe") == 1
    with pytest.raises(dlock.ServerError, match="^WRONGTYPE"):
        locker.election("text").campaign(wait=0)
    bare = make_server(module=False)
    with pytest.raises(dlock.ModuleNotLoaded):
        dlock.Locker(bare.url).election("e").observe().next_leader(STEP)

    async def main():
        alocker = dla.Locker(server.url)
        with pytest.raises(dlock.ServerError, match="^WRONGTYPE"):
            await alocker.election("text", retry_for=0.5).leader()
        assert calls(c, "dlock.observe") == 2
        with pytest.raises(dlock.ServerError, match="^WRONGTYPE"):
            await alocker.election("text").campaign(wait=0)
        with pytest.raises(dlock.ModuleNotLoaded):
            await dla.Locker(bare.url).election("e").observe().next_leader(STEP)

    run(main())


# --- bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, kw, what",
    [
        ("e", {"id": "a/b"}, "must not contain '/'"),
        ("e", {"id": ""}, "must not be empty"),
        ("e", {"id": 7}, "is a str"),
        ("e", {"ttl": 0}, "ttl"),
        ("e", {"ttl": -1}, "ttl"),
        ("", {}, "empty"),
        (7, {}, "str or bytes"),
        ("\udcff", {}, "UTF-8"),
        ("e", {"id": "\udcff"}, "UTF-8"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(server, name, kw, what):
    with pytest.raises(dlock.InvalidRequest, match=what):
        dlock.Locker(server.url).election(name, **kw)

    async def main():
        with pytest.raises(dlock.InvalidRequest, match=what):
            dla.Locker(server.url).election(name, **kw)

    run(main())
    assert server.conn().dbsize() == 0
