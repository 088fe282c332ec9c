"""Sessions (``locker.session``: DLOCK.SESSION): locks bound to one
liveness lease, kept alive together, lost together; the blocking and the
asyncio API alike."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

import dlock
from apis import Api
from harness import calls, wait_until


@pytest.fixture(params=["sync", "asyncio"])
def api(request):
    a = Api(request.param)
    yield a
    a.close()


def holder(c, resource):
    """The (token, fence) of a resource's one hold, bound or not (None
    when free)."""
    v = c.execute_command("DLOCK.INFO", resource)
    if v is None:
        return None
    d = _pairs(v)
    if "holds" not in d:
        tok = d.get("token")
        return None if tok is None else (tok.decode(), d["fence"])
    holds = d["holds"]
    if not holds:
        return None
    h = _pairs(holds[0] if isinstance(holds[0], (list, dict)) else holds)
    return h["token"].decode(), h["fence"]


def _pairs(v):
    if isinstance(v, dict):
        return {k.decode() if isinstance(k, bytes) else k: x for k, x in v.items()}
    return {(v[i].decode() if isinstance(v[i], bytes) else v[i]): v[i + 1] for i in range(0, len(v), 2)}


def keepalives(c) -> int:
    return calls(c, "dlock.session|keepalive")


def session_info(c, sid):
    v = c.execute_command("DLOCK.SESSION", "INFO", sid)
    if v is None:
        return None
    if isinstance(v, dict):
        return {k.decode(): x for k, x in v.items()}
    return {v[i].decode(): v[i + 1] for i in range(0, len(v), 2)}


def test_locks_are_bound_and_kept_alive_past_their_ttl(api, server):
    c = server.conn()
    locker = api.locker(server.url)
    s = locker.session(ttl=4.5)
    started = time.monotonic()
    leases = [s.lock(f"sess:{i}").acquire(blocking=False) for i in range(3)]
    assert all(lease is not None for lease in leases)
    info = session_info(c, s.id)
    assert info["holds"] == 3 and info["session-ttl"] == 4500
    for lease in leases:
        assert c.pttl(lease.resource) == -1, "a bound hold has no deadline of its own"
        assert lease.write("SET", f"{lease.resource}:v", 1) == b"OK", "a bound lease proves a guarded write"
    # Past the ttl, kept alive by the session alone (every 1.5 s).
    wait_until(30, "four keep-alives", lambda: keepalives(c) >= 4)
    elapsed = time.monotonic() - started
    for lease in leases:
        assert not lease.lost
        assert holder(c, lease.resource) == (lease.token, lease.fence)
    # One KEEPALIVE per third of the ttl, not one per lock: a slow machine
    # sends fewer, never more.
    assert keepalives(c) <= elapsed / 1.5 + 2
    for lease in leases:
        assert lease.release()
        assert not lease.lost
    assert session_info(c, s.id)["holds"] == 0
    assert s.close()
    assert session_info(c, s.id) is None


def test_a_killed_session_loses_every_lock(api, server):
    c = server.conn()
    locker = api.locker(server.url)
    s = locker.session(ttl=3)
    lost = []
    leases = [s.lock(f"kill:{i}", on_lost=lambda lease: lost.append(lease.resource)).acquire(blocking=False) for i in range(3)]
    assert c.execute_command("DLOCK.SESSION", "KILL", s.id) == 1
    # The session's next keep-alive (a third of its ttl on) is answered
    # NOSESSION: every lock is lost at once.
    assert api.run(leases[0].wait_lost(20)) is True
    for lease in leases:
        assert lease.lost
    assert sorted(lost) == [f"kill:{i}" for i in range(3)]
    assert s.ended and not s.alive
    wait_until(10, "the holds released", lambda: all(holder(c, f"kill:{i}") is None for i in range(3)))
    with pytest.raises(dlock.LockLost, match="session"):
        s.lock("kill:new").acquire(blocking=False)
    for lease in leases:
        assert lease.release() is False
    assert s.close() is False


def test_keep_alive_tells_of_an_ended_session(api, server):
    c = server.conn()
    s = api.locker(server.url).session(ttl=30)
    lease = s.lock("ka").acquire(blocking=False)
    assert s.keep_alive() is True
    other = s.lock("ka:other").acquire(blocking=False)
    c.execute_command("DLOCK.SESSION", "KILL", s.id)
    # The server knows at once: a guarded write proves nothing any more.
    with pytest.raises(dlock.NotHeld):
        lease.write("SET", "ka:v", 1)
    assert lease.lost and c.get("ka:v") is None
    assert s.keep_alive() is False
    assert other.lost
    assert s.keep_alive() is False, "an ended session stays ended"


def test_close_releases_every_lock(api, server):
    c = server.conn()
    locker = api.locker(server.url)
    with locker.session(ttl=30) as s:
        leases = [s.lock(f"close:{i}").acquire(blocking=False) for i in range(3)]
        inner = s.lock("close:early").acquire(blocking=False)
        assert inner.release()
        assert s.close() is True
        for i, lease in enumerate(leases):
            assert lease.lost
            assert holder(c, f"close:{i}") is None
        assert not inner.lost, "a lock released before the close stays released, not lost"
        with pytest.raises(dlock.LockLost):
            s.lock("close:after").acquire(blocking=False)
    # Another locker takes them at once.
    other = api.locker(server.url)
    for i in range(3):
        g = other.lock(f"close:{i}", ttl=5, watchdog=False).acquire(blocking=False)
        assert g is not None and g.release()


def test_a_bound_session_ends_with_its_connection(api, server):
    c = server.conn()
    s = api.locker(server.url).session(ttl=30, bind=True)
    lease = s.lock("bind").acquire(blocking=False)
    assert session_info(c, s.id)["bound"] == 1
    c.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    wait_until(10, "the server ended the session", lambda: session_info(c, s.id) is None)
    assert holder(c, "bind") is None
    # The client learns it at its next keep-alive, on the lost connection.
    assert s.keep_alive() is False
    assert lease.lost


def test_a_waiting_lock_is_bound_when_granted(api, server):
    c = server.conn()
    locker = api.locker(server.url)
    s = locker.session(ttl=30)
    held = locker.lock("wq", ttl=30, watchdog=False).acquire(blocking=False)
    lock = s.lock("wq", wait=20)
    # Released from another thread of the test's own: the waiting acquire
    # is granted then.
    import threading

    threading.Timer(0.2, lambda: c.execute_command("DLOCK.RELEASE", "wq", held.token)).start()
    lease = lock.acquire()
    assert lease is not None and lease.fence > held.fence
    assert session_info(c, s.id)["holds"] == 1
    assert s.close()
    assert lease.lost


def test_a_lock_handed_over_after_a_long_wait_has_the_sessions_budget(api, server):
    """A grant handed over after more than a third of its ttl is refreshed
    (EXTEND) when it is not bound; a bound hold has no deadline of its own
    (the server refuses its EXTEND): its lease gets the session's budget."""
    c = server.conn()
    locker = api.locker(server.url)
    # 4.5 s: 3 s of slack for each keep-alive on a loaded machine.
    s = locker.session(ttl=4.5)
    held = locker.lock("wq-long", ttl=30, watchdog=False).acquire(blocking=False)
    lock = s.lock("wq-long", wait=20)
    import threading

    # 2 s in line: past a third of the session's ttl, however loaded.
    threading.Timer(2.0, lambda: c.execute_command("DLOCK.RELEASE", "wq-long", held.token)).start()
    lease = lock.acquire()
    assert lease is not None and lease.fence > held.fence and not lease.lost
    assert holder(c, "wq-long") == (lease.token, lease.fence)
    assert calls(c, "dlock.extend") == 0, "a bound hold is never extended"
    assert s.close()
    assert lease.lost


@pytest.mark.parametrize("kw", [dict(ttl=0), dict(ttl=-1), dict(ttl="x"), dict(lock_delay=61), dict(lock_delay=-1)])
def test_bad_session_settings(api, server, kw):
    with pytest.raises(dlock.InvalidRequest):
        api.locker(server.url).session(**kw)


def test_a_server_without_sessions_says_so(api, make_server):
    plain = make_server(module=False)
    s = api.locker(plain.url).session(ttl=5)
    with pytest.raises(dlock.ServerError, match="does not know DLOCK.SESSION"):
        s.lock("x").acquire(blocking=False)


def test_sessions_refuse_a_cluster(api, cluster3):
    locker = api.cluster([cluster3.node(cluster3.masters()[0]).url])
    with pytest.raises(dlock.InvalidRequest, match="one server"):
        locker.session(ttl=5)


def test_with_blocks_of_session_locks(server):
    c = server.conn()
    locker = dlock.Locker(server.url)
    with locker.session(ttl=30) as s:
        with s.lock("blk") as lease:
            assert holder(c, "blk") == (lease.token, lease.fence)
        assert holder(c, "blk") is None and not lease.lost
        with pytest.raises(dlock.NotAcquired):
            with s.lock("blk", blocking=False), s.lock("blk", blocking=False):
                pass
    assert s.ended


def test_async_with_blocks_of_session_locks(server):
    import dlock.asyncio as dla

    c = server.conn()

    async def main():
        locker = dla.Locker(server.url)
        async with locker.session(ttl=30) as s:
            async with s.lock("ablk") as lease:
                assert holder(c, "ablk") == (lease.token, lease.fence)
            assert holder(c, "ablk") is None and not lease.lost
            with pytest.raises(dlock.NotAcquired):
                async with s.lock("ablk", blocking=False), s.lock("ablk", blocking=False):
                    pass
        assert s.ended

    asyncio.run(asyncio.wait_for(main(), 60))


def test_lock_delay_keeps_a_killed_sessions_resources(api, server):
    c = server.conn()
    locker = api.locker(server.url)
    s = locker.session(ttl=30, lock_delay=30)
    lease = s.lock("delayed").acquire(blocking=False)
    assert session_info(c, s.id)["lock-delay"] == 30000
    c.execute_command("DLOCK.SESSION", "KILL", s.id)
    assert s.keep_alive() is False and lease.lost
    # Kept from everyone for the delay (30 s: far past this test).
    assert locker.lock("delayed", ttl=5, watchdog=False).acquire(blocking=False) is None
    # A closed session never delays.
    s2 = locker.session(ttl=30, lock_delay=30)
    s2.lock("closed-at-once").acquire(blocking=False)
    assert s2.close()
    g = locker.lock("closed-at-once", ttl=5, watchdog=False).acquire(blocking=False)
    assert g is not None and g.release()


def test_a_silent_server_loses_the_locks_when_the_budget_passes(api, server):
    """The server stops answering (SIGSTOP): every lock of the session is
    lost when the session's budget passes, not when a keep-alive in flight
    gives up (its io timeout here is far longer than the ttl)."""
    locker = api.locker(server.url, io_timeout=10)
    s = locker.session(ttl=2)
    lost_at = []
    leases = [s.lock(f"silent:{i}", on_lost=lambda lease: lost_at.append(time.monotonic())).acquire(blocking=False) for i in range(2)]
    server.stop()
    try:
        assert api.run(leases[0].wait_lost(20)) is True
        wait_until(20, "both lost", lambda: len(lost_at) == 2)
        assert s.ended
        late = max(lost_at) - s.deadline
        assert late < 3.0, f"lost {late:.2f} s after the session's budget passed"
    finally:
        server.cont()


def test_a_bound_session_whose_open_failed_opens_later(api, server):
    c = server.conn()
    s = api.locker(server.url, io_timeout=0.5).session(ttl=30, bind=True)
    c.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    try:
        with pytest.raises(dlock.Unavailable):
            s.open()
    finally:
        c.execute_command("CLIENT", "UNPAUSE")
    assert not s.ended
    lease = s.lock("reopen").acquire(blocking=False)
    assert lease is not None and session_info(c, s.id)["bound"] == 1
    assert s.close() and lease.lost


def _in_child(f) -> int:
    """Runs ``f()`` in a forked child; its exit status: 0 when ``f``
    returned True."""
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = bool(f())
        finally:
            os._exit(0 if ok else 1)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
        time.sleep(0.02)
    os.kill(pid, 9)
    raise AssertionError("the child did not end")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_never_closes_or_renews_its_parents_session(server):
    import dlock.asyncio as dla

    c = server.conn()
    locker = dlock.Locker(server.url)
    s = locker.session(ttl=30)
    lease = s.lock("forked").acquire(blocking=False)
    before = keepalives(c)

    def child() -> bool:
        # Unwinding a `with locker.session()` block, or closing, in the child.
        if s.close() is not False:
            return False
        for call in (s.keep_alive, s.open, lambda: s.lock("forked:child").acquire(blocking=False), lease.extend):
            try:
                call()
                return False
            except dlock.InvalidRequest:
                pass
        return True

    assert _in_child(child) == 0
    assert session_info(c, s.id)["holds"] == 1, "the parent's session is untouched"
    assert keepalives(c) == before
    assert not lease.lost and s.alive
    assert s.close() and lease.lost

    async def parent():
        al = dla.Locker(server.url)
        a = al.session(ttl=30)
        held = await a.lock("aforked").acquire(blocking=False)
        return a, held

    loop = asyncio.new_event_loop()
    try:
        a, held = loop.run_until_complete(parent())

        def achild() -> bool:
            closed = asyncio.run(a.close())
            return closed is False

        assert _in_child(achild) == 0
        assert session_info(c, a.id)["holds"] == 1
        assert loop.run_until_complete(a.close())
    finally:
        loop.close()


def test_every_kind_of_lock_binds_to_a_session(api, server):
    c = server.conn()
    locker = api.locker(server.url)
    s = locker.session(ttl=30)
    both = s.lock(["{set}:a", "{set}:b"]).acquire(blocking=False)
    readers = [s.lock("shared", shared=True).acquire(blocking=False) for _ in range(2)]
    permits = [s.lock("sem", limit=2).acquire(blocking=False) for _ in range(3)]
    mine = s.lock("owned", owner="me").acquire(blocking=False)
    assert both is not None and all(readers) and mine is not None
    assert permits[2] is None and all(permits[:2])
    assert session_info(c, s.id)["holds"] == 2 + 2 + 2 + 1
    assert both.write("SET", "{set}:data", 1) == b"OK"
    assert s.close()
    for lease in [both, *readers, *permits[:2], mine]:
        assert lease.lost
    for r in ("{set}:a", "{set}:b", "shared", "sem", "owned"):
        assert holder(c, r) is None  # DLOCK.INFO settles an ended session's hold first


def test_the_session_classes_are_public(server):
    """The docs name dlock.Session and dlock.asyncio.Session: what
    locker.session() returns, for type hints and isinstance."""
    import redis
    import redis.asyncio

    import dlock.asyncio

    assert isinstance(dlock.Locker(redis.Redis(port=server.port)).session(), dlock.Session)

    async def main() -> None:
        locker = dlock.asyncio.Locker(redis.asyncio.Redis(port=server.port))
        assert isinstance(locker.session(), dlock.asyncio.Session)

    asyncio.run(main())
