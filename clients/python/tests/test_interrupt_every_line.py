"""An interrupt at every line the client runs during an acquire, one line
per attempt: each attempt either hands its caller a lease or leaves no hold
that nobody owns, blocking and asyncio alike.

A trace function raising at the k-th line event stands in for a signal
landing there (``test_lock_edges.py`` sends real ones at random instants;
this walks every line in order, so a window a few instructions wide is
found on every run, not once in many). Two kinds of line event are
skipped: a ``with`` statement's line, which is also reported on leaving
its block before the exit runs (no signal can land there), and a
finalizer's (an exception there is ignored, not an interrupt of the
acquire). Frames outside the client are not traced, but for
``asyncio.wait_for``, which the client's calls run in."""

from __future__ import annotations

import asyncio
import linecache
import os
import sys
from typing import Callable, List, Optional, Tuple

import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla
from harness import holder

_CLIENT = os.path.dirname(dlock.__file__)
# The client bounds its calls with asyncio.wait_for, which runs in the
# caller's task: an interrupt may land in it too.
_WAIT_FOR = asyncio.wait_for.__code__


class _Alarm(BaseException):
    """Like KeyboardInterrupt, not an Exception: what a signal raises."""


class _Interrupt:
    """A trace function raising :class:`_Alarm` at the ``at``-th line event
    in the client's frames (``at`` of 0: never, only counting)."""

    def __init__(self, at: int, only: Callable[[], bool] = lambda: True) -> None:
        self.at, self.only = at, only
        self.seen = 0
        self.where: Optional[Tuple[str, int]] = None

    def _line(self, frame, event, _arg):
        if event == "line" and frame.f_code.co_name != "__del__" and self.only():
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            if not line.lstrip().startswith("with "):
                self.seen += 1
                if self.seen == self.at:
                    self.where = (os.path.basename(frame.f_code.co_filename), frame.f_lineno)
                    sys.settrace(None)
                    raise _Alarm()
        return self._line

    def __call__(self, frame, _event, _arg):
        code = frame.f_code
        traced = code.co_filename.startswith(_CLIENT) or code is _WAIT_FOR
        return self._line if traced else None


def _left_behind(c: redis.Redis, stray: List[Tuple[int, Tuple[str, int]]], at: int, where) -> None:
    if holder(c, "u") is not None:
        stray.append((at, where))
        c.delete("u")


def test_an_interrupt_at_every_line_of_an_acquire_leaves_no_hold_nobody_owns(server):
    c = server.conn()
    lk = dlock.Locker(redis.Redis(port=server.port)).lock("u", ttl=30, wait=5)
    counting = _Interrupt(0)
    sys.settrace(counting)
    try:
        lease = lk.acquire()
    finally:
        sys.settrace(None)
    assert lease and lease.release()
    assert counting.seen > 100, "too few lines traced to mean anything"
    stray: List[Tuple[int, Tuple[str, int]]] = []
    interrupted = 0
    for at in range(1, counting.seen + 1):
        tracer = _Interrupt(at)
        lease = None
        sys.settrace(tracer)
        try:
            lease = lk.acquire()
        except _Alarm:
            interrupted += 1
        finally:
            sys.settrace(None)
        if lease is not None:
            assert lease.release()
        elif lk.owned():  # it reached the Lock's record, not the caller
            assert lk.release()
        _left_behind(c, stray, at, tracer.where)
    assert interrupted > counting.seen // 2
    assert not stray, f"holds nobody owns after an interrupt at (attempt, line): {stray}"
    assert lk.acquire(wait=0).release()


def test_an_interrupt_at_every_line_of_an_acquire_leaves_no_hold_nobody_owns_asyncio(server):
    c = server.conn()

    async def main():
        lk = dla.Locker(redis.asyncio.Redis(port=server.port)).lock("u", ttl=30, wait=5)
        me = asyncio.current_task()

        def mine() -> bool:
            # Only into this task's own code: an exception in a callback
            # the event loop runs would end the loop, not an acquire.
            return asyncio.current_task() is me

        counting = _Interrupt(0, mine)
        sys.settrace(counting)
        try:
            lease = await lk.acquire()
        finally:
            sys.settrace(None)
        assert lease and await lease.release()
        assert counting.seen > 100, "too few lines traced to mean anything"
        stray: List[Tuple[int, Tuple[str, int]]] = []
        interrupted = 0
        for at in range(1, counting.seen + 1):
            tracer = _Interrupt(at, mine)
            lease = None
            sys.settrace(tracer)
            try:
                lease = await lk.acquire()
            except _Alarm:
                interrupted += 1
            finally:
                sys.settrace(None)
            if lease is not None:
                assert await lease.release()
            elif lk.owned():
                assert await lk.release()
            # A grant given back on cancellation is released in the
            # background: wait for it (deadline: 10 s).
            end = asyncio.get_running_loop().time() + 10
            while holder(c, "u") is not None and asyncio.get_running_loop().time() < end:
                await asyncio.sleep(0.005)
            _left_behind(c, stray, at, tracer.where)
        assert interrupted > counting.seen // 2
        assert not stray, f"holds nobody owns after an interrupt at (attempt, line): {stray}"
        assert await (await lk.acquire(wait=0)).release()

    asyncio.run(asyncio.wait_for(main(), 120))
