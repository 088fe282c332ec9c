"""A forked child never uses its parent's pooled connections (blocking and
asyncio): checked on the server, by the last command each connection
ran."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import redis
import redis.asyncio

import dlock
import dlock.asyncio as dla
from harness import holder

DEADLINE = 60.0


def made_in_a_loop(make):
    """``make()`` run inside an event loop: redis-py's asyncio objects ask
    for the current loop when made on Python < 3.10."""

    async def inside():
        return make()

    return asyncio.run(inside())


def _child_exit_code(pid: int) -> int:
    """The child's exit code; a child still running after the deadline is
    killed, and fails the test."""
    end = time.monotonic() + DEADLINE
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"the child was still running after {DEADLINE} s")
        time.sleep(0.02)


def _pooled_client_id(c: redis.Redis) -> int:
    """The server's id of the one connection whose last command was
    ``DLOCK.INFO`` (the pool's idle one: only the parent sends it)."""
    ids = [int(x["id"]) for x in c.client_list() if x.get("cmd") == "dlock.info"]
    assert len(ids) == 1, ids
    return ids[0]


def _last_command(port: int, client_id: int) -> str:
    r = redis.Redis(port=port)
    try:
        found = [x for x in r.client_list() if int(x["id"]) == client_id]
        return found[0]["cmd"] if found else "(gone)"
    finally:
        r.close()


def test_forked_child_never_uses_the_parents_connections(server):
    """A child forked with a connection in the locker's pool opens its own:
    it never sends on the parent's socket (which would mix its commands'
    replies with the parent's), and the parent's stays open and usable."""
    c = server.conn()
    lk = dlock.Locker(redis.Redis(port=server.port))
    with lk.lock("fork-pool"):
        pass
    assert lk.info("fork-pool") is None  # the pooled connection's last command
    pooled = _pooled_client_id(c)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(r)
            with lk.lock("fork-child", ttl=30):
                pass
            os.write(w, _last_command(server.port, pooled).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        seen = f.read()
    assert _child_exit_code(pid) == 0
    # The child's acquire and release went out on a connection of its own.
    assert seen == "dlock.info"
    # The parent's pooled connection is still open, and still answers it.
    assert _last_command(server.port, pooled) == "dlock.info"
    with lk.lock("fork-pool") as lease:
        assert lk.info("fork-pool")["token"] == lease.token
    assert holder(c, "fork-child") is None


def test_forked_child_asyncio_never_uses_the_parents_connections(server):
    """The same with asyncio, the child running the very loop object the
    parent made (``run_until_complete`` on a loop made before the fork):
    the pool of that loop holds the parent's sockets, and the child must
    not use them."""
    c = server.conn()
    lk = made_in_a_loop(lambda: dla.Locker(redis.asyncio.Redis(port=server.port)))

    async def cycle(name: str) -> None:
        async with lk.lock(name, ttl=30):
            pass

    def run_on(loop: asyncio.AbstractEventLoop, coro) -> object:
        return loop.run_until_complete(asyncio.wait_for(coro, DEADLINE))

    loop = asyncio.new_event_loop()
    try:
        run_on(loop, cycle("afork-parent"))
        assert run_on(loop, lk.info("afork-parent")) is None
        pooled = _pooled_client_id(c)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(r)
                run_on(loop, cycle("afork-child"))
                os.write(w, _last_command(server.port, pooled).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as f:
            seen = f.read()
        assert _child_exit_code(pid) == 0
        assert seen == "dlock.info"
        assert _last_command(server.port, pooled) == "dlock.info"
        run_on(loop, cycle("afork-parent"))
    finally:
        lk.close()
        loop.close()
    assert holder(c, "afork-child") is None and holder(c, "afork-parent") is None


def test_forked_child_is_not_stuck_on_a_pool_lock_held_at_the_fork(server):
    """A fork while another thread held the pool's lock: the child's copy of
    the lock stays held forever, so the child's pool makes its own."""
    lk = dlock.Locker(redis.Redis(port=server.port))
    with lk.lock("fork-lock"):
        pass
    pool_lock = lk.topology.single._lock
    assert pool_lock.acquire(timeout=DEADLINE)
    try:
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                # A deadlock ends the child (the test runner's own alarm
                # handler would wait for Python code to run).
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(int(DEADLINE))
                with lk.lock("fork-lock-child", ttl=30):
                    code = 0
            finally:
                os._exit(code)
    finally:
        pool_lock.release()
    assert _child_exit_code(pid) == 0
    assert holder(server.conn(), "fork-lock-child") is None


def test_forked_child_asyncio_is_not_stuck_on_a_pool_lock_held_at_the_fork(server):
    lk = made_in_a_loop(lambda: dla.Locker(redis.asyncio.Redis(port=server.port)))

    async def cycle(name: str) -> None:
        async with lk.lock(name, ttl=30):
            pass

    asyncio.run(asyncio.wait_for(cycle("afork-lock"), DEADLINE))
    pools_lock = lk.topology.single._pools_lock
    assert pools_lock.acquire(timeout=DEADLINE)
    try:
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(int(DEADLINE))
                asyncio.run(asyncio.wait_for(cycle("afork-lock-child"), DEADLINE))
                lk.close()
                code = 0
            finally:
                os._exit(code)
    finally:
        pools_lock.release()
    assert _child_exit_code(pid) == 0
    assert holder(server.conn(), "afork-lock-child") is None
