"""The rules of guarded writes and sessions without a server
(``dlock._core.guard``, ``dlock._core.session``): time is passed in."""

from __future__ import annotations

import builtins
import importlib
import sys

import pytest

from dlock._core import guard, session


def test_the_core_modules_import_nothing_that_does_io(monkeypatch):
    banned = {"redis", "socket", "asyncio", "threading", "time", "random"}
    real = builtins.__import__

    def guarded(name, *a, **kw):
        if name.split(".")[0] in banned:
            raise ImportError(f"the pure core imported {name}")
        return real(name, *a, **kw)

    for m in ("dlock._core.guard", "dlock._core.session"):
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setattr(builtins, "__import__", guarded)
    importlib.import_module("dlock._core.guard")
    importlib.import_module("dlock._core.session")


def test_commands():
    assert guard.write_cmd(b"r", 7, ("SET", b"k", 1)) == (b"DLOCK.GUARD", b"r", b"FENCE", b"7", b"SET", b"k", b"1")
    assert guard.batch_cmd(b"r", 7, [("SET", "k", "v"), ["INCR", "n"]]) == (
        b"DLOCK.GUARD", b"r", b"FENCE", b"7", b"BATCH", b"2", b"3", b"SET", b"k", b"v", b"2", b"INCR", b"n",
    )
    assert guard.check_cmd(b"r", 9) == (b"DLOCK.CHECK", b"r", b"FENCE", b"9")
    assert session.open_cmd("s", 3000, True, 500) == ("DLOCK.SESSION", "OPEN", "s", 3000, "BIND", "LOCKDELAY", 500)
    assert session.open_cmd("s", 3000, False, None) == ("DLOCK.SESSION", "OPEN", "s", 3000)


@pytest.mark.parametrize(
    "build",
    [
        lambda: guard.write_cmd(b"r", 1, ()),
        lambda: guard.write_cmd(b"r", 1, "SET k v"),
        lambda: guard.write_cmd(b"r", 1, ("SET", 1.0)),
        lambda: guard.write_cmd(b"r", 1, ("SET", False)),
        lambda: guard.write_cmd(b"r", 1, ("SET", "\udcff")),
        lambda: guard.write_cmd(b"", 1, ("SET", "k", "v")),
        lambda: guard.write_cmd(b"r", 0, ("SET", "k", "v")),
        lambda: guard.write_cmd(b"r", 1 << 63, ("SET", "k", "v")),
        lambda: guard.batch_cmd(b"r", 1, []),
        lambda: guard.batch_cmd(b"r", 1, [("SET", "k", "v"), []]),
        lambda: guard.check_cmd(b"r", True),
        lambda: session.lock_delay_ms(60_001),
    ],
)
def test_what_cannot_be_sent(build):
    with pytest.raises((guard.Invalid, session.Invalid)):
        build()


def test_error_replies():
    assert guard.refusal("NOTHELD dlock: that token or fence is not a live hold") == (guard.NOT_HELD, "")
    assert guard.refusal("WRONGTYPE Operation against a key") == ("WRONGTYPE", "Operation against a key")
    code, msg = guard.refusal("ERR unknown command 'DLOCK.GUARD', with args beginning with: 'r' 'FENCE' 'secret'")
    assert code == "ERR" and "does not know DLOCK.GUARD" in msg and "secret" not in msg
    for t in ("LOADING x", "READONLY x", "TRYAGAIN x", "MOVED 1 h:1", "ASK 1 h:1", "CLUSTERDOWN x"):
        assert guard.is_transient(t)
    assert not guard.is_transient("WRONGTYPE x") and not guard.is_transient("NOTHELD x")
    assert guard.after_failure(True, False) == guard.MAY_HAVE_RUN
    assert guard.after_failure(False, False) == guard.RETRY
    assert guard.after_failure(True, True) == guard.RETRY
    assert guard.check_reply(1) is True and guard.check_reply(0) is False
    assert guard.check_reply(True) is None and guard.check_reply(b"1") is None
    assert session.is_no_session("NOSESSION no such session")
    assert session.lacks_sessions("ERR unknown command 'DLOCK.SESSION', with args beginning with: 'OPEN'")
    assert not session.lacks_sessions("ERR unknown subcommand 'FOO'")


def test_a_session_budget_counts_from_sends():
    c = session.SessionCore(3000)
    assert c.next(100.0)[0] == session.SLEEP and c.bindable(100.0) is None
    c.opened(100.0)
    assert c.bindable(100.5) == 103.0
    assert c.next(100.5) == (session.SLEEP, 101.0)
    assert c.next(101.0)[0] == session.KEEP_ALIVE
    # Answered: the server's time left, counted from the send, at most the ttl.
    assert c.kept_alive(101.0, 5000, 101.2) == 104.0
    assert c.covers(103.0) == 104.0, "a lock with an older budget gets the new one without a send"
    assert c.covers(104.0) is None
    c.failed(102.0)
    assert c.next(102.0)[0] == session.SLEEP and c.next(102.25)[0] == session.KEEP_ALIVE
    assert c.next(104.0)[0] == session.EXPIRED
    # A reply after the budget passed ends the session.
    assert c.kept_alive(103.9, 3000, 104.1) is None and c.phase == session.ENDED
    assert c.end("closed") is None


def test_a_session_ends_once():
    c = session.SessionCore(1000)
    c.opened(0.0)
    assert c.end("closed") == session.LIVE
    assert c.end("closed") is None
    assert c.next(0.1)[0] == session.STOP and c.bindable(0.1) is None
