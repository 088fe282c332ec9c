"""Leader election's rules (dlock._core.election), without a server: who
leads according to every reply form, the candidate's token and id, the
command an observer sends, and how it goes on after a reply, a wait that
ran out, or a failure."""

from __future__ import annotations

import pytest

from dlock._core.election import (
    OBSERVE_CHUNK_MS,
    HandingOver,
    Leads,
    NoLeader,
    Nobody,
    Observation,
    candidate_token,
    id_of,
    id_problem,
    leader_of,
    observe_cmd,
    parse_observed,
    pause_after,
)

PLAIN = {b"token": b"w7/abc", b"fence": 42, b"ttl": 900, b"waiters": 0}
RESERVED = {b"token": None, b"fence": 0, b"ttl": -2, b"waiters": 1}


def hold(token: bytes, fence: int) -> dict:
    return {b"token": token, b"owner": token, b"fence": fence, b"ttl": 500, b"mode": b"shared"}


@pytest.mark.parametrize(
    "info, leader",
    [
        (None, Nobody()),
        (PLAIN, Leads("w7", 42, "w7/abc")),
        # RESP2: a flat array of pairs.
        ([b"token", b"w7/abc", b"fence", 42, b"ttl", 900, b"waiters", 0], Leads("w7", 42, "w7/abc")),
        # A token without a '/' is its own id; the id is before the last '/'.
        ({b"token": b"abc", b"fence": 7}, Leads("abc", 7, "abc")),
        ({b"token": b"a/b/c", b"fence": 7}, Leads("a/b", 7, "a/b/c")),
        (RESERVED, HandingOver()),
        ([b"token", None, b"fence", 0, b"ttl", -2, b"waiters", 1], HandingOver()),
        # The list form: one hold is the leader; none is nobody.
        ({b"kind": b"semaphore", b"limit": 3, b"waiters": 0, b"holds": [hold(b"p/1", 9)]}, Leads("p", 9, "p/1")),
        ([b"kind", b"rwlock", b"limit", 1, b"waiters", 2, b"holds", []], Nobody()),
        # A token that is not UTF-8 still names a leader.
        ({b"token": b"\xff/x", b"fence": 1}, Leads("\ufffd", 1, "\ufffd/x")),
    ],
)
def test_the_leader_is_read_from_every_reply_form(info, leader):
    assert leader_of(info) == leader


@pytest.mark.parametrize(
    "kind, n",
    [(b"rwlock", 2), (b"semaphore", 3)],
)
def test_several_holders_name_no_leader(kind, n):
    info = {b"kind": kind, b"limit": 5, b"waiters": 0, b"holds": [hold(b"r%d" % i, i + 1) for i in range(n)]}
    with pytest.raises(NoLeader, match=f"no leader: {n} holders share the resource \\(a {kind.decode()}\\)"):
        leader_of(info)


@pytest.mark.parametrize(
    "info",
    [
        3,
        b"x",
        {b"token": b"x"},  # no fence
        {b"token": b"x", b"fence": b"1"},
        {b"token": b"x", b"fence": -1},
        {b"token": b"x", b"fence": True},
        {b"holds": 1},
        {b"holds": [3]},
        [b"token"],
        [1, 2],
    ],
)
def test_garbage_is_an_error_never_a_crash(info):
    with pytest.raises(NoLeader):
        leader_of(info)


def test_an_observe_reply_is_a_version_and_a_state_or_nil():
    assert parse_observed(None) is None
    assert parse_observed([b"0000000000000000", None]) == ("0000000000000000", None)
    assert parse_observed([b"5f0d2c1e9a7b3341", PLAIN]) == ("5f0d2c1e9a7b3341", PLAIN)
    for bad in (1, [b"v"], [b"v", None, None], [7, None]):
        with pytest.raises(NoLeader):
            parse_observed(bad)


@pytest.mark.parametrize(
    "id, problem",
    [
        (None, None),
        ("worker-7", None),
        ("", "must not be empty"),
        ("a/b", "must not contain '/'"),
        (b"w", "is a str"),
        (7, "is a str"),
        ("\udcff", "UTF-8"),
    ],
)
def test_an_id_is_a_non_empty_str_without_a_slash(id, problem):
    got = id_problem(id)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got


def test_the_token_is_the_id_a_slash_and_the_random_part():
    assert candidate_token(None, "r4nd") is None
    assert candidate_token("worker-7", "r4nd") == "worker-7/r4nd"
    assert id_of("worker-7/r4nd") == "worker-7"
    assert id_of("r4nd") == "r4nd"


def test_the_command_waits_only_with_a_version_and_at_least_a_millisecond():
    assert observe_cmd("e", None, None) == ("DLOCK.OBSERVE", "e")
    assert observe_cmd("e", None, 500) == ("DLOCK.OBSERVE", "e")
    assert observe_cmd("e", "v", None) == ("DLOCK.OBSERVE", "e", "SINCE", "v")
    # The server's WAIT 0 waits forever: a wait used up is a look.
    assert observe_cmd("e", "v", 0) == ("DLOCK.OBSERVE", "e", "SINCE", "v")
    assert observe_cmd("e", "v", 250) == ("DLOCK.OBSERVE", "e", "SINCE", "v", "WAIT", 250)


def test_an_observation_reports_now_then_each_change_once():
    o = Observation("e", retry_for=2.0)
    # The first look does not wait.
    assert o.command(0.0, None) == ("DLOCK.OBSERVE", "e")
    assert o.take([b"0000000000000000", None]) == Nobody()
    # Then it waits in chunks, from the version seen, cut at a deadline.
    assert o.command(1.0, None) == ("DLOCK.OBSERVE", "e", "SINCE", "0000000000000000", "WAIT", OBSERVE_CHUNK_MS)
    assert o.command(1.0, 1.25) == ("DLOCK.OBSERVE", "e", "SINCE", "0000000000000000", "WAIT", 250)
    assert o.command(2.0, 1.25) == ("DLOCK.OBSERVE", "e", "SINCE", "0000000000000000")
    # A wait that ran out reports nothing and keeps the version.
    assert o.take(None) is None and o.version == "0000000000000000"
    assert o.take([b"aaaaaaaaaaaaaaaa", PLAIN]) == Leads("w7", 42, "w7/abc")
    # The same holders under another version (another server process, a
    # failover): not a change.
    assert o.take([b"bbbbbbbbbbbbbbbb", PLAIN]) is None and o.version == "bbbbbbbbbbbbbbbb"
    assert o.take([b"cccccccccccccccc", RESERVED]) == HandingOver()
    assert o.take([b"0000000000000000", None]) == Nobody()


def test_several_holders_are_an_error_and_the_next_call_waits_for_a_change():
    o = Observation("e", retry_for=2.0)
    shared = {b"kind": b"rwlock", b"limit": 1, b"waiters": 0, b"holds": [hold(b"r1", 1), hold(b"r2", 2)]}
    with pytest.raises(NoLeader):
        o.take([b"dddddddddddddddd", shared])
    assert o.command(0.0, None)[3] == "dddddddddddddddd"
    # One reader left: it leads; and the state before the error is told
    # again if it comes back.
    assert o.take([b"eeeeeeeeeeeeeeee", {b"kind": b"rwlock", b"holds": [hold(b"r1", 1)]}]) == Leads("r1", 1, "r1")


def test_failures_are_retried_for_retry_for_then_given_up_and_counted_afresh():
    o = Observation("e", retry_for=1.0)
    o.take([b"aaaaaaaaaaaaaaaa", PLAIN])
    t, pauses = 10.0, []
    while True:
        p = o.failed(True, t, None, 0.5)
        if p is None:
            break
        assert 0 < p <= 1.0
        pauses.append(p)
        t += p
    assert pauses and 10.0 + sum(pauses) < 11.0 and len(pauses) < 20
    # The version is kept: the next call resumes from the last state seen.
    assert o.version == "aaaaaaaaaaaaaaaa" and o.command(t, None)[3] == "aaaaaaaaaaaaaaaa"
    # Given up: the next call's failures get a retry_for of their own.
    assert o.failed(True, t + 5, None, 0.5) is not None
    # A reply ends the run of failures.
    o.take(None)
    assert o.failing_since is None and o.attempt == 0
    # A deadline cuts the retries short; a refusal is not retried.
    assert o.failed(True, 20.0, 20.01, 0.5) is None
    assert o.failed(False, 30.0, None, 0.5) is None and o.failing_since is None


def test_a_call_is_done_with_a_change_or_at_its_deadline():
    o = Observation("e", retry_for=2.0)
    assert o.request(0.0, 5.0) == (("DLOCK.OBSERVE", "e"), 0.0)
    assert o.answer([b"0000000000000000", None], 0.0, 5.0) == (True, Nobody())
    cmd, waits = o.request(1.0, 5.0)
    assert cmd[-2:] == ("WAIT", 4000) and waits == 4.0
    # The wait ran out, or nothing new: again until the deadline, then done.
    assert o.answer(None, 4.0, 5.0) == (False, None)
    assert o.answer([b"0000000000000000", None], 4.5, 5.0) == (False, None)
    assert o.answer(None, 5.0, 5.0) == (True, None)
    assert o.answer(None, 99.0, None) == (False, None)
    # Past the deadline, one look without a wait.
    assert o.request(6.0, 5.0) == (("DLOCK.OBSERVE", "e", "SINCE", "0000000000000000"), 0.0)


def test_pauses_grow_and_are_jittered_within_bounds():
    assert pause_after(0, 0.0) == pytest.approx(0.025)
    assert pause_after(0, 1.0) == pytest.approx(0.05)
    assert pause_after(10, 1.0) == pytest.approx(1.0)
    assert pause_after(10, 5.0) == pytest.approx(1.0) and pause_after(3, -1.0) > 0


def test_a_leaders_repr_shows_no_token():
    """The token releases or renews the leader's lease: no message shows it."""
    lead = Leads("w1", 7, "w1/62bb1409be95dbe2a90f5d39716ecfeb")
    assert "62bb1409" not in repr(lead) and "62bb1409" not in str(lead)
    assert "w1" in repr(lead) and "7" in repr(lead)
