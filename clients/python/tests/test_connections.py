"""dlock's own connections: bound to the event loop that made them, never
shared with a forked child, capped by the client's ``max_connections``, and
the right client for each API."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel

import dlock
import dlock.asyncio as dla
from harness import holder, waiters

DEADLINE = 60.0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, DEADLINE))


def made_in_a_loop(make):
    """``make()`` run inside an event loop: redis-py's asyncio objects ask
    for the current loop when made on Python < 3.10."""

    async def inside():
        return make()

    return asyncio.run(inside())


def clients_of(c: redis.Redis) -> int:
    return int(c.info("clients")["connected_clients"])


# --- loops -----------------------------------------------------------------


def test_asyncio_locker_works_from_successive_event_loops(server):
    """A Locker made once and used from one ``asyncio.run()`` after another:
    each loop gets connections of its own (the first loop's are dropped,
    never used), every acquire and release works, and nothing is left
    held."""
    c = server.conn()
    lk = made_in_a_loop(lambda: dla.Locker(redis.asyncio.Redis(port=server.port)))

    async def cycle(n: int) -> None:
        async with lk.lock("loops", ttl=30) as lease:
            assert holder(c, "loops") == (lease.token, lease.fence)
        assert holder(c, "loops") is None
        lease = await lk.lock("loops", ttl=30).acquire(blocking=False)
        assert lease is not None
        assert await lease.release()
        assert await lk.info("loops") is None

    for n in range(3):
        run(cycle(n))
        assert holder(c, "loops") is None
    # The closed loops' connections were closed when the next loop came:
    # the server sees this test's own and the last loop's idle one.
    end = time.monotonic() + DEADLINE
    while clients_of(c) > 2:
        assert time.monotonic() < end, f"{clients_of(c)} clients"
        time.sleep(0.02)
    lk.close()


def test_asyncio_locker_from_two_loops_in_two_threads_at_once(server):
    """Two threads, each running its own loop, share one Locker: a waiter
    on one loop is granted when the holder on the other releases."""
    c = server.conn()
    lk = made_in_a_loop(lambda: dla.Locker(redis.asyncio.Redis(port=server.port)))
    held = threading.Event()
    results: list = []

    async def holder_side() -> None:
        async with lk.lock("two-loops", ttl=30):
            held.set()
            # Released once the other loop's waiter is queued.
            while waiters(c, "two-loops") < 1:
                await asyncio.sleep(0.02)

    async def waiter_side() -> None:
        lease = await lk.lock("two-loops", ttl=30, wait=DEADLINE).acquire()
        results.append(lease is not None)
        if lease is not None:
            await lease.release()

    def in_thread(f) -> None:
        try:
            run(f())
        except BaseException as e:  # reported by the assertion below
            results.append(e)

    t1 = threading.Thread(target=in_thread, args=(holder_side,))
    t1.start()
    assert held.wait(DEADLINE)
    t2 = threading.Thread(target=in_thread, args=(waiter_side,))
    t2.start()
    t1.join(DEADLINE)
    t2.join(DEADLINE)
    assert results == [True]
    assert holder(c, "two-loops") is None
    # Once more from the main thread: the two threads' loops are closed.
    run(waiter_side())
    assert results == [True, True]


# --- the client each API takes ---------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda port: redis.asyncio.Redis(port=port),
        lambda port: redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{port}/0"),
        lambda port: redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port),
        lambda port: redis.asyncio.sentinel.Sentinel([("127.0.0.1", port)]).master_for("mymaster"),
        lambda port: redis.asyncio.ConnectionPool(port=port),
    ],
    ids=["Redis", "from_url", "RedisCluster", "Sentinel.master_for", "ConnectionPool"],
)
def test_blocking_locker_refuses_an_asyncio_client_at_once(server, make):
    client = made_in_a_loop(lambda: make(server.port))
    with pytest.raises(dlock.InvalidRequest, match="dlock.asyncio.Locker"):
        dlock.Locker(client)
    if not isinstance(client, (redis.asyncio.cluster.RedisCluster, redis.asyncio.ConnectionPool)):
        with pytest.raises(dlock.InvalidRequest, match="dlock.asyncio.Redlock"):
            dlock.Redlock([client])
    if isinstance(client, redis.asyncio.ConnectionPool):
        with pytest.raises(dlock.InvalidRequest, match="a Redlock server is a URL or a redis.Redis"):
            dlock.Redlock([client])


def test_asyncio_locker_takes_a_blocking_client(server):
    """The other way round works: the blocking client's settings are used
    for asyncio connections."""
    c = server.conn()

    async def main() -> None:
        lk = dla.Locker(redis.Redis(port=server.port))
        async with lk.lock("blocking-client") as lease:
            assert holder(c, "blocking-client") == (lease.token, lease.fence)
        assert holder(c, "blocking-client") is None

    run(main())


# --- max_connections --------------------------------------------------------------


WAITERS = 10
CAP = 4


def _no_limit_reached(server) -> None:
    assert "max number of clients" not in server.log()


def test_blocking_max_connections_caps_waiters_and_keeps_one_for_release(make_server):
    """10 threads wait on a held lock through a client capped at 4
    connections, on a server that takes 8 clients: at most 3 wait on the
    server, the rest in line in the client; the holder's release still
    gets a connection, and every waiter gets the lock in turn."""
    server = make_server("--maxclients", "8")
    c = server.conn()
    lk = dlock.Locker(redis.Redis(port=server.port, max_connections=CAP))
    holder_lease = lk.lock("capped", ttl=60).acquire()
    assert holder_lease is not None
    got: list = []
    errors: list = []

    def waiter() -> None:
        try:
            lease = lk.lock("capped", ttl=60, wait=DEADLINE).acquire()
            if lease is None:
                got.append(None)
                return
            got.append(lease.fence)
            # Renewed and released with the waiters still queued.
            assert lease.extend(60)
            assert lease.release()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=waiter) for _ in range(WAITERS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE
    while waiters(c, "capped") < CAP - 1:
        assert time.monotonic() < deadline, "waiters never queued"
        time.sleep(0.02)
    node = lk.topology.single
    with node._lock:
        assert node._slots.waiting <= CAP - 1 and node._slots.open <= CAP
    assert waiters(c, "capped") == CAP - 1
    assert holder_lease.extend(60)
    assert holder_lease.release()
    for t in threads:
        t.join(DEADLINE)
    assert not errors, errors
    assert len(got) == WAITERS and None not in got
    # Granted one after another: each fence above the one before.
    assert got == sorted(got) and len(set(got)) == WAITERS
    assert holder(c, "capped") is None
    _no_limit_reached(server)


def test_asyncio_max_connections_caps_waiters_and_keeps_one_for_release(make_server):
    server = make_server("--maxclients", "8")
    c = server.conn()

    async def main() -> None:
        lk = dla.Locker(redis.asyncio.Redis(port=server.port, max_connections=CAP))
        holder_lease = await lk.lock("capped", ttl=60).acquire()
        assert holder_lease is not None
        got: list = []

        async def waiter() -> None:
            lease = await lk.lock("capped", ttl=60, wait=DEADLINE).acquire()
            assert lease is not None
            got.append(lease.fence)
            assert await lease.extend(60)
            assert await lease.release()

        tasks = [asyncio.ensure_future(waiter()) for _ in range(WAITERS)]
        while waiters(c, "capped") < CAP - 1:
            await asyncio.sleep(0.02)
        slots = lk.topology.single._slots()
        assert slots.waiting <= CAP - 1 and slots.open <= CAP
        assert waiters(c, "capped") == CAP - 1
        assert await holder_lease.extend(60)
        assert await holder_lease.release()
        await asyncio.gather(*tasks)
        assert got == sorted(got) and len(set(got)) == WAITERS
        assert holder(c, "capped") is None

    run(main())
    _no_limit_reached(server)


def test_max_connections_line_ends_with_the_wait(make_server):
    """A waiter in line in the client whose wait ends is answered busy (not
    an error) and leaves nothing behind; a try without waiting goes ahead
    of the line."""
    server = make_server()
    c = server.conn()
    lk = dlock.Locker(redis.Redis(port=server.port, max_connections=2))
    held = lk.lock("short", ttl=60).acquire()
    assert held is not None
    out: list = []

    def waiter(wait: float) -> None:
        try:
            out.append(lk.lock("short", ttl=60, wait=wait).acquire())
        except BaseException as e:
            out.append(e)

    first = threading.Thread(target=waiter, args=(DEADLINE,))
    first.start()
    t0 = time.monotonic()
    while waiters(c, "short") < 1:
        assert time.monotonic() - t0 < DEADLINE
        time.sleep(0.02)
    # The one waiting slot is taken: this waiter stays in the client's line
    # until its wait ends, then makes a plain try on the connection kept for
    # commands that do not wait: busy.
    waiter(0.3)
    assert out == [None], out
    # Commands that do not wait are not held up by the line.
    assert lk.lock("short", ttl=60).acquire(blocking=False) is None
    assert lk.info("short") is not None
    assert held.release()
    first.join(DEADLINE)
    assert out[-1] is not None and not isinstance(out[-1], BaseException)
    assert out[-1].release()


def test_asyncio_max_connections_line_ends_with_the_wait(make_server):
    server = make_server()
    c = server.conn()

    async def main() -> None:
        lk = dla.Locker(redis.asyncio.Redis(port=server.port, max_connections=2))
        held = await lk.lock("short", ttl=60).acquire()
        assert held is not None
        first = asyncio.ensure_future(lk.lock("short", ttl=60, wait=DEADLINE).acquire())
        while waiters(c, "short") < 1:
            await asyncio.sleep(0.02)
        assert await lk.lock("short", ttl=60, wait=0.3).acquire() is None
        assert await lk.lock("short", ttl=60).acquire(blocking=False) is None
        assert await lk.info("short") is not None
        assert await held.release()
        lease = await first
        assert lease is not None and await lease.release()
        # A cancelled waiter in the client's line leaves it.
        held = await lk.lock("short", ttl=60).acquire()
        first = asyncio.ensure_future(lk.lock("short", ttl=60, wait=DEADLINE).acquire())
        while waiters(c, "short") < 1:
            await asyncio.sleep(0.02)
        in_line = asyncio.ensure_future(lk.lock("short", ttl=60, wait=DEADLINE).acquire())
        await asyncio.sleep(0.05)
        in_line.cancel()
        with pytest.raises(asyncio.CancelledError):
            await in_line
        assert await held.release()
        lease = await first
        assert lease is not None and await lease.release()
        slots = lk.topology.single._slots()
        assert not slots.long_q and not slots.short_q and slots.waiting == 0
        assert holder(c, "short") is None

    run(main())


def test_max_connections_of_one_counts_as_two(server):
    """One connection to wait on, one for everything else: a waiter and the
    holder's release both get through."""
    c = server.conn()
    lk = dlock.Locker(redis.Redis(port=server.port, max_connections=1))
    held = lk.lock("one", ttl=60).acquire()
    out: list = []
    t = threading.Thread(target=lambda: out.append(lk.lock("one", ttl=60, wait=DEADLINE).acquire()))
    t.start()
    while waiters(c, "one") < 1:
        time.sleep(0.02)
    assert held.release()
    t.join(DEADLINE)
    assert out[0] is not None and out[0].release()

    async def main() -> None:
        alk = dla.Locker(redis.asyncio.Redis(port=server.port, max_connections=1))
        held = await alk.lock("one", ttl=60).acquire()
        waiter = asyncio.ensure_future(alk.lock("one", ttl=60, wait=DEADLINE).acquire())
        while waiters(c, "one") < 1:
            await asyncio.sleep(0.02)
        assert await held.release()
        lease = await waiter
        assert lease is not None and await lease.release()

    run(main())
    assert holder(c, "one") is None


def test_retry_settings_of_the_client_change_nothing(server):
    """redis-py's retry settings are not used (every retry is dlock's,
    with the same token): given, they break nothing."""
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    c = server.conn()
    client = redis.Redis(
        port=server.port,
        retry=Retry(ExponentialBackoff(), 5),
        retry_on_error=[redis.exceptions.ConnectionError],
    )
    lk = dlock.Locker(client)
    with lk.lock("retry-settings") as lease:
        assert holder(c, "retry-settings") == (lease.token, lease.fence)
    # dlock's own connections do not retry.
    assert [conn.retry.get_retries() for conn in lk.topology.single._slots.idle] == [0]

    async def main() -> None:
        alk = dla.Locker(
            redis.asyncio.Redis(port=server.port, retry=redis.asyncio.retry.Retry(ExponentialBackoff(), 5))
        )
        async with alk.lock("retry-settings") as lease:
            assert holder(c, "retry-settings") == (lease.token, lease.fence)
        assert [conn.retry.get_retries() for conn in alk.topology.single._slots().idle] == [0]

    run(main())


@pytest.mark.parametrize("protocol", [None, 2, 3])
def test_connecting_costs_the_server_no_error(server, protocol):
    """dlock's connections send nothing the server refuses: redis-py 8's
    request for maintenance notifications on each new RESP3 connection is
    turned off for them (an error in the server's errorstats per connect on
    servers without it)."""
    c = server.conn()
    kw: dict = {} if protocol is None else {"protocol": protocol}
    # The client's own CLIENT SETINFO, which Redis 7.0 refuses, off.
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
        kw["driver_info"] = None
    else:
        kw.update(lib_name=None, lib_version=None)
    c.execute_command("CONFIG", "RESETSTAT")
    lk = dlock.Locker(redis.Redis(port=server.port, **kw))
    with lk.lock("no-error") as lease:
        assert holder(c, "no-error") == (lease.token, lease.fence)

    async def main() -> None:
        alk = dla.Locker(redis.asyncio.Redis(port=server.port, **kw))
        async with alk.lock("no-error") as lease:
            assert holder(c, "no-error") == (lease.token, lease.fence)

    run(main())
    assert c.info("errorstats") == {}


def test_redlock_waiters_stay_within_max_connections(make_server):
    """A Redlock's waiting acquires hold at most max_connections - 1
    connections on each server: the holder's release gets through, and
    every waiter gets the lock in turn (blocking and asyncio)."""
    servers = [make_server() for _ in range(3)]
    cap = 3
    urls = [f"{s.url}?max_connections={cap}" for s in servers]
    conns = [s.conn() for s in servers]

    def server_waiters() -> int:
        return max(waiters(c, "rl-capped") for c in conns)

    rl = dlock.Redlock(urls)
    held = rl.lock("rl-capped", ttl=60).acquire()
    assert held is not None
    got: list = []
    errors: list = []

    def waiter() -> None:
        try:
            lease = rl.lock("rl-capped", ttl=60, wait=DEADLINE).acquire()
            got.append(lease is not None)
            if lease is not None:
                lease.release()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=waiter) for _ in range(5)]
    for t in threads:
        t.start()
    end = time.monotonic() + DEADLINE
    while server_waiters() < cap - 1:
        assert time.monotonic() < end, "waiters never queued"
        time.sleep(0.02)
    assert server_waiters() == cap - 1
    assert held.release()
    for t in threads:
        t.join(DEADLINE)
    assert not errors and got == [True] * 5

    async def main() -> None:
        arl = dla.Redlock(urls)
        held = await arl.lock("rl-capped", ttl=60).acquire()
        assert held is not None

        async def waiter() -> bool:
            lease = await arl.lock("rl-capped", ttl=60, wait=DEADLINE).acquire()
            if lease is None:
                return False
            await lease.release()
            return True

        tasks = [asyncio.ensure_future(waiter()) for _ in range(5)]
        while server_waiters() < cap - 1:
            await asyncio.sleep(0.02)
        assert server_waiters() == cap - 1
        assert await held.release()
        assert await asyncio.gather(*tasks) == [True] * 5

    run(main())
    assert all(holder(c, "rl-capped") is None for c in conns)
