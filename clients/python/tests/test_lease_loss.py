"""A lease's loss and the end of its ``with`` block, blocking and asyncio
alike: the loss is told when the budget passes even while a renewal is
stuck on a paused server; leaving the block of a lease known lost raises
LockLost at once; an early release is not released twice; a forked child
never releases or renews its parent's lease; the block's own exception is
never replaced by a release error; and leaving does not wait for a renewal
that is out."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla
from harness import calls, holder


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def _locker(server, **kw) -> dlock.Locker:
    return dlock.Locker(redis.Redis(port=server.port), **kw)


def _alocker(server, **kw) -> dla.Locker:
    return dla.Locker(redis.asyncio.Redis(port=server.port), **kw)


# --- the loss is told when the budget passes ----------------------------------
#
# A paused server and a 10 s io timeout: the renewal sent at a third of the
# ttl is stuck for 10 s. The loss must be told when the 1 s budget passes
# (allowed: 2 s late), not when the renewal gives up.


def test_loss_is_told_at_the_budget_while_a_renewal_is_stuck(server):
    lk = _locker(server, io_timeout=10, retry_for=10)
    told = []
    with pytest.raises(dlock.LockLost):
        with lk.lock("res", ttl=1.0, on_lost=lambda lease: told.append(time.monotonic())) as lease:
            server.stop()
            try:
                assert lease.lost_event.wait(max(lease.deadline + 2.0 - time.monotonic(), 0)), "told by budget + 2 s"
                assert told and told[0] <= lease.deadline + 2.0 and lease.lost
                assert lease.wait_lost(0)
            finally:
                server.cont()


def test_loss_is_told_at_the_budget_while_a_renewal_is_stuck_asyncio(server):
    async def main():
        lk = _alocker(server, io_timeout=10, retry_for=10)
        told = []
        with pytest.raises(dlock.LockLost):
            async with lk.lock("res", ttl=1.0, on_lost=lambda lease: told.append(time.monotonic())) as lease:
                server.stop()
                try:
                    left = max(lease.deadline + 2.0 - time.monotonic(), 0)
                    await asyncio.wait_for(lease.lost_event.wait(), left)
                    assert told and told[0] <= lease.deadline + 2.0 and lease.lost
                    assert await lease.wait_lost(0)
                finally:
                    server.cont()

    run(main())


# --- leaving the block of a lease known lost, the server down -----------------


def test_leaving_a_lost_lease_with_the_server_down_raises_lock_lost_at_once(server):
    lk = _locker(server, retry_for=10)
    with pytest.raises(dlock.LockLost):
        with lk.lock("res", ttl=0.5) as lease:
            server.kill9()
            assert lease.wait_lost(5)
            left = time.monotonic()
    # Not after retrying a RELEASE for retry_for (10 s): the lease is lost
    # whatever the server says.
    assert time.monotonic() - left < 5.0


def test_leaving_a_lost_lease_with_the_server_down_raises_lock_lost_at_once_asyncio(server):
    async def main():
        lk = _alocker(server, retry_for=10)
        with pytest.raises(dlock.LockLost):
            async with lk.lock("res", ttl=0.5) as lease:
                server.kill9()
                assert await lease.wait_lost(5)
                left = time.monotonic()
        assert time.monotonic() - left < 5.0

    run(main())


# --- releasing early inside the block ------------------------------------------


def test_an_early_release_is_not_repeated_nor_a_loss(server):
    c = server.conn()
    lk = _locker(server)
    with lk.lock("res", ttl=30) as lease:
        assert lease.release() is True
        assert holder(c, "res") is None
    assert calls(c, "dlock.release") == 1, "no second RELEASE"
    assert not lease.lost
    # An early release that found the lease lost: the block ran without the
    # lock, and leaving says so.
    with pytest.raises(dlock.LockLost):
        with lk.lock("res2", ttl=30) as lease:
            c.delete("res2")
            assert lease.release() is False
    assert calls(c, "dlock.release") == 2


def test_an_early_release_is_not_repeated_nor_a_loss_asyncio(server):
    c = server.conn()

    async def main():
        lk = _alocker(server)
        async with lk.lock("res", ttl=30) as lease:
            assert await lease.release() is True
            assert holder(c, "res") is None
        assert calls(c, "dlock.release") == 1, "no second RELEASE"
        assert not lease.lost
        with pytest.raises(dlock.LockLost):
            async with lk.lock("res2", ttl=30) as lease:
                c.delete("res2")
                assert await lease.release() is False
        assert calls(c, "dlock.release") == 2

    run(main())


# --- a forked child ---------------------------------------------------------------
#
# The child leaves the parent's block by sys.exit(): it must send nothing
# (the parent is still in its critical section), and its release() and
# extend() refuse. It reports through its exit status: 0 all as expected,
# 4 release() did not refuse, 5 extend() did not refuse, 3 leaving the
# block raised something of its own.


def _wait_child(pid: int, deadline: float = 30.0) -> int:
    end = time.monotonic() + deadline
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= end:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"the child did not end within {deadline} s")
        time.sleep(0.02)


def _child_exit(e: BaseException) -> None:
    os._exit(0 if isinstance(e, SystemExit) and e.code == 0 else 3)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_never_releases_nor_renews_its_parents_lease(server):
    c = server.conn()
    lk = _locker(server)
    parent = os.getpid()
    try:
        with lk.lock("res", ttl=30) as lease:
            pid = os.fork()
            if pid == 0:
                for code, act in ((4, lease.release), (5, lease.extend)):
                    try:
                        act()
                        os._exit(code)
                    except dlock.InvalidRequest as e:
                        if "parent process" not in str(e):
                            os._exit(code)
                sys.exit(0)
            assert _wait_child(pid) == 0
            assert holder(c, "res") == (lease.token, lease.fence), "still the parent's"
            assert calls(c, "dlock.release") == 0
    except BaseException as e:
        if os.getpid() != parent:
            _child_exit(e)
        raise
    assert holder(c, "res") is None and calls(c, "dlock.release") == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_never_releases_nor_renews_its_parents_lease_asyncio(server):
    c = server.conn()
    parent = os.getpid()

    async def main():
        lk = _alocker(server)
        # The lease's own block: asyncio has no running loop in a forked
        # child (asyncio.current_task() raises there), so the child must
        # leave without asking the loop anything.
        lease = await lk.lock("res", ttl=30).acquire()
        try:
            async with lease:
                pid = os.fork()
                if pid == 0:
                    for code, act in ((4, lease.release), (5, lease.extend)):
                        try:
                            await act()
                            os._exit(code)
                        except dlock.InvalidRequest as e:
                            if "parent process" not in str(e):
                                os._exit(code)
                    sys.exit(0)
                end = time.monotonic() + 30
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        break
                    assert time.monotonic() < end, "the child did not end"
                    await asyncio.sleep(0.02)
                assert os.waitstatus_to_exitcode(status) == 0
                assert holder(c, "res") == (lease.token, lease.fence), "still the parent's"
                assert calls(c, "dlock.release") == 0
        except BaseException as e:
            if os.getpid() != parent:
                _child_exit(e)  # never the child's event loop's teardown
            raise
        assert holder(c, "res") is None and calls(c, "dlock.release") == 1

    run(main())


# --- the block's exception is never replaced ----------------------------------------


def _noted(e: BaseException) -> bool:
    if sys.version_info < (3, 11):
        return True
    return any("releasing" in n for n in getattr(e, "__notes__", []))


def test_the_blocks_exception_is_never_replaced_by_a_release_error(server, caplog):
    lk = _locker(server, retry_for=0.3)
    with caplog.at_level(logging.WARNING, logger="dlock"):
        with pytest.raises(KeyError) as raised:
            with lk.lock("res", ttl=30):
                server.kill9()
                raise KeyError("mine")
    assert raised.value.args == ("mine",) and _noted(raised.value)
    assert any(r.name == "dlock" and "releasing" in r.getMessage() for r in caplog.records)


def test_the_blocks_exception_is_never_replaced_by_a_release_error_asyncio(server, caplog):
    async def main():
        lk = _alocker(server, retry_for=0.3)
        with pytest.raises(KeyError) as raised:
            async with lk.lock("res", ttl=30):
                server.kill9()
                raise KeyError("mine")
        return raised.value

    with caplog.at_level(logging.WARNING, logger="dlock"):
        e = run(main())
    assert e.args == ("mine",) and _noted(e)
    assert any(r.name == "dlock" and "releasing" in r.getMessage() for r in caplog.records)


# --- repr, and no loss after a clean release ------------------------------------


def _after(t: float) -> None:
    while time.monotonic() <= t:
        time.sleep(0.02)


def test_no_token_in_repr_and_no_loss_after_a_clean_release(server):
    lk = _locker(server)
    lease = lk.lock("res", ttl=0.2).acquire()
    assert lease is not None and lease.token not in repr(lease)
    assert lease.release()
    assert lease.extend() is False and calls(server.conn(), "dlock.extend") == 0, "released: nothing asked"
    _after(lease.deadline + 0.05)
    assert not lease.lost and not lease.lost_event.is_set() and not lease.wait_lost(0)


def test_no_token_in_repr_and_no_loss_after_a_clean_release_asyncio(server):
    async def main():
        lk = _alocker(server)
        lease = await lk.lock("res", ttl=0.2).acquire()
        assert lease is not None and lease.token not in repr(lease)
        assert await lease.release()
        assert await lease.extend() is False and calls(server.conn(), "dlock.extend") == 0
        while time.monotonic() <= lease.deadline + 0.05:
            await asyncio.sleep(0.02)
        assert not lease.lost and not lease.lost_event.is_set() and not await lease.wait_lost(0)

    run(main())


# --- leaving does not wait for a renewal that is out ------------------------------
#
# Paused server, io timeout and retry_for 4 s, ttl 3 s: the renewal sent at
# 1 s is out until 5 s. Leaving at 1.3 s sends its RELEASE at once (one
# attempt of 4 s); waiting for the renewal first took 3.7 s more.


def test_leaving_does_not_wait_for_a_renewal_that_is_out(server):
    lk = _locker(server, io_timeout=4, retry_for=4)
    try:
        with pytest.raises(dlock.DlockError):
            with lk.lock("res", ttl=3) as lease:
                server.stop()
                _after(lease.deadline - 3 + 1.3)
                left = time.monotonic()
        assert time.monotonic() - left < 6.0, "about one io timeout"
    finally:
        server.cont()


def test_leaving_does_not_wait_for_a_renewal_that_is_out_asyncio(server):
    async def main():
        lk = _alocker(server, io_timeout=4, retry_for=4)
        with pytest.raises(dlock.DlockError):
            async with lk.lock("res", ttl=3) as lease:
                server.stop()
                while time.monotonic() <= lease.deadline - 3 + 1.3:
                    await asyncio.sleep(0.02)
                left = time.monotonic()
        assert time.monotonic() - left < 6.0, "about one io timeout"

    try:
        run(main())
    finally:
        server.cont()
