"""Redlock over 5 independent servers: quorum, servers killed and paused,
the undo of grants that do not count, waiting, renewal and loss."""

from __future__ import annotations

import threading
import time

import pytest

import dlock
from harness import holder, wait_until


@pytest.fixture
def five(make_server):
    return [make_server() for _ in range(5)]


def redlock(servers, **kw):
    kw.setdefault("node_timeout", 0.2)  # a loaded 2-core CI: honest margins
    return dlock.Redlock([s.url for s in servers], **kw)


def held_on(servers, res):
    return [holder(s.conn(), res) for s in servers]


def test_granted_by_all_and_released_everywhere(five):
    rl = redlock(five)
    assert rl.quorum == 3
    with rl.lock("res", ttl=10) as lease:
        assert all(f is not None for f in lease.fences) and len(lease.fences) == 5
        assert lease.fence == max(lease.fences)
        assert held_on(five, "res") == [(lease.token, f) for f in lease.fences]
        # Valid from before the first send, less the drift (1% + 2 ms).
        assert lease.remaining() <= 10 - 0.102
        assert rl.lock("res", blocking=False).acquire() is None
        assert lease.extend(10)
    assert held_on(five, "res") == [None] * 5
    r = rl.read_lock("doc").acquire(blocking=False)
    r2 = rl.read_lock("doc").acquire(blocking=False)
    assert r and r2
    assert r.release() and r2.release()
    with rl.multi_lock(["{s}:a", "{s}:b"]) as s:
        assert all(f is not None for f in s.fences)
    with pytest.raises(dlock.InvalidRequest):
        rl.semaphore("sem", 2)
    with pytest.raises(dlock.InvalidRequest, match="same server"):
        dlock.Redlock([five[0].url, f"redis://localhost:{five[0].port}/0"])


def test_two_killed_still_grant_three_killed_is_no_quorum_in_time(five):
    rl = redlock(five)
    five[0].kill9()
    five[1].kill9()
    lease = rl.lock("res", ttl=10).acquire(blocking=False)
    assert lease is not None
    assert lease.fences[0] is None and lease.fences[1] is None
    assert all(f is not None for f in lease.fences[2:])
    assert lease.release()
    five[2].kill9()
    t0 = time.monotonic()
    with pytest.raises(dlock.NoQuorum) as e:
        rl.lock("res", ttl=10).acquire(blocking=False)
    assert time.monotonic() - t0 < 0.2 + 1.0, "about the node timeout"
    assert e.value.nodes == 5 and e.value.granted <= 2
    assert held_on(five[3:], "res") == [None, None], "the grants that did not count were undone"


def test_three_paused_is_refused_and_nothing_is_held_once_they_run(five):
    rl = redlock(five)
    for s in five[:3]:
        s.stop()
    try:
        t0 = time.monotonic()
        with pytest.raises(dlock.NoQuorum):
            rl.lock("res", ttl=10).acquire(blocking=False)
        assert time.monotonic() - t0 < 0.2 + 1.0
    finally:
        for s in five[:3]:
            s.cont()
    # The paused servers run the ACQUIRE late, then the RELEASE written
    # behind it.
    wait_until(5, "nothing held", lambda: held_on(five, "res") == [None] * 5)


def test_waiting_clients_each_get_the_lock(five):
    servers = five[:3]
    rl = redlock(servers)
    got = []
    lock = threading.Lock()

    def worker(i):
        for _ in range(3):
            lease = rl.lock("res", ttl=2, wait=20).acquire()
            assert lease is not None
            with lock:
                got.append(i)
            time.sleep(0.02)
            assert lease.release()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(40)
    assert sorted(got) == [0, 0, 0, 1, 1, 1, 2, 2, 2], "no livelock"


def test_the_watchdog_renews_and_loss_needs_a_majority_of_zeros(five):
    rl = redlock(five)
    lost = []
    lease = rl.lock("res", ttl=0.9, watchdog=True, on_lost=lost.append).acquire(blocking=False)
    time.sleep(2.0)
    assert not lease.lost and all(h is not None for h in held_on(five, "res"))
    five[0].conn().delete("res")
    five[1].conn().delete("res")
    time.sleep(0.8)
    assert not lease.lost, "3 of 5 still hold it: renewed"
    five[2].conn().delete("res")
    assert lease.lost_event.wait(0.9 / 3 + 0.7), "loss signalled"
    assert lost == [lease]
    assert lease.release() is False


def test_leaving_a_block_whose_redlock_lease_was_lost_raises(five):
    rl = redlock(five[:3])
    with pytest.raises(dlock.LockLost):
        with rl.lock("res", ttl=1.0) as lease:
            for s in five[:2]:
                s.conn().delete("res")
            assert lease.wait_lost(2.0)


def test_extend_with_three_paused_keeps_the_budget_and_succeeds_after(five):
    rl = redlock(five)
    lease = rl.lock("res", ttl=30).acquire(blocking=False)
    before = lease.deadline
    for s in five[:3]:
        s.stop()
    try:
        with pytest.raises(dlock.NoQuorum):
            lease.extend(30)
        assert lease.deadline == before and not lease.lost
    finally:
        for s in five[:3]:
            s.cont()
    assert lease.extend(30)
    assert lease.deadline > before
    assert lease.release()
    assert rl.release_token("res", lease.token) is False
