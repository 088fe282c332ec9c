"""The core's rules as tables, without a server: an injected clock, and
replies scripted per call (see ``dlock._core.effects``)."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import pytest

import dlock
from dlock._core.effects import Call, Outcome, Sleep
from dlock._core.lease import (
    EXTENDED,
    FAILED,
    IGNORED,
    LEAVE_DONE,
    LEAVE_FOREIGN,
    LEAVE_RELEASE,
    LOSE,
    LOST,
    RENEW,
    SLEEP,
    STOP,
    LeaseState,
    Renewal,
    retry_pause,
)
from dlock._core.single import Settings, Single
from dlock._spec import Spec
from dlock.errors import FATAL, RETRY, Failure, Unavailable

T0 = 1000.0
TOKEN = "t" * 32


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def cut(_: int) -> int:
    """No jitter: backoffs are 20, 40, 80, 160, 160... ms."""
    return 0


Reply = Callable[[Call, float], Tuple[Outcome, float]]


def ok(*replies: Any, after: float = 0.001) -> Tuple[Outcome, float]:
    return Outcome(replies=list(replies), reached=True), after


def broke(after: float = 0.001, reached: bool = True, sent: Optional[float] = None, dead: bool = False):
    f = Failure(RETRY, Unavailable("connection reset"))
    return Outcome(failure=f, reached=reached, sent_at=sent, dead_pooled=dead), after


def drive(rule, clock: Clock, answer: Callable[[Call, int], Tuple[Outcome, float]]):
    """Runs ``rule``, answering its n-th call with ``answer(call, n)`` (an
    outcome and how long the call took); sleeps move the clock. The result
    (or the error) and the effects, each with the clock when yielded."""
    effects: List[Tuple[float, Any]] = []
    value: Any = None
    n = 0
    while True:
        try:
            effect = rule.send(value)
        except StopIteration as stop:
            return stop.value, effects
        except dlock.DlockError as e:
            return e, effects
        effects.append((clock.t, effect))
        assert len(effects) < 1000, "a rule that never ends"
        if isinstance(effect, Sleep):
            clock.t += effect.seconds
            value = None
        else:
            value, took = answer(effect, n)
            clock.t += took
            n += 1


def single(ttl: float = 3.0, **kw: Any) -> Tuple[Single, Clock]:
    clock = Clock()
    return Single(Spec(["res"], ttl=ttl), TOKEN, Settings(**kw), clock, cut), clock


def names(effects) -> List[str]:
    return [e.cmds[0][0] if isinstance(e, Call) else "sleep" for _, e in effects]


def calls(effects) -> List[Call]:
    return [e for _, e in effects if isinstance(e, Call)]


# --- acquire -----------------------------------------------------------------


def test_a_grant_counts_its_budget_from_the_send():
    s, clock = single(ttl=3.0)
    got, effects = drive(s.acquire(None), clock, lambda c, n: ok(42, after=0.5))
    assert got == (42, T0 + 3.0)
    (call,) = calls(effects)
    assert call.cmds == (("DLOCK.ACQUIRE", "res", TOKEN, 3000),) and call.route_key == b"res"
    assert call.undo == ("DLOCK.RELEASE", "res", TOKEN), "a cancelled acquire is undone behind it"


def test_busy_is_none():
    s, clock = single()
    got, effects = drive(s.acquire(None), clock, lambda c, n: ok(None))
    assert got is None and names(effects) == ["DLOCK.ACQUIRE"]


def test_a_lost_reply_is_retried_with_the_same_token_and_keeps_the_fence():
    s, clock = single(ttl=3.0)
    # The first reply is lost (it may have been granted): the retry sends
    # the very same command, which the server answers with the same fence.
    answers = [broke(after=0.3), ok(42)]
    got, effects = drive(s.acquire(None), clock, lambda c, n: answers[n])
    assert names(effects) == ["DLOCK.ACQUIRE", "sleep", "DLOCK.ACQUIRE"]
    first, second = calls(effects)
    assert first.cmds == second.cmds
    assert got == (42, T0 + 0.3 + 0.020 + 3.0), "counted from the retry's send"


def test_giving_up_after_retry_for_releases_with_the_token():
    s, clock = single(retry_for=0.5)
    got, effects = drive(s.acquire(None), clock, lambda c, n: broke(after=0.1))
    assert isinstance(got, dlock.Unavailable)
    ns = names(effects)
    assert ns[0] == "DLOCK.ACQUIRE" and "DLOCK.RELEASE" in ns
    first_release = ns.index("DLOCK.RELEASE")
    assert set(ns[:first_release]) == {"DLOCK.ACQUIRE", "sleep"}
    assert calls(effects)[-1].cmds == (("DLOCK.RELEASE", "res", TOKEN),)
    assert clock.t <= T0 + 0.5 + 0.25 + 0.1, "by the deadline plus a reply's margin"


def test_a_wait_used_up_becomes_a_plain_try():
    s, clock = single()
    # The waiting attempt fails just before its wait ends; the retry, sent
    # under 1 ms before the end, must not send WAIT 0 (wait forever).
    answers = [broke(after=0.9795), ok(None)]
    got, effects = drive(s.acquire(1000), clock, lambda c, n: answers[n])
    first, second = calls(effects)
    assert first.cmds[0][-2:] == ("WAIT", 1000) and first.extra_wait == 1.0
    assert "WAIT" not in second.cmds[0] and second.extra_wait == 0.0
    assert got is None


def test_a_long_wait_is_refreshed_and_counted_from_the_refresh():
    s, clock = single(ttl=3.0)
    # Handed over after 2 s of waiting (past a third of the ttl).
    answers = [ok(42, after=2.0), ok(1, after=0.1)]
    got, effects = drive(s.acquire(10_000), clock, lambda c, n: answers[n])
    assert names(effects) == ["DLOCK.ACQUIRE", "DLOCK.EXTEND"]
    assert calls(effects)[1].cmds == (("DLOCK.EXTEND", "res", TOKEN, 3000),)
    assert got == (42, T0 + 2.0 + 3.0)
    # A quick handoff keeps the budget counted from the ACQUIRE's send.
    s, clock = single(ttl=3.0)
    got, effects = drive(s.acquire(10_000), clock, lambda c, n: ok(42, after=0.5))
    assert names(effects) == ["DLOCK.ACQUIRE"] and got == (42, T0 + 3.0)


def test_too_few_replicas_release_the_grant():
    s, clock = single(min_replicas=(1, 0.2))
    answers = [ok(42, 0), ok(1)]
    got, effects = drive(s.acquire(None), clock, lambda c, n: answers[n])
    assert isinstance(got, dlock.TooFewReplicas) and (got.acked, got.wanted) == (0, 1)
    acquire, release = calls(effects)
    assert acquire.cmds[1] == ("WAIT", 1, 200) and acquire.extra_wait == pytest.approx(0.2)
    assert release.cmds == (("DLOCK.RELEASE", "res", TOKEN),)


# --- extend ------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, kind",
    [(1, EXTENDED), (0, LOST), (b"?", FAILED)],
)
def test_a_renewal_is_extended_lost_or_failed(reply, kind):
    s, clock = single()
    r, _ = drive(s.extend(5000), clock, lambda c, n: ok(reply, after=0.2))
    assert r.kind == kind
    if kind == EXTENDED:
        assert r.until == T0 + 5.0, "counted from the send"


def test_a_renewal_retries_until_its_deadline():
    s, clock = single(retry_for=1.0)
    r, effects = drive(s.extend(3000), clock, lambda c, n: broke(after=0.1))
    assert r.kind == FAILED and isinstance(r.error, dlock.Unavailable)
    assert len(calls(effects)) > 2 and clock.t <= T0 + 1.0 + 0.25 + 0.1


# --- release: "may the first attempt have run?" ---------------------------------


@pytest.mark.parametrize(
    "first, then, released",
    [
        # Answered: released now, or not held.
        (ok(1), None, True),
        (ok(0), None, False),
        # The first reply was lost after a send within the budget: the
        # retry's "not held" means the first one released it.
        (broke(sent=T0), ok(0), True),
        # ... sent after the budget: it may have found the lease gone.
        (broke(sent=T0 + 10), ok(0), False),
        # ... never ran (refused, or a probe that failed): not held is lost.
        (broke(sent=None), ok(0), False),
    ],
)
def test_the_release_judgement(first, then, released):
    s, clock = single()
    answers = [first, then]
    got, effects = drive(s.release(T0 + 5), clock, lambda c, n: answers[n])
    assert got is released
    assert all(c.probe for c in calls(effects)), "a pooled connection is probed with PING"


def test_a_dead_pooled_connection_is_skipped_at_once():
    s, clock = single()
    answers = [broke(reached=False, dead=True), ok(1)]
    got, effects = drive(s.release(T0 + 5), clock, lambda c, n: answers[n])
    assert got is True and names(effects) == ["DLOCK.RELEASE", "DLOCK.RELEASE"], "no pause"


# --- the lease ---------------------------------------------------------------------


def lease(ttl_ms: int = 3000, renews: bool = True) -> LeaseState:
    st = LeaseState(ttl_ms, T0 + ttl_ms / 1000, pid=1)
    st.watch(renews)
    return st


def test_renewal_is_due_a_third_of_the_ttl_after_the_send():
    st = lease(3000)
    assert st.look(T0, 1) == (SLEEP, T0 + 1.0)
    assert st.look(T0 + 1.0, 1) == (RENEW, 3000.0)
    # While it is out, the next look is the budget's end.
    assert st.look(T0 + 1.5, 1) == (SLEEP, T0 + 3.0)
    assert st.renewed(Renewal(EXTENDED, until=T0 + 4.0), 3000, T0 + 3.0, T0 + 1.6) == EXTENDED
    assert st.look(T0 + 1.6, 1) == (SLEEP, T0 + 2.0)
    # Without renewal only the budget is watched.
    assert lease(3000, renews=False).look(T0, 1) == (SLEEP, T0 + 3.0)


def test_the_budget_passing_is_a_loss_even_with_a_renewal_out():
    st = lease(3000)
    assert st.look(T0 + 1.0, 1)[0] == RENEW
    assert st.look(T0 + 3.0, 1) == (LOSE, 0.0)
    st.lost = True
    assert st.look(T0 + 3.0, 1) == (STOP, 0.0)
    assert st.lost_at(T0 + 2.0) and st.over(T0)


def test_a_late_renewal_is_a_loss():
    st = lease(3000)
    st.look(T0 + 1.0, 1)
    late = st.renewed(Renewal(EXTENDED, until=T0 + 4.0), 3000, T0 + 3.0, T0 + 3.0)
    assert late == LOST and st.valid_until == T0 + 3.0, "a passed budget is never revived"


def test_a_failed_renewal_is_retried_after_a_pause():
    st = lease(3000)
    st.look(T0 + 1.0, 1)
    assert st.renewed(Renewal(FAILED, error=dlock.Unavailable("x")), 3000, T0 + 3.0, T0 + 1.5) == FAILED
    assert st.look(T0 + 1.5, 1) == (SLEEP, T0 + 1.5 + retry_pause(3000))
    assert st.look(T0 + 1.5 + retry_pause(3000), 1)[0] == RENEW


def test_a_clean_release_is_never_a_loss_and_a_child_owns_nothing():
    st = lease(3000)
    assert st.leaving(2) == LEAVE_FOREIGN and st.look(T0 + 1.0, 2) == (STOP, 0.0)
    assert st.leaving(1) == LEAVE_RELEASE
    assert st.begin_release(T0 + 1.0) is False
    assert st.begin_release(T0 + 1.0) is None, "a second release asks nobody"
    assert st.released_as(True, False) is True
    assert st.begin_extend(T0 + 1.0) is False and st.in_flight == 0, "released: no renewal"
    assert not st.lost_at(T0 + 100) and not st.budget_passed(T0 + 100)
    assert st.leaving(1) == LEAVE_DONE and st.look(T0 + 1.0, 1) == (STOP, 0.0)
    # A release after the budget passed answers "lost" whatever the server says.
    st = lease(3000)
    assert st.begin_release(T0 + 3.0) is True and st.released_as(True, True) is False


def test_an_interrupted_acquire_releases_with_its_token_then_lets_the_interrupt_through():
    # KeyboardInterrupt (blocking) or CancelledError (asyncio) is thrown in
    # at the call that was out: the grant it may have made is released.
    s, clock = single()
    rule = s.acquire(None)
    call = rule.send(None)
    assert call.cmds[0][0] == "DLOCK.ACQUIRE"
    undo = rule.throw(KeyboardInterrupt())
    assert isinstance(undo, Call) and undo.cmds == (("DLOCK.RELEASE", "res", TOKEN),)
    assert undo.io_timeout <= 0.5, "by a reply's margin from now, plus a reply's margin"
    with pytest.raises(KeyboardInterrupt):
        rule.send(Outcome(replies=[1], reached=True))


def test_a_renewal_overtaken_by_the_release_is_no_loss():
    # The RELEASE went out while the EXTEND was out: the EXTEND answers 0,
    # which must not turn a clean release into a loss.
    st = lease(3000)
    assert st.look(T0 + 1.0, 1)[0] == RENEW
    assert st.begin_release(T0 + 1.1) is False
    assert st.renewed(Renewal(LOST), 3000, T0 + 3.0, T0 + 1.2) == IGNORED and not st.lost
    assert st.released_as(True, False) and not st.lost_at(T0 + 10)


# --- a capped hold (max_hold) --------------------------------------------------


def capped(ttl: float, max_hold: float) -> Tuple[Single, Clock]:
    clock = Clock()
    return Single(Spec(["res"], ttl=ttl, max_hold=max_hold), TOKEN, Settings(), clock, cut), clock


def test_a_capped_holds_refresh_and_retries_stay_short_of_the_cap_floor():
    # max_hold 3 s: the floor T0 + 3 s, the margin 60 ms.
    s, clock = capped(ttl=10.0, max_hold=3.0)
    answers = [ok(42, after=1.5), ok(1, after=0.01)]
    got, effects = drive(s.acquire(10_000), clock, lambda c, n: answers[n])
    acquire, refresh = calls(effects)
    assert acquire.cmds[0][3] == 3000, "the first attempt asks for the cap"
    assert refresh.cmds == (("DLOCK.EXTEND", "res", TOKEN, 1440),), "what is left to the floor"
    assert got == (42, T0 + 1.5 + 1.44)
    # A same-token retry likewise.
    s, clock = capped(ttl=10.0, max_hold=3.0)
    answers = [broke(after=0.5), ok(42)]
    got, effects = drive(s.acquire(None), clock, lambda c, n: answers[n])
    first, second = calls(effects)
    assert (first.cmds[0][3], second.cmds[0][3]) == (3000, 3000 - 520 - 60)
    # A grant after a wait past the floor: the refresh asks for the whole
    # ttl once. Accepted, the floor moves to that lease's end.
    s, clock = capped(ttl=10.0, max_hold=3.0)
    answers = [ok(42, after=4.0), ok(1, after=0.01)]
    got, effects = drive(s.acquire(10_000), clock, lambda c, n: answers[n])
    acquire, probe = calls(effects)
    assert probe.cmds == (("DLOCK.EXTEND", "res", TOKEN, 3000),), "the whole ttl"
    assert got == (42, T0 + 7.0) and s.cap is not None and s.cap.floor == T0 + 7.0
    # Refused at the cap: the server's "2000 ms more" moves the floor to
    # the probe's send plus 2 s, and a second refresh asks for what is
    # left to it, less the margin.
    s, clock = capped(ttl=10.0, max_hold=3.0)
    answers = [ok(42, after=4.0), at_cap(2000, after=0.01), ok(1, after=0.01)]
    got, effects = drive(s.acquire(10_000), clock, lambda c, n: answers[n])
    acquire, probe, refresh = calls(effects)
    assert probe.cmds[0][3] == 3000
    assert s.cap is not None and s.cap.floor == T0 + 6.0
    ttl_ms = refresh.cmds[0][3]
    assert 1929 <= ttl_ms <= 1930, "T0 + 6 s less the margin, from T0 + 4.01 s"
    assert got == (42, T0 + 4.01 + ttl_ms / 1000)
    # Refused with the cap at hand: no second refresh, the lease as it
    # surely lasts from the attempt's send (over: lost).
    s, clock = capped(ttl=10.0, max_hold=3.0)
    answers = [ok(42, after=4.0), at_cap(30, after=0.01)]
    got, effects = drive(s.acquire(10_000), clock, lambda c, n: answers[n])
    assert names(effects) == ["DLOCK.ACQUIRE", "DLOCK.EXTEND"] and got == (42, T0 + 3.0)


def at_cap(left_ms: int, after: float) -> Tuple[Outcome, float]:
    """The server's refusal of an extend past a hold's cap."""
    text = f"MAXHOLD the hold may live {left_ms} ms more: it cannot be extended past its MAXHOLD"
    return Outcome(failure=Failure(FATAL, dlock.MaxHoldReached(text, reason=text)), reached=True), after


def test_a_capped_lease_is_renewed_up_to_the_floor_then_lost_with_the_caps_reason():
    from dlock._core.lease import CAP_REACHED, Cap

    st = LeaseState(2000, T0 + 2.0, 1)
    st.cap = Cap(T0, 3000)
    st.watch(True)
    assert st.look(T0 + 1.0, 1) == (RENEW, 2000 - 60.0), "what is left to the floor, less the margin"
    assert st.renewed(Renewal(EXTENDED, until=T0 + 2.94), 1940, T0 + 2.0, T0 + 1.0) == EXTENDED
    assert st.at_cap()
    assert st.look(T0 + 2.0, 1) == (SLEEP, T0 + 2.94), "no renewal past the floor"
    assert st.look(T0 + 2.94, 1) == (LOSE, 0.0)
    assert st.loss_reason == CAP_REACHED
    # ttl = max_hold: at the floor from the grant, never renewed.
    full = LeaseState(3000, T0 + 3.0, 1)
    full.cap = Cap(T0, 3000)
    full.watch(True)
    assert full.look(T0 + 1.0, 1) == (SLEEP, T0 + 3.0)
    assert full.budget_passed(T0 + 3.0) and full.loss_reason == CAP_REACHED


def test_a_watchdog_renewal_refused_at_the_cap_ends_renewal_and_the_loss_waits_for_the_budget():
    refusal = dlock.MaxHoldReached("MAXHOLD the hold may live 5 ms more", reason="MAXHOLD the hold may live 5 ms more")
    st = LeaseState(3000, T0 + 3.0, 1)
    st.watch(True)
    assert st.look(T0 + 1.0, 1)[0] == RENEW
    assert st.renewed(Renewal(FAILED, error=refusal), 3000, T0 + 3.0, T0 + 1.0, watchdog=True) == FAILED
    assert not st.lost and st.loss_reason is None, "held until its budget"
    assert st.look(T0 + 1.1, 1) == (SLEEP, T0 + 3.0)
    assert st.look(T0 + 3.0, 1) == (LOSE, 0.0)
    assert st.loss_reason == refusal.reason
    # The holder's own extend refused: lost at once, as before.
    st = LeaseState(3000, T0 + 3.0, 1)
    assert st.begin_extend(T0 + 1.0)
    assert st.renewed(Renewal(FAILED, error=refusal), 3000, T0 + 3.0, T0 + 1.0) == LOST
    assert st.loss_reason == refusal.reason
