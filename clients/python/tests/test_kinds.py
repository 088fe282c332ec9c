"""Every kind of lock on one real server: plain, read/write, semaphore,
reentrant, sets; the lease's fence, token and deadline; errors."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import dlock
from harness import holder, holds, dead_url


@pytest.fixture
def locker(server):
    with dlock.Locker(server.conn()) as lk:
        yield lk


def test_a_plain_lock_yields_its_fence_token_and_deadline(server, locker):
    c = server.conn()
    t0 = time.monotonic()
    with locker.lock("orders:42", ttl=30) as lease:
        assert holder(c, "orders:42") == (lease.token, lease.fence)
        assert len(lease.token) == 32 and lease.fence > 0
        assert lease.resource == "orders:42" and lease.resources == ["orders:42"]
        # The budget counts from the send: never later than the server's
        # deadline (PTTL read after it).
        pttl = c.pttl("orders:42")
        assert t0 < lease.deadline <= time.monotonic() + pttl / 1000 + 0.001
        assert 29 < lease.remaining() <= 30
        assert not lease.lost
        # Busy: a single try answers None, the context manager raises.
        assert locker.lock("orders:42", blocking=False).acquire() is None
        with pytest.raises(dlock.NotAcquired):
            with locker.lock("orders:42", blocking=False):
                pass
    assert holder(c, "orders:42") is None
    assert lease.released


def test_acquire_and_release_by_hand(server, locker):
    c = server.conn()
    lock = locker.lock("res", ttl=10)
    lease = lock.acquire(blocking=False)
    assert lease is not None and holder(c, "res") == (lease.token, lease.fence)
    assert lease.extend(20)
    assert 19_000 < c.pttl("res") <= 20_000
    assert lease.ttl == 20
    assert lease.release() is True
    assert lease.release() is False, "a second release asks nobody"
    assert holder(c, "res") is None
    again = lock.acquire(blocking=False)
    assert again is not None and again.fence > lease.fence, "fences only grow"
    again.release()


def test_read_write_locks(server, locker):
    c = server.conn()
    r1 = locker.read_lock("doc").acquire(blocking=False)
    r2 = locker.read_lock("doc").acquire(blocking=False)
    assert r1 and r2 and holds(c, "doc") == 2
    assert locker.write_lock("doc").acquire(blocking=False) is None
    # A queued writer is not passed by a new reader (fair).
    got = []
    writer = threading.Thread(target=lambda: got.append(locker.write_lock("doc", wait=10).acquire()))
    writer.start()
    from harness import waiters, wait_until

    wait_until(10, "the writer queued", lambda: waiters(c, "doc") == 1)
    assert locker.read_lock("doc").acquire(blocking=False) is None
    assert r1.release() and r2.release()
    writer.join(10)
    w = got[0]
    assert w is not None and w.fence > max(r1.fence, r2.fence)
    assert holder(c, "doc") == (w.token, w.fence)
    assert w.release()


def test_semaphores(server, locker):
    sem = locker.semaphore("pool:db", 3)
    permits = [sem.acquire(blocking=False) for _ in range(3)]
    assert all(permits) and len({p.fence for p in permits}) == 3
    assert sem.acquire(blocking=False) is None
    info = locker.info("pool:db")
    assert info["kind"] == "semaphore" and info["limit"] == 3 and len(info["holds"]) == 3
    # A request with another LIMIT is the server's error, not "busy".
    with pytest.raises(dlock.ServerError, match="LIMIT 3"):
        locker.semaphore("pool:db", 5).acquire(blocking=False)
    assert permits[0].release()
    p = sem.acquire(blocking=False)
    assert p is not None
    for q in permits[1:] + [p]:
        assert q.release()
    assert locker.info("pool:db") is None


def test_reentrant_locks_nest_per_thread(server, locker):
    c = server.conn()
    lock = locker.reentrant_lock("job:7")
    with lock as outer:
        with lock as inner:
            assert inner.fence == outer.fence and inner.token != outer.token
            assert holds(c, "job:7") == 2
            # Another thread is another owner: excluded.
            other = []
            t = threading.Thread(target=lambda: other.append(lock.acquire(blocking=False)))
            t.start()
            t.join(10)
            assert other == [None]
        assert holds(c, "job:7") == 1, "the outer hold stays"
    assert holder(c, "job:7") is None
    # An explicit owner shared by two processes' worth of locks.
    a = locker.reentrant_lock("job:8", owner="worker-9").acquire(blocking=False)
    b = locker.reentrant_lock("job:8", owner="worker-9").acquire(blocking=False)
    assert a and b and a.fence == b.fence
    assert locker.reentrant_lock("job:8", owner="worker-3").acquire(blocking=False) is None
    assert a.release() and b.release()


def test_sets_are_all_or_nothing_with_one_fence(server, locker):
    c = server.conn()
    with locker.multi_lock(["{acct}:alice", "{acct}:bob", "{acct}:fees"], ttl=30) as s:
        assert len(s.resources) == 3
        for r in s.resources:
            assert holder(c, r) == (s.token, s.fence)
        assert locker.multi_lock(["{acct}:bob", "{acct}:carol"]).acquire(blocking=False) is None
        assert holder(c, "{acct}:carol") is None, "carol stays free"
        assert s.extend(30)
    for r in ("{acct}:alice", "{acct}:bob", "{acct}:fees"):
        assert holder(c, r) is None
    r1 = locker.multi_lock(["x1", "x2"], shared=True).acquire(blocking=False)
    r2 = locker.multi_lock(["x1", "x2"], shared=True).acquire(blocking=False)
    assert r1 and r2 and holds(c, "x1") == 2
    assert r1.release() and r2.release()


def test_a_set_with_a_lost_member_is_lost(server, locker):
    c = server.conn()
    s = locker.multi_lock(["{j}:a", "{j}:b"], ttl=30).acquire(blocking=False)
    c.delete("{j}:b")
    assert s.extend(30) is False
    assert s.lost and s.lost_event.is_set()
    assert s.release() is False
    assert holder(c, "{j}:a") is None, "the other member was released all the same"


def test_invalid_requests_ask_no_server():
    lk = dlock.Locker(dead_url())
    for bad in (
        lambda: lk.lock("r", ttl=0),
        lambda: lk.lock("r", ttl=0.0004),
        lambda: lk.lock("r", ttl=2**47 / 1000 + 1),
        lambda: lk.lock(""),
        lambda: lk.semaphore("r", 0),
        lambda: lk.semaphore("r", 2**20 + 1),
        lambda: lk.lock("r", shared=True, limit=2),
        lambda: lk.lock("r", owner=""),
        lambda: lk.multi_lock(["a", "a"]),
        lambda: lk.multi_lock([f"k{i}" for i in range(65)]),
        lambda: lk.lock("r", token=""),
        lambda: lk.lock("r", wait=float("nan")),
        lambda: lk.lock(["a", "b"], owner="o"),
    ):
        with pytest.raises(dlock.InvalidRequest):
            bad()
    with pytest.raises(ValueError):
        lk.lock("r", ttl=-1)


def test_a_server_without_the_module_is_named(make_server):
    plain = make_server(module=False)
    lk = dlock.Locker(plain.url)
    with pytest.raises(dlock.ModuleNotLoaded) as e:
        lk.lock("r", token="sekret-token", blocking=False).acquire()
    msg = str(e.value)
    assert plain.addr in msg and "loadmodule" in msg and "MODULE LOAD" in msg
    assert "sekret-token" not in msg
    with pytest.raises(dlock.ModuleNotLoaded):
        lk.info("r")


def test_wrong_password_and_acl_denial(server):
    server.conn().execute_command(
        "ACL", "SETUSER", "reader", "on", ">pw", "~*", "&*", "+@all", "-dlock.acquire"
    )
    wrong = dlock.Locker(f"redis://reader:nope@127.0.0.1:{server.port}/0")
    with pytest.raises(dlock.Denied, match="authentication failed"):
        wrong.lock("r", blocking=False).acquire()
    reader = dlock.Locker(f"redis://reader:pw@127.0.0.1:{server.port}/0")
    assert reader.info("r") is None
    with pytest.raises(dlock.Denied, match="NOPERM"):
        reader.lock("r", blocking=False).acquire()


def test_extend_and_release_by_token(server, locker):
    c = server.conn()
    lease = locker.lock("job", ttl=10).acquire(blocking=False)
    tok = lease.token
    assert locker.extend_token("job", tok, 60)
    assert c.pttl("job") > 30_000
    assert not locker.extend_token("job", "someone-else", 60)
    assert not locker.release_token("job", "someone-else")
    assert locker.release_token("job", tok)
    assert holder(c, "job") is None
    assert not locker.release_token("job", tok)
    with pytest.raises(dlock.InvalidRequest):
        locker.extend_token("job", "", 1)


def test_a_given_token_is_a_retry_of_that_acquisition(server, locker):
    tok = dlock.new_token()
    a = locker.lock("r", token=tok).acquire(blocking=False)
    b = locker.lock("r").acquire(blocking=False, token=tok)
    assert a and b and a.fence == b.fence, "same token: the same hold, the same fence"
    assert holds(server.conn(), "r") == 1
    assert b.release()
    assert a.release() is False


def test_a_client_with_resp3_and_decoded_responses_works(server):
    lk = dlock.Locker(redis.Redis(port=server.port, protocol=3, decode_responses=True))
    with lk.lock("r3") as lease:
        info = lk.info("r3")
        assert info["token"] == lease.token and info["fence"] == lease.fence
