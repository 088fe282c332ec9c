"""Pure logic, without a server: commands, durations, Redlock arithmetic,
the RESP reader, error classification."""

from __future__ import annotations

import datetime
import random

import pytest
import redis

import dlock
from dlock import _resp
from dlock._core.lease import budget_over
from dlock._core.retry import Outage, backoff
from dlock._spec import Spec, now, to_ms, ttl_ms
from dlock.errors import ASK, FATAL, MOVED, RETRY, classify
from dlock.locker import _redact
from dlock.redlock import Tally, attempt_wait, quorum, valid_until


def test_a_passed_budget_is_never_revived():
    # A renewal may move the deadline only while the budget lasts.
    assert budget_over(False, 10.0, 9.999) is False
    assert budget_over(False, 10.0, 10.0) is True, "at the deadline the budget has passed"
    assert budget_over(False, 10.0, 11.0) is True
    assert budget_over(True, 10.0, 0.0) is True, "a lost lease stays lost"


def test_permits_are_sent_only_above_one_and_checked_against_the_limit():
    weighted = Spec(["r"], limit=4, permits=3)
    assert weighted.acquire_cmd("t", None) == ("DLOCK.ACQUIRE", "r", "t", 30000, "LIMIT", 4, "PERMITS", 3)
    assert "PERMITS" not in Spec(["r"], limit=4, permits=1).acquire_cmd("t", None)
    for limit, bad in ((4, 5), (4, 0), (4, 1.5), (4, True), (4, "2"), (None, 2), (1, 1)):
        with pytest.raises(dlock.InvalidRequest):
            Spec(["r"], limit=limit, permits=bad)


def test_commands_for_single_resources_and_sets():
    s = Spec(["r"], ttl=1.5, limit=1, owner="app")
    assert s.acquire_cmd("t", 200) == ("DLOCK.ACQUIRE", "r", "t", 1500, "LIMIT", 1, "OWNER", "app", "WAIT", 200)
    assert s.release_cmd("t") == ("DLOCK.RELEASE", "r", "t")
    # WAIT 0 would wait forever: a wait used up is a plain try.
    for w in (0, None, -5):
        assert "WAIT" not in s.acquire_cmd("t", w)
    ranked = Spec(["r"], priority=7)
    assert ranked.acquire_cmd("t", 200) == ("DLOCK.ACQUIRE", "r", "t", 30000, "PRIORITY", 7, "WAIT", 200)
    for bad in (-1, 1001, 1.5, "3", True):
        with pytest.raises(dlock.InvalidRequest):
            Spec(["r"], priority=bad)
    assert "PRIORITY" in Spec(["r"], priority=1000).acquire_cmd("t", None)
    st = Spec(["{o}a", "{o}b"], shared=True)
    assert st.acquire_cmd("t", None) == ("DLOCK.MACQUIRE", 2, "{o}a", "{o}b", "t", 30000, "SHARED")
    assert st.extend_cmd("t", 2000) == ("DLOCK.MEXTEND", 2, "{o}a", "{o}b", "t", 2000)
    assert st.released(2) is True and st.released(1) is False and st.released(b"x") is None


def test_durations_are_whole_milliseconds_and_forever_saturates():
    assert to_ms(0.57) == 570
    assert to_ms(datetime.timedelta(seconds=1.5)) == 1500
    assert to_ms(float("inf")) == 2**47
    assert to_ms(10**12) == 2**47
    assert to_ms(-3) == 0
    assert ttl_ms(0.0019) == 1, "1.9 ms is a 1 ms lease"
    with pytest.raises(dlock.InvalidRequest):
        ttl_ms(0.0009)
    with pytest.raises(dlock.InvalidRequest):
        ttl_ms(2**47 / 1000 + 1)
    with pytest.raises(dlock.InvalidRequest):
        to_ms("5")  # type: ignore[arg-type]


def test_backoff_and_outages_end_at_the_deadline_or_after_retry_for():
    for a in range(10):
        assert 0.020 <= backoff(a, random.randrange) <= 0.200
    assert Outage(now, random.randrange).next_pause(1e9, now() + 1e9) is not None
    assert Outage(now, random.randrange).next_pause(0, now() + 1e9) is None
    assert Outage(now, random.randrange).next_pause(1e9, now()) is None


def test_redlock_arithmetic():
    assert [quorum(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]
    t0 = 1000.0
    assert valid_until(t0, 10_000, t0) == pytest.approx(t0 + 9.898)
    assert valid_until(t0, 10_000, t0 + 9.898) is None
    assert valid_until(t0, 2, t0) is None, "a ttl below the drift has no validity"
    assert attempt_wait(60, 30_000, 0.1) == 3.0
    assert attempt_wait(0.5, 30_000, 0.1) == 0.5
    assert attempt_wait(60, 600, 0.1) == 0.1
    assert attempt_wait(60, 150, 0.1) == pytest.approx(0.05)

    def tally(n, yes, no, failed):
        t = Tally(n)
        t.yes, t.no, t.failed = yes, no, failed
        return t

    assert not tally(5, 2, 1, 1).hopeless() and tally(5, 2, 2, 1).hopeless()
    assert tally(5, 0, 0, 3).miss() == "unreachable"
    assert tally(5, 0, 1, 2).miss() == "busy"
    assert tally(5, 3, 0, 0).miss() == "slow"
    assert tally(5, 2, 3, 0).renewal() == "lost"
    assert tally(5, 2, 2, 1).renewal() == "failed", "the failed one may still hold it"
    assert tally(4, 2, 2, 0).renewal() == "lost"


class _FakeSock:
    def __init__(self, chunks):
        self.chunks = list(chunks)

    def recv(self, n):
        return self.chunks.pop(0) if self.chunks else b""


class _FakeConn:
    def __init__(self, chunks):
        self._sock = _FakeSock(chunks)


def test_the_resp_reader_takes_replies_in_pieces_and_errors_in_place():
    c = _FakeConn([b":17", b"\r\n$-1\r\n-ERR syntax", b" error\r\n+OK\r\n*2\r\n:1\r\n$3\r\nabc\r\n"])
    out = _resp.read(c, 5)
    assert out[0] == 17 and out[1] is None and out[3] == b"OK" and out[4] == [1, b"abc"]
    assert isinstance(out[2], redis.exceptions.ResponseError) and "syntax error" in str(out[2])
    resp3 = _FakeConn([b">2\r\n$10\r\ninvalidate\r\n_\r\n%1\r\n+k\r\n:2\r\n_\r\n#t\r\n"])
    assert _resp.read(resp3, 3) == [{b"k": 2}, None, True], "a push is skipped"
    with pytest.raises(redis.exceptions.ConnectionError):
        _resp.read(_FakeConn([b":1"]), 1)
    assert _resp.pack([("A", 1, b"x")]) == b"*3\r\n$1\r\nA\r\n$1\r\n1\r\n$1\r\nx\r\n"


def test_error_replies_are_classified():
    def parse(text):
        return _resp.read(_FakeConn([b"-" + text.encode() + b"\r\n"]), 1)[0]

    f = classify(parse("MOVED 3999 127.0.0.1:6381"))
    assert (f.kind, f.addr) == (MOVED, "127.0.0.1:6381")
    f = classify(parse("ASK 3999 127.0.0.1:6382"))
    assert (f.kind, f.addr) == (ASK, "127.0.0.1:6382")
    for t in ("TRYAGAIN x", "LOADING x", "READONLY x", "CLUSTERDOWN x", "UNBLOCKED force unblock"):
        assert classify(parse(t)).kind == RETRY, t
    f = classify(parse("ERR unknown command 'DLOCK.ACQUIRE', with args beginning with: 'r' 'sekret'"))
    assert isinstance(f.error, dlock.ModuleNotLoaded) and "sekret" not in str(f.error)
    assert isinstance(classify(parse("QUARANTINE dlock: refused")).error, dlock.Quarantined)
    assert isinstance(classify(parse("NOPERM no")).error, dlock.Denied)
    e = classify(parse("ERR syntax error"))
    assert e.kind == FATAL and str(e.error) == "ERR syntax error"
    assert str(classify(parse("WRONGTYPE Operation")).error).startswith("WRONGTYPE")
    assert classify(redis.exceptions.TimeoutError("t")).kind == RETRY
    assert classify(redis.exceptions.ConnectionError("c")).kind == RETRY
    assert isinstance(classify(redis.exceptions.AuthenticationError("a")).error, dlock.Denied)


def test_passwords_are_masked():
    assert _redact("redis://u:pw@h:1/0") == "redis://u:***@h:1/0"
    assert _redact("redis://:pw@h/") == "redis://:***@h/"
    assert _redact("redis://h:1/") == "redis://h:1/"
    with pytest.raises(dlock.InvalidRequest) as e:
        dlock.Locker("redis://u:sekret@h:notaport/")
    assert "sekret" not in str(e.value)
    # redis-py also takes the password from the query.
    assert _redact("unix:///tmp/s?db=1&password=pw") == "unix:///tmp/s?db=1&password=***"
    with pytest.raises(dlock.InvalidRequest) as e:
        dlock.Locker("redis://h:notaport/?password=sekret")
    assert "sekret" not in str(e.value)
