"""The Redlock rules (``dlock._core.redlock``) on their own: tables of
answers and instants in, verdicts out. No server, no clock, no randomness:
times and draws are passed in."""

from __future__ import annotations

import pytest

from dlock._core.redlock import (
    ANSWERED,
    BUSY,
    EXTENDED,
    FAILED,
    LOST,
    REFUSED,
    SLACK,
    SLOW,
    TOO_LATE,
    UNREACHABLE,
    UNREACHED,
    Acquiring,
    Attempt,
    Tally,
    attempt_wait,
    backoff,
    drift_ms,
    first_duplicate,
    judge_extend,
    quorum,
    released,
    renewal,
    tally_round,
    valid_until,
)

T0 = 1000.0


@pytest.mark.parametrize("n,q", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)])
def test_quorum_is_a_majority(n, q):
    assert quorum(n) == q
    assert 2 * q > n, "two majorities share a server"


@pytest.mark.parametrize("ttl_ms,drift", [(10_000, 102.0), (1_000, 12.0), (100, 3.0), (2, 2.02), (1, 2.01)])
def test_drift_is_a_hundredth_plus_2ms(ttl_ms, drift):
    assert drift_ms(ttl_ms) == pytest.approx(drift)


@pytest.mark.parametrize(
    "sent,ttl_ms,t,expected",
    [
        (T0, 10_000, T0, T0 + 9.898),
        (T0, 10_000, T0 + 9.897, T0 + 9.898),
        (T0, 10_000, T0 + 9.898, None),  # over at the instant itself
        (T0, 10_000, T0 + 20, None),
        (T0, 2, T0, None),  # a ttl below the drift has no validity
        (T0, 3, T0, T0 + 0.00097),
    ],
)
def test_valid_until_counts_from_the_first_send_less_the_drift(sent, ttl_ms, t, expected):
    got = valid_until(sent, ttl_ms, t)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    "remaining,ttl_ms,node_timeout,expected",
    [
        (60, 30_000, 0.1, 3.0),  # a tenth of the ttl
        (0.5, 30_000, 0.1, 0.5),  # never past the caller's wait
        (60, 600, 0.1, 0.1),  # at least the node timeout
        (60, 150, 0.1, 0.05),  # at most a third of the ttl
        (0.0, 30_000, 0.1, 0.0),
    ],
)
def test_attempt_wait(remaining, ttl_ms, node_timeout, expected):
    assert attempt_wait(remaining, ttl_ms, node_timeout) == pytest.approx(expected)


@pytest.mark.parametrize(
    "tries,draw,expected",
    [
        (0, 0.0, 0.001),
        (0, 0.999999, 0.010),
        (1, 0.999999, 0.020),
        (3, 0.5, 0.041),
        (4, 0.999999, 0.160),
        (40, 0.999999, 0.160),  # capped
        (-1, 0.0, 0.001),
        (0, 1.0, 0.010),  # a draw of exactly 1 stays under the cap
    ],
)
def test_backoff_is_full_jitter_under_a_doubling_cap(tries, draw, expected):
    assert backoff(tries, draw) == pytest.approx(expected)


@pytest.mark.parametrize(
    "places,dup",
    [
        ([("a:1", [("127.0.0.1", 1)], 0), ("b:2", [("127.0.0.2", 2)], 0)], None),
        ([("a:1", [], 0), ("a:1", [], 0)], (0, 1)),
        ([("a:1", [], 0), ("a:1", [], 1)], None),  # another database
        (
            [("localhost:1", [("127.0.0.1", 1)], 0), ("x", [], 0), ("127.0.0.1:1", [("127.0.0.1", 1)], 0)],
            (0, 2),
        ),
        ([], None),
    ],
)
def test_the_same_server_twice_is_found(places, dup):
    assert first_duplicate(places) == dup


def tally(n, yes, no, failed, errors=0):
    t = Tally(n)
    t.yes, t.no = yes, no
    for k in range(failed):
        t.fail(f"e{k}" if k < errors else None)
    return t


@pytest.mark.parametrize(
    "n,yes,no,failed,hopeless,miss,kind",
    [
        (5, 3, 0, 0, False, SLOW, EXTENDED),
        (5, 2, 1, 1, False, BUSY, FAILED),
        (5, 2, 2, 1, True, BUSY, FAILED),  # the failed one may still hold it
        (5, 0, 0, 3, True, UNREACHABLE, FAILED),
        (5, 0, 1, 2, True, BUSY, FAILED),
        (5, 2, 3, 0, True, BUSY, LOST),  # more than N - quorum answered 0
        (5, 0, 2, 0, False, BUSY, FAILED),  # two 0s of five: not lost
        (4, 2, 2, 0, True, BUSY, LOST),
        (3, 1, 2, 0, True, BUSY, LOST),
        (3, 1, 1, 1, True, BUSY, FAILED),
        (1, 0, 1, 0, True, BUSY, LOST),
    ],
)
def test_a_tally(n, yes, no, failed, hopeless, miss, kind):
    t = tally(n, yes, no, failed)
    assert t.hopeless() is hopeless
    assert t.miss() == miss
    assert t.renewal() == kind
    assert t.answered() == yes + no and t.pending() == n - yes - no - failed


def test_the_servers_own_error_only_when_refusals_alone_rule_out_a_quorum():
    assert tally(5, 0, 0, 3, errors=3).refused() == "e0"
    assert tally(5, 0, 0, 3, errors=2).refused() is None, "a no-quorum failure"
    assert tally(3, 0, 0, 2, errors=2).refused() == "e0"


@pytest.mark.parametrize(
    "reply,judged", [(1, True), (0, False), (2, None), (None, None), (True, None), (b"1", None)]
)
def test_an_extend_answer(reply, judged):
    assert judge_extend(reply) is judged


def test_a_rounds_answers_and_what_they_come_to():
    answers = [(ANSWERED, 1), (ANSWERED, 1), (ANSWERED, 0), (UNREACHED, None), (REFUSED, "denied")]
    t = tally_round(answers, judge_extend)
    assert (t.yes, t.no, t.failed, t.errors, t.first_error) == (2, 1, 2, 1, "denied")
    assert renewal(t, T0, 1000, T0 + 0.1) == (FAILED, 0.0)
    assert released(t) is None, "not known: keep the NoQuorum"
    t = tally_round([(ANSWERED, 1)] * 3 + [(ANSWERED, 0)] * 2, judge_extend)
    assert renewal(t, T0, 1000, T0 + 0.1) == (EXTENDED, pytest.approx(T0 + 0.988))
    assert renewal(t, T0, 1000, T0 + 0.988) == (TOO_LATE, 0.0), "renewed too late to count"
    assert released(t) is True
    t = tally_round([(ANSWERED, 0)] * 3 + [(ANSWERED, 1)] * 2, judge_extend)
    assert renewal(t, T0, 1000, T0) == (LOST, 0.0)
    assert released(t) is False
    t = tally_round([(ANSWERED, "weird"), (UNREACHED, None), (ANSWERED, 1)], judge_extend)
    assert (t.yes, t.no, t.failed, t.errors) == (1, 0, 2, 0)


class TestAnAttempt:
    def test_times_without_a_wait(self):
        a = Attempt(3, T0, None, 0.1)
        assert a.wait_until is None and a.reply_by == pytest.approx(T0 + 0.1)
        assert a.collect_until() == pytest.approx(T0 + 0.1 + SLACK)
        assert a.wait_ms(T0) is None
        assert a.undo_by() == pytest.approx(T0 + 0.2 + SLACK)

    def test_every_server_stops_waiting_at_the_same_instant(self):
        a = Attempt(3, T0, 3.0, 0.1)
        assert a.reply_by == pytest.approx(T0 + 3.1)
        assert a.wait_ms(T0) == 3000
        assert a.wait_ms(T0 + 1.0) == 2000
        assert a.wait_ms(T0 + 3.0) is None, "never WAIT 0 (which waits forever)"
        assert a.wait_ms(T0 + 4.0) is None
        assert Attempt(3, T0, 0.0004, 0.1).wait_until is None, "under a millisecond is no wait"

    def test_a_quorum_gives_the_others_one_node_timeout_more(self):
        a = Attempt(5, T0, 3.0, 0.1)
        a.granted(0, 7, T0 + 0.5)
        a.granted(1, 8, T0 + 0.6)
        assert a.collect_until() == pytest.approx(T0 + 3.1 + SLACK)
        a.granted(2, 9, T0 + 0.7)
        assert a.collect_until() == pytest.approx(T0 + 0.8)
        a.granted(3, 10, T0 + 0.75)
        assert a.collect_until() == pytest.approx(T0 + 0.8), "set once, by the quorum"
        assert not a.decided()
        a.unanswered()
        assert a.decided() and a.tally.failed == 1
        assert a.fences == [7, 8, 9, 10, None]
        assert a.verdict(T0 + 0.8, 10_000) == pytest.approx(T0 + 9.898)
        assert a.verdict(T0 + 9.898, 10_000) is None, "a quorum too late"

    @pytest.mark.parametrize(
        "events,decided,won",
        [
            (["g", "g", "g"], True, True),
            (["g", "b", "g"], True, True),
            (["g", "b", "b"], True, False),  # busy on a majority
            (["g", "f"], False, False),  # one still pending could make it
            (["f", "r"], True, False),  # unreachable and refused
            (["b"], False, False),
        ],
    )
    def test_decided(self, events, decided, won):
        a = Attempt(3, T0, None, 0.1)
        for i, e in enumerate(events):
            if e == "g":
                a.granted(i, i + 1, T0 + 0.01)
            elif e == "b":
                a.busy(i)
            elif e == "f":
                a.failed(i)
            else:
                a.failed(i, "refused")
        assert a.decided() is decided
        if not decided:
            a.unanswered()
        assert (a.verdict(T0 + 0.05, 10_000) is not None) is won


class TestAcquiring:
    def test_a_call_that_does_not_wait_makes_one_attempt(self):
        p = Acquiring(T0, None, 10_000, 0.1, 2.0)
        assert p.wait_for(T0) is None
        assert p.after_miss(BUSY, T0 + 0.1, 0.5) is None
        assert p.after_miss(UNREACHABLE, T0 + 0.1, 0.5) is None

    def test_attempts_until_the_wait_is_used_up(self):
        p = Acquiring(T0, 5000, 30_000, 0.1, 2.0)
        assert p.wait_for(T0) == pytest.approx(3.0)
        assert p.wait_for(T0 + 4.0) == pytest.approx(1.0)
        assert p.after_miss(BUSY, T0 + 3.1, 0.0) == pytest.approx(0.001)
        assert p.after_miss(BUSY, T0 + 3.2, 0.999999) == pytest.approx(0.020), "the cap doubles"
        assert p.after_miss(BUSY, T0 + 4.995, 0.999999) == pytest.approx(0.005), "never past the deadline"
        assert p.after_miss(BUSY, T0 + 5.0, 0.0) is None

    def test_unreachable_gives_up_after_retry_for_in_a_row(self):
        p = Acquiring(T0, 60_000, 30_000, 0.1, 2.0)
        assert p.after_miss(UNREACHABLE, T0 + 0.1, 0.0) is not None
        assert p.after_miss(UNREACHABLE, T0 + 2.0, 0.0) is not None
        assert p.after_miss(BUSY, T0 + 2.2, 0.0) is not None, "a server answered: the run ends"
        assert p.after_miss(UNREACHABLE, T0 + 2.3, 0.0) is not None
        assert p.after_miss(UNREACHABLE, T0 + 4.2, 0.0) is not None
        assert p.after_miss(UNREACHABLE, T0 + 4.3, 0.0) is None
