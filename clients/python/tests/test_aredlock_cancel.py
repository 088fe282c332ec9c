"""The asyncio Redlock cancelled at many instants of an acquire (before its
tasks run, while they connect, while the ``ACQUIRE`` is on its way or
queued, as the answers come in): no cancelled acquire leaves a waiter, a
connection blocked in ``dlock.acquire`` or a hold on any server."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Callable, List

import pytest

import dlock.asyncio as dla
from dlock import _aredlock
from harness import holder, waiters

# Each attempt of these acquires waits 10 s in the servers' queues (a tenth
# of the ttl), so an ACQUIRE a cancellation left running is still queued
# (and its connection blocked) long after the checks below look.
TTL, WAIT = 100, 60


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


@pytest.fixture
def three(make_server):
    return [make_server() for _ in range(3)]


def blocked_clients(server) -> List[str]:
    """The server's connections blocked in a command (CLIENT LIST flag b)."""
    listing = server.conn().execute_command("CLIENT", "LIST")
    if isinstance(listing, bytes):
        listing = listing.decode()
    out = []
    for line in listing.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "b" in fields.get("flags", ""):
            out.append(f"id={fields.get('id')} cmd={fields.get('cmd')} age={fields.get('age')}")
    return out


def quiet(servers, res: str) -> Callable[[], str]:
    """What is still queued or blocked on the servers ('' when nothing)."""

    def look() -> str:
        left = []
        for i, s in enumerate(servers):
            w = waiters(s.conn(), res)
            b = blocked_clients(s)
            if w or b:
                left.append(f"server {i}: {w} waiter(s), blocked: {b}")
        return "; ".join(left)

    return look


async def until_quiet(servers, res: str, deadline: float) -> None:
    """Polls until no server has a waiter or a blocked connection; fails
    with what remains after ``deadline`` seconds."""
    look = quiet(servers, res)
    end = time.monotonic() + deadline
    while True:
        left = look()
        if not left:
            return
        if time.monotonic() >= end:
            raise AssertionError(f"{deadline} s after the cancellations: {left}")
        await asyncio.sleep(0.05)


async def until_free(servers, res: str, deadline: float, when: str) -> None:
    end = time.monotonic() + deadline
    while True:
        held = [holder(s.conn(), res) for s in servers]
        if held == [None] * len(servers):
            return
        if time.monotonic() >= end:
            raise AssertionError(f"{when}: still held {held}")
        await asyncio.sleep(0.05)


async def background_done(deadline: float) -> None:
    end = time.monotonic() + deadline
    while _aredlock._background:
        assert time.monotonic() < end, "the cancelled acquires' RELEASEs still running"
        await asyncio.sleep(0.02)


async def cancel_after_steps(rl, res: str, steps: int) -> None:
    """An acquire cancelled after ``steps`` turns of the event loop."""
    task = asyncio.ensure_future(rl.lock(res, ttl=TTL, wait=WAIT).acquire())
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    try:
        lease = await task
    except asyncio.CancelledError:
        return
    if lease is not None:
        await lease.release()


async def cancel_after_time(rl, res: str, seconds: float) -> None:
    """An acquire cancelled by ``asyncio.wait_for`` after ``seconds``."""
    try:
        lease = await asyncio.wait_for(rl.lock(res, ttl=TTL, wait=WAIT).acquire(), seconds)
    except asyncio.TimeoutError:
        return
    if lease is not None:
        await lease.release()


async def storm(rl, res: str, rng: random.Random) -> None:
    """Cancellations at every early turn of the loop, then at random
    instants (seeded) within the first 20 ms."""
    for steps in range(30):
        await cancel_after_steps(rl, res, steps)
    for _ in range(30):
        await cancel_after_time(rl, res, rng.random() * 0.02)


@pytest.mark.parametrize("seed", [1, 2])
def test_cancelled_acquires_of_a_held_lock_leave_no_waiter_and_no_grant(three, seed):
    async def main():
        rl = dla.Redlock([s.url for s in three], node_timeout=0.2)
        rng = random.Random(seed)
        for _ in range(2):
            hold = await rl.lock("x", ttl=TTL).acquire()
            assert hold is not None
            await storm(rl, "x", rng)
            # Every cancelled ACQUIRE was undone or dropped with its
            # connection: nothing queued, no connection blocked.
            await until_quiet(three, "x", 3.0)
            assert [holder(s.conn(), "x") for s in three] == [(hold.token, f) for f in hold.fences]
            assert await hold.release()
            await background_done(5.0)
            await until_quiet(three, "x", 3.0)
            # The holder's release granted the lock to nobody.
            await until_free(three, "x", 3.0, "after the holder's release")
        rl.close()

    run(main())


def test_cancelled_acquires_of_a_free_lock_leave_no_hold(three):
    async def main():
        rl = dla.Redlock([s.url for s in three], node_timeout=0.2)
        rng = random.Random(3)
        for steps in range(80):
            if steps % 2:
                await cancel_after_steps(rl, "f", steps // 2)
            else:
                await cancel_after_time(rl, "f", rng.random() * 0.003)
            await background_done(5.0)
            # A grant made for the cancelled acquire was released (the lock
            # would otherwise stay held for the whole ttl, 100 s).
            await until_free(three, "f", 3.0, f"cancelled after {steps}")
        await until_quiet(three, "f", 3.0)
        rl.close()

    run(main())
