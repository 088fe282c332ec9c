"""Guarded writes (``lease.write``, ``lease.write_batch``: DLOCK.GUARD)
and the sequencer check (``lease.check``, ``locker.check``: DLOCK.CHECK),
each test run on the blocking and the asyncio API alike."""

from __future__ import annotations

import threading

import pytest

import dlock
from apis import Api
from harness import calls


@pytest.fixture(params=["sync", "asyncio"])
def api(request):
    a = Api(request.param)
    yield a
    a.close()


def test_a_write_runs_while_held(api, server):
    locker = api.locker(server.url)
    lease = locker.lock("{g}", ttl=30, watchdog=False).acquire(blocking=False)
    assert lease.write("SET", "{g}:status", "shipped") == b"OK"
    assert lease.write("INCRBY", "{g}:n", 5) == 5
    assert lease.write(b"GET", b"{g}:status") == b"shipped"
    assert lease.write_batch([("SET", "{g}:status", "paid"), ("INCR", "{g}:n")]) == [b"OK", 6]
    c = server.conn()
    assert c.get("{g}:status") == b"paid" and c.get("{g}:n") == b"6"
    assert lease.check() is True
    assert locker.check("{g}", lease.fence) is True
    assert lease.release()
    assert locker.check("{g}", lease.fence) is False


def test_a_taken_over_lease_writes_nothing(api, server):
    locker = api.locker(server.url)
    lease = locker.lock("{t}", ttl=30, watchdog=False).acquire(blocking=False)
    c = server.conn()
    c.delete("{t}")
    other = locker.lock("{t}", ttl=30, watchdog=False).acquire(blocking=False)
    assert other is not None
    with pytest.raises(dlock.NotHeld):
        lease.write("SET", "{t}:v", "stale")
    assert c.get("{t}:v") is None, "nothing was written"
    assert lease.lost
    # Known lost: refused without asking the server.
    sent = calls(c, "dlock.guard")
    with pytest.raises(dlock.NotHeld):
        lease.write("SET", "{t}:v", "stale")
    with pytest.raises(dlock.NotHeld):
        lease.write_batch([("SET", "{t}:v", "stale")])
    assert calls(c, "dlock.guard") == sent
    assert lease.check() is False
    # The new holder writes.
    assert other.write("SET", "{t}:v", "fresh") == b"OK"
    assert c.get("{t}:v") == b"fresh"
    assert other.release()
    with pytest.raises(dlock.NotHeld):
        other.write("SET", "{t}:v", "after release")
    assert c.get("{t}:v") == b"fresh"


def test_a_batch_is_all_or_none(api, server):
    locker = api.locker(server.url)
    lease = locker.lock("{b}", ttl=30, watchdog=False).acquire(blocking=False)
    c = server.conn()
    c.set("{b}:note", "text")
    with pytest.raises(dlock.Refused) as e:
        lease.write_batch([("SET", "{b}:status", "void"), ("LPUSH", "{b}:note", "x")])
    assert e.value.code == "WRONGTYPE"
    assert "undone" in e.value.message
    assert c.get("{b}:status") is None, "the batch was undone"
    assert not lease.lost, "a refused write does not lose the lease"
    with pytest.raises(dlock.Refused) as e:
        lease.write("INCR", "{b}:note")
    assert e.value.code == "ERR"
    with pytest.raises(dlock.Refused) as e:
        lease.write("BLPOP", "{b}:q", 0)
    assert e.value.code == "ERR" and "block" in e.value.message
    assert lease.check() is True
    assert lease.release()


def test_check_false_marks_the_lease_lost(api, server):
    locker = api.locker(server.url)
    lease = locker.lock("{c}", ttl=30, watchdog=False).acquire(blocking=False)
    assert lease.check() is True
    server.conn().delete("{c}")
    assert locker.check("{c}", lease.fence) is False
    assert lease.check() is False
    assert lease.lost
    with pytest.raises(dlock.NotHeld):
        lease.write("SET", "{c}:v", "x")


def test_a_multi_lock_proves_with_its_first_member(api, server):
    locker = api.locker(server.url)
    lease = locker.multi_lock(["{m}:a", "{m}:b"], ttl=30, watchdog=False).acquire(blocking=False)
    assert lease.write("SET", "{m}:data", "1") == b"OK"
    assert lease.check() is True
    assert lease.release()


@pytest.mark.parametrize(
    "bad",
    [
        lambda lease: lease.write(),
        lambda lease: lease.write("SET", "{a}:k", 1.5),
        lambda lease: lease.write("SET", "{a}:k", True),
        lambda lease: lease.write("SET", "{a}:k", None),
        lambda lease: lease.write("SET", "{a}:k", "\ud800"),
        lambda lease: lease.write_batch([]),
        lambda lease: lease.write_batch("SET k v"),
        lambda lease: lease.write_batch([("SET", "{a}:k", "v"), ()]),
        lambda lease: lease.write_batch([("SET", "{a}:k", object())]),
        lambda lease: lease.write_batch(None),
    ],
)
def test_bad_arguments_send_nothing(api, server, bad):
    locker = api.locker(server.url)
    lease = locker.lock("{a}", ttl=30, watchdog=False).acquire(blocking=False)
    c = server.conn()
    with pytest.raises(dlock.InvalidRequest):
        bad(lease)
    assert calls(c, "dlock.guard") == 0
    assert c.exists("{a}:k") == 0
    assert not lease.lost
    assert lease.release()


@pytest.mark.parametrize("resource, fence", [("r", 0), ("r", -1), ("r", 1 << 63), ("r", True), ("r", "1"), ("", 1), ("\ud800", 1), (None, 1)])
def test_check_refuses_what_is_not_a_fence(api, server, resource, fence):
    locker = api.locker(server.url)
    with pytest.raises(dlock.InvalidRequest):
        locker.check(resource, fence)
    assert calls(server.conn(), "dlock.check") == 0


def test_a_write_whose_reply_is_lost_is_not_sent_again(api, server):
    """The server takes the write and answers too late (its clients paused
    for writes after the PING): the call says the write may have run, and
    it was sent once (the server drops it with the closed connection, or
    runs it: never twice)."""
    locker = api.locker(server.url, io_timeout=0.5, retry_for=5)
    lease = locker.lock("{p}", ttl=60, watchdog=False).acquire(blocking=False)
    c = server.conn()
    assert lease.write("SET", "{p}:n", 0) == b"OK"  # leaves a pooled connection
    c.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    with pytest.raises(dlock.Unavailable, match="may or may not have run"):
        lease.write("INCR", "{p}:n")
    # A check only reads: it is answered during the pause.
    assert lease.check() is True
    c.execute_command("CLIENT", "UNPAUSE")
    assert lease.write("GET", "{p}:n") in (b"0", b"1"), "sent once"
    assert not lease.lost
    assert lease.release()


def test_redlock_leases_make_no_guarded_write(server, make_server):
    other = make_server()
    third = make_server()
    rl = dlock.Redlock([server.url, other.url, third.url])
    lease = rl.lock("{r}", ttl=30, watchdog=False).acquire(blocking=False)
    assert lease is not None
    for call in (
        lambda: lease.write("SET", "{r}:v", "x"),
        lambda: lease.write_batch([("SET", "{r}:v", "x")]),
        lease.check,
    ):
        with pytest.raises(dlock.InvalidRequest, match="Redlock"):
            call()
    for s in (server, other, third):
        assert calls(s.conn(), "dlock.guard") == 0 and calls(s.conn(), "dlock.check") == 0
    assert lease.release()


def test_asyncio_redlock_leases_make_no_guarded_write(server, make_server):
    import asyncio

    import dlock.asyncio

    others = [make_server(), make_server()]

    async def main():
        rl = dlock.asyncio.Redlock([server.url] + [o.url for o in others])
        lease = await rl.lock("{ar}", ttl=30, watchdog=False).acquire(blocking=False)
        assert lease is not None
        for call in (
            lambda: lease.write("SET", "{ar}:v", "x"),
            lambda: lease.write_batch([("SET", "{ar}:v", "x")]),
            lease.check,
        ):
            with pytest.raises(dlock.InvalidRequest, match="Redlock"):
                await call()
        assert await lease.release()

    asyncio.run(asyncio.wait_for(main(), 60))
    for s in [server] + others:
        assert calls(s.conn(), "dlock.guard") == 0 and calls(s.conn(), "dlock.check") == 0


def test_guarded_writes_on_a_cluster(api, cluster3):
    c = cluster3
    locker = api.cluster([c.node(c.masters()[0]).url])
    for i in range(6):
        res = f"{{gc{i}}}"
        lease = locker.lock(res, ttl=30, watchdog=False).acquire(blocking=False)
        assert lease.write("SET", f"{res}:v", i) == b"OK"
        assert lease.write_batch([("INCR", f"{res}:v"), ("GET", f"{res}:v")]) == [i + 1, str(i + 1).encode()]
        owner = c.node(c.node_for_slot(c.key_slot(res)))
        assert owner.conn().get(f"{res}:v") == str(i + 1).encode()
        assert lease.check() is True and locker.check(res, lease.fence) is True
        # A key in another slot is refused by the cluster: nothing written.
        with pytest.raises(dlock.Refused) as e:
            lease.write("SET", "elsewhere", "x")
        assert e.value.code == "CROSSSLOT"
        assert lease.release()
        assert locker.check(res, lease.fence) is False


def test_guarded_writes_from_threads_share_one_lease(server):
    locker = dlock.Locker(server.url)
    with locker.lock("{th}", ttl=30) as lease:
        errors = []

        def bump():
            try:
                for _ in range(20):
                    lease.write("INCR", "{th}:n")
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=bump) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not errors
    assert server.conn().get("{th}:n") == b"80"


def test_a_pooled_connection_the_server_closed_is_probed_first(api, server):
    """The server closed the idle connection (its timeout, a restart): the
    PING before the write finds it, and the write goes on a new one, once,
    instead of failing as 'may have run'."""
    locker = api.locker(server.url)
    lease = locker.lock("{k}", ttl=30, watchdog=False).acquire(blocking=False)
    assert lease.write("SET", "{k}:n", 0) == b"OK"
    c = server.conn()
    assert c.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 1
    assert lease.write("INCR", "{k}:n") == 1
    assert c.get("{k}:n") == b"1"
    assert lease.release()


def test_a_guarded_write_follows_its_slot_when_it_moves(api, cluster3):
    c = cluster3
    locker = api.cluster([c.node(c.masters()[0]).url])
    res = f"{{gmove-{api.name}}}"
    slot = c.key_slot(res)
    src = c.node_for_slot(slot)
    dst = next(m for m in c.masters() if m != src)
    lease = locker.lock(res, ttl=60, watchdog=False).acquire(blocking=False)
    assert lease.write("SET", f"{res}:v", "before") == b"OK"
    c.migrate_slot(slot, src, dst)
    # The locker's map is stale: MOVED, followed to the new master, where
    # the hold moved with its key.
    assert lease.write("APPEND", f"{res}:v", "+after") == len("before+after")
    assert c.node(dst).conn().get(f"{res}:v") == b"before+after"
    assert lease.check() is True
    assert lease.release()


def test_a_command_the_users_acl_denies_is_refused(api, server):
    c = server.conn()
    c.execute_command("ACL", "SETUSER", "writer", "on", ">pw", "+@all", "-set", "~*", "&*")
    locker = api.locker(f"redis://writer:pw@127.0.0.1:{server.port}/0")
    lease = locker.lock("{acl}", ttl=30, watchdog=False).acquire(blocking=False)
    with pytest.raises(dlock.Refused) as e:
        lease.write("SET", "{acl}:v", "x")
    assert e.value.code == "NOPERM"
    assert c.get("{acl}:v") is None and not lease.lost
    assert lease.write("INCR", "{acl}:n") == 1
    assert lease.release()


def test_an_error_reply_that_ran_nothing_is_retried_then_reported(api, server, make_server):
    """READONLY (the server became a replica) runs nothing: the write is
    sent again while retry_for lasts, then reported as unavailable, never
    as 'may have run' nor as the command's own refusal."""
    master = make_server()
    locker = api.locker(server.url, retry_for=1)
    lease = locker.lock("{ro}", ttl=60, watchdog=False).acquire(blocking=False)
    c = server.conn()
    c.execute_command("REPLICAOF", "127.0.0.1", master.port)
    try:
        with pytest.raises(dlock.Unavailable) as e:
            lease.write("SET", "{ro}:v", "x")
        assert "READONLY" in str(e.value) and "may or may not" not in str(e.value)
        assert not isinstance(e.value, dlock.Refused)
        assert calls(c, "dlock.guard") == 0
    finally:
        c.execute_command("REPLICAOF", "NO", "ONE")
