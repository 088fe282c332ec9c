"""Checked by mypy in ``make test-python`` (``[tool.mypy] files``), never
run: the public calls type-check as a user writes them, and a misspelled
option is a type error (each ``type: ignore`` below must stay needed:
``warn_unused_ignores`` fails the check if a call starts accepting it)."""

from __future__ import annotations

import datetime
from typing import Optional

import redis
import redis.asyncio

import dlock
import dlock.asyncio


def blocking(locker: dlock.Locker) -> None:
    lock: dlock.Lock = locker.lock("res", ttl=30, wait=5)
    got: Optional[dlock.Lease] = lock.acquire(True, 5)
    if lock.acquire(blocking=False, token="t", watchdog=False):
        released: bool = lock.release()
    lock.acquire(blocking_timeout=datetime.timedelta(seconds=2))
    extended: bool = lock.extend(10)
    mine: bool = lock.owned()
    anyone: bool = lock.locked()
    with lock as lease:
        fence: int = lease.fence
    locker.read_lock("r", ttl=10, wait=-1, raise_on_lost=False)
    locker.write_lock("r", blocking_timeout=3, on_lost=lambda lease: None)
    locker.semaphore("r", 3, min_replicas=1, replicas_timeout=0.5)
    locker.reentrant_lock("r", owner="worker-1", shared=True)
    locker.multi_lock(["{a}:1", "{a}:2"], shared=True, on_retry=lambda e: None)
    locker.read_lock("r", wiat=5)  # type: ignore[call-arg]
    locker.semaphore("r", 3, shared=True)  # type: ignore[call-arg]
    dlock.Locker.cluster(["redis://127.0.0.1:7000"], io_timeout=1, watchdog=True)
    dlock.Locker.cluster(["redis://127.0.0.1:7000"], io_timout=1)  # type: ignore[call-arg]

    @locker.lock("res")
    def work(x: int) -> str:
        return str(x)

    text: str = work(1)
    maybe: Optional[str] = locker.lock("res").run(work, 2)
    del got, released, extended, mine, anyone, fence, text, maybe


async def with_asyncio(locker: dlock.asyncio.Locker) -> None:
    lock: dlock.asyncio.Lock = locker.lock("res", ttl=30)
    got: Optional[dlock.asyncio.Lease] = await lock.acquire(True, 5)
    released: bool = await lock.release()
    extended: bool = await lock.extend(10)
    mine: bool = lock.owned()
    anyone: bool = await lock.locked()
    async with lock as lease:
        fence: int = lease.fence
    locker.read_lock("r", wait=-1)
    locker.read_lock("r", wiat=5)  # type: ignore[call-arg]

    @locker.lock("res")
    async def work(x: int) -> str:
        return str(x)

    text: str = await work(1)
    maybe: Optional[str] = await locker.lock("res").run(work, 2)
    del got, released, extended, mine, anyone, fence, text, maybe


def lockers() -> None:
    blocking(dlock.Locker(redis.Redis()))
    dlock.asyncio.Locker(redis.asyncio.Redis())
