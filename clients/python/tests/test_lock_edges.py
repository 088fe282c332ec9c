"""A Lock's edges, blocking and asyncio alike: a ``with`` block left on
another thread, task or event loop releases the right lease (and leaving
with no block open raises NotOwned); an interrupt between the grant and
its caller leaves no hold that nobody owns; an ``extend`` whose budget
passes while the server is paused answers "lost", not Unavailable."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla
from harness import holder


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def _locker(server, **kw) -> dlock.Locker:
    return dlock.Locker(redis.Redis(port=server.port), **kw)


def _alocker(server, **kw) -> dla.Locker:
    return dla.Locker(redis.asyncio.Redis(port=server.port), **kw)


# --- leaving on another thread, task or loop ------------------------------------


def test_exit_stack_entered_on_a_pool_thread_closed_on_this_one(server):
    c = server.conn()
    lk = _locker(server).lock("y", ttl=30)
    with ThreadPoolExecutor(1) as pool:
        stack = contextlib.ExitStack()
        lease = pool.submit(stack.enter_context, lk).result(30)
        assert holder(c, "y") == (lease.token, lease.fence)
        stack.close()
        assert lease.released and not lease.lost
        assert holder(c, "y") is None
        assert pool.submit(lk.owned).result(30) is False
        with pytest.raises(dlock.NotOwned):
            pool.submit(lk.release).result(30)


def test_exit_stack_entered_here_closed_on_a_pool_thread(server):
    c = server.conn()
    lk = _locker(server).lock("y", ttl=30)
    stack = contextlib.ExitStack()
    lease = stack.enter_context(lk)
    with ThreadPoolExecutor(1) as pool:
        pool.submit(stack.close).result(30)
    assert lease.released and holder(c, "y") is None
    assert not lk.owned()


def test_blocks_left_elsewhere_go_most_recent_first(server):
    c = server.conn()
    lk = _locker(server).lock("y", ttl=30, limit=2)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(lk.__enter__).result(30)
        second = pool.submit(lk.__enter__).result(30)
        lk.__exit__(None, None, None)
        assert second.released and not first.released
        lk.__exit__(None, None, None)
        assert first.released
    assert c.execute_command("DLOCK.INFO", "y") is None


def test_leaving_with_no_block_open_raises_not_owned(server):
    lk = _locker(server).lock("y", ttl=30)
    with pytest.raises(dlock.NotOwned):
        lk.__exit__(None, None, None)
    with lk:
        pass
    with pytest.raises(dlock.NotOwned):
        lk.__exit__(None, None, None)


def test_async_exit_stack_closed_in_another_task(server):
    c = server.conn()

    async def main():
        lk = _alocker(server).lock("x", ttl=30)
        stack = contextlib.AsyncExitStack()
        gate = asyncio.Event()
        entered: "asyncio.Future[dla.Lease]" = asyncio.get_running_loop().create_future()

        async def setup():
            entered.set_result(await stack.enter_async_context(lk))
            await gate.wait()

        t = asyncio.ensure_future(setup())
        lease = await asyncio.wait_for(entered, 30)
        assert holder(c, "x") == (lease.token, lease.fence)
        await stack.aclose()
        assert lease.released and holder(c, "x") is None
        gate.set()
        await asyncio.wait_for(t, 30)
        with pytest.raises(dlock.NotOwned):
            await lk.release()

    run(main())


def test_async_with_entered_on_one_loop_left_on_another(server):
    c = server.conn()
    lk = _alocker(server).lock("x", ttl=30)
    lease = run(lk.__aenter__())
    assert holder(c, "x") == (lease.token, lease.fence)
    run(lk.__aexit__(None, None, None))
    assert lease.released and holder(c, "x") is None


def test_async_leaving_with_no_block_open_raises_not_owned(server):
    async def main():
        lk = _alocker(server).lock("x", ttl=30)
        with pytest.raises(dlock.NotOwned):
            await lk.__aexit__(None, None, None)
        async with lk:
            pass
        with pytest.raises(dlock.NotOwned):
            await lk.__aexit__(None, None, None)

    run(main())


# --- an interrupt between the grant and its caller --------------------------------


class _Alarm(BaseException):
    """Like KeyboardInterrupt, not an Exception: what a signal raises."""


def _raise_alarm(*_):
    raise _Alarm()


def _settle() -> None:
    """A Python call and a loop: where the handler of a signal delivered
    before the timer was disarmed runs (Python runs handlers at such
    points, not at once)."""
    for _ in range(2):
        pass


def _disarm() -> None:
    # The alarm may go off in the disarming call itself, or have gone off
    # just before it with its handler still to run: both inside the try.
    while True:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _settle()
            return
        except _Alarm:
            pass


def test_an_interrupt_at_any_instant_leaves_no_hold_nobody_owns(server):
    c = server.conn()
    lk = _locker(server).lock("u", ttl=30, wait=5)
    old = signal.signal(signal.SIGALRM, _raise_alarm)
    interrupted = 0
    rng = random.Random(40)
    try:
        for i in range(400):
            lease = None
            try:
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0001, 0.002))
                lease = lk.acquire()
                signal.setitimer(signal.ITIMER_REAL, 0)
            except _Alarm:
                interrupted += 1
            _disarm()
            if lease is not None:
                assert lease.release()
            elif lk.owned():  # it reached the Lock's record, not the caller
                assert lk.release()
            assert holder(c, "u") is None, f"a hold nobody owns after iteration {i}"
    finally:
        _disarm()
        signal.signal(signal.SIGALRM, old)
    assert interrupted > 0, "no interrupt landed in an acquire"


def test_an_interrupt_at_any_instant_leaves_no_hold_nobody_owns_asyncio(server):
    c = server.conn()

    async def main():
        lk = _alocker(server).lock("u", ttl=30, wait=5)
        me = asyncio.current_task()

        def alarm(*_):
            # Only into this task's own code: an exception in the event
            # loop's machinery would end the loop, not an acquire.
            if asyncio.current_task() is me:
                raise _Alarm()

        old = signal.signal(signal.SIGALRM, alarm)
        interrupted = 0
        rng = random.Random(40)
        try:
            for i in range(400):
                lease = None
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0001, 0.002))
                    lease = await lk.acquire()
                    signal.setitimer(signal.ITIMER_REAL, 0)
                except _Alarm:
                    interrupted += 1
                _disarm()
                if lease is not None:
                    assert await lease.release()
                elif lk.owned():
                    assert await lk.release()
                # A grant given back is released in the background: its
                # RELEASE is on its way (deadline: 10 s).
                end = time.monotonic() + 10
                while holder(c, "u") is not None and time.monotonic() < end:
                    await asyncio.sleep(0.005)
                assert holder(c, "u") is None, f"a hold nobody owns after iteration {i}"
        finally:
            _disarm()
            signal.signal(signal.SIGALRM, old)
        assert interrupted > 0, "no interrupt landed in an acquire"

    run(main())


# --- an extend whose budget passes on a paused server ----------------------------


def test_extend_whose_budget_passes_on_a_paused_server_is_lost(server):
    lk = _locker(server, io_timeout=10, retry_for=10).lock("e", ttl=0.5, watchdog=False)
    lease = lk.acquire()
    assert lease
    server.stop()
    try:
        t = time.monotonic()
        with pytest.raises(dlock.LockLost):
            lk.extend(5)
        assert lease.lost
        # Generous: a stuck EXTEND would take the 10 s io timeout.
        assert time.monotonic() - t < 8
        second = _locker(server, io_timeout=10, retry_for=10).lock("f", ttl=0.5, watchdog=False)
        server.cont()
        other = second.acquire()
        assert other
        server.stop()
        assert other.extend(5) is False and other.lost
    finally:
        server.cont()


def test_extend_whose_budget_passes_on_a_paused_server_is_lost_asyncio(server):
    async def main():
        lk = _alocker(server, io_timeout=10, retry_for=10).lock("e", ttl=0.5, watchdog=False)
        lease = await lk.acquire()
        assert lease
        server.stop()
        try:
            t = time.monotonic()
            with pytest.raises(dlock.LockLost):
                await lk.extend(5)
            assert lease.lost
            assert time.monotonic() - t < 8
            server.cont()
            other = await _alocker(server, io_timeout=10, retry_for=10).lock("f", ttl=0.5, watchdog=False).acquire()
            assert other
            server.stop()
            assert await other.extend(5) is False and other.lost
        finally:
            server.cont()

    run(main())


# --- a Lock made with a token, shared -------------------------------------------


def test_a_given_token_is_one_acquisition_not_shared_between_threads(server):
    """Acquiring with a token the caller gave is idempotent on the server
    (a retry of that acquisition gets the same hold), so a Lock with
    ``token=`` shared by two threads must not hand the one hold to both."""
    c = server.conn()
    lk = _locker(server).lock("given", ttl=30, token="given-token-1", watchdog=False)
    first = lk.acquire(blocking=False)
    assert first is not None
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(dlock.InvalidRequest, match="given token"):
            pool.submit(lk.acquire, False).result(10)
    with pytest.raises(dlock.InvalidRequest):
        lk.acquire(False)
    assert holder(c, "given") == ("given-token-1", first.fence)
    assert first.release()
    again = lk.acquire(blocking=False)  # released: the token is free again
    assert again is not None and again.release()


def test_a_given_token_is_one_acquisition_not_shared_between_tasks(server):
    async def main() -> None:
        lk = _alocker(server).lock("given-a", ttl=30, token="given-token-2", watchdog=False)
        first = await lk.acquire(blocking=False)
        assert first is not None

        async def other() -> None:
            await lk.acquire(blocking=False)

        with pytest.raises(dlock.InvalidRequest, match="given token"):
            await asyncio.wait_for(asyncio.create_task(other()), 10)
        assert await first.release()
        again = await lk.acquire(blocking=False)
        assert again is not None and await again.release()

    run(main())
