"""Leader election's rules, free of I/O: a candidate's token, the
``DLOCK.OBSERVE`` command, who leads according to its reply (``DLOCK.INFO``'s
map), and how an observer goes on after a reply, a wait that ran out, or a
failure. The blocking and asyncio shells (``dlock.election``,
``dlock._aelection``) only send what :class:`Observation` asks and hand back
what came; time and randomness are passed in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union


class NoLeader(Exception):
    """A reply that names no leader: several holders, or a reply of
    another shape. The shells raise it as :class:`~dlock.ServerError`
    (this package imports nothing of the client's, which reaches for
    redis)."""

#: How long one ``DLOCK.OBSERVE`` waits on the server before it is sent
#: again: a bound on how long a dead connection goes unnoticed.
OBSERVE_CHUNK_MS = 30_000


@dataclass(frozen=True)
class Leads:
    """``id`` leads in ``term``: the holder's token before its last ``/``
    (the whole token when it has none), the lease's fence, and the token."""

    id: str
    term: int
    # The token releases or renews the leader's lease: never in a repr.
    token: str = field(repr=False)


@dataclass(frozen=True)
class Nobody:
    """Nobody leads: the election's lock is free."""


@dataclass(frozen=True)
class HandingOver:
    """The leadership is being handed to the next candidate: the lock is
    free but reserved for its queue."""


#: Who leads, as an observer sees it.
Leader = Union[Leads, Nobody, HandingOver]


def id_problem(id: object) -> Optional[str]:
    """What is wrong with an election id (None: nothing). An id is what
    observers see before the ``/`` of the token: a non-empty str without
    ``/``."""
    if id is None:
        return None
    if not isinstance(id, str):
        return f"an election id is a str, not {id!r}"
    if not id:
        return "an election id must not be empty"
    if "/" in id:
        return f"an election id must not contain '/': {id!r}"
    try:
        id.encode()
    except UnicodeEncodeError:
        return f"an election id must be encodable as UTF-8: {id!r}"
    return None


def candidate_token(id: Optional[str], random_part: str) -> Optional[str]:
    """The lease token of a candidate with ``id`` (checked by
    :func:`id_problem`): ``id/random_part``; None without an id (the lock
    draws a random token)."""
    if id is None:
        return None
    return f"{id}/{random_part}"


def id_of(token: str) -> str:
    """What observers see of a token: the part before its last ``/``."""
    head, sep, _ = token.rpartition("/")
    return head if sep else token


def observe_cmd(name: Any, since: Optional[str], wait_ms: Optional[int]) -> Tuple[Any, ...]:
    """``DLOCK.OBSERVE name [SINCE version] [WAIT ms]``. ``WAIT`` only with
    a version and at least 1 ms (the server's ``WAIT 0`` waits forever)."""
    if since is None:
        return ("DLOCK.OBSERVE", name)
    if wait_ms is None or wait_ms < 1:
        return ("DLOCK.OBSERVE", name, "SINCE", since)
    return ("DLOCK.OBSERVE", name, "SINCE", since, "WAIT", wait_ms)


def _text(v: Any) -> Optional[str]:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, str):
        return v
    return None


def _unexpected(reply: Any) -> NoLeader:
    return NoLeader(f"unexpected DLOCK.OBSERVE reply: {reply!r}")


def _fields(info: Any) -> Optional[Dict[str, Any]]:
    """A RESP3 map or a RESP2 flat array of pairs, with str keys."""
    if isinstance(info, dict):
        pairs = list(info.items())
    elif isinstance(info, list) and len(info) % 2 == 0:
        pairs = [(info[i], info[i + 1]) for i in range(0, len(info), 2)]
    else:
        return None
    out: Dict[str, Any] = {}
    for k, v in pairs:
        key = _text(k)
        if key is None:
            return None
        out[key] = v
    return out


def leader_of(info: Any) -> Leader:
    """Who leads, from what ``DLOCK.INFO`` shows (``DLOCK.OBSERVE``'s second
    part). Several holds (a shared lock's readers, a semaphore's holders)
    name no leader: :class:`NoLeader`, as does a reply of another shape."""
    if info is None:
        return Nobody()
    fields = _fields(info)
    if fields is None:
        raise _unexpected(info)
    if "holds" in fields:
        holds = fields["holds"]
        if not isinstance(holds, list):
            raise _unexpected(info)
        if not holds:
            return Nobody()
        if len(holds) > 1:
            kind = _text(fields.get("kind")) or "lock"
            raise NoLeader(
                f"no leader: {len(holds)} holders share the resource (a {kind}), "
                "an election's lock has one"
            )
        return leader_of(holds[0])
    if "token" in fields and fields["token"] is None:
        return HandingOver()
    token = _text(fields.get("token"))
    fence = fields.get("fence")
    if token is None or isinstance(fence, bool) or not isinstance(fence, int) or fence < 0:
        raise _unexpected(info)
    return Leads(id_of(token), fence, token)


def parse_observed(reply: Any) -> Optional[Tuple[str, Any]]:
    """A ``DLOCK.OBSERVE`` reply: ``(version, info)``, or None when the wait
    ran out (nil); :class:`NoLeader` for another shape."""
    if reply is None:
        return None
    if isinstance(reply, list) and len(reply) == 2:
        version = _text(reply[0])
        if version is not None:
            return version, reply[1]
    raise _unexpected(reply)


def pause_after(attempt: int, rand: float) -> float:
    """The pause before the next try after ``attempt`` failures in a row
    (from 0): 50 ms doubling to 1 s, times 0.5..1 from ``rand`` (0..1), so
    that many observers of a server that comes back do not all return at
    once."""
    base = min(0.05 * (1 << min(attempt, 5)), 1.0)
    return base * (0.5 + min(max(rand, 0.0), 1.0) / 2)


class Observation:
    """One observer's progress: the version last read (sent as ``SINCE``, so
    that nothing is missed across a failure or a reconnection: the server
    answers at once with what changed meanwhile), the state last reported
    (a state equal to it is not reported again: a reply from another server
    process or a failover names the same holders with another version), and
    the failures in a row.

    The shell loops: send what :meth:`request` gives; hand the reply to
    :meth:`answer` (done, and the state to return) or the failure to
    :meth:`failed` (the pause before the next try, or None to raise)."""

    def __init__(self, name: Any, retry_for: float) -> None:
        self.name = name
        self.retry_for = retry_for
        self.version: Optional[str] = None
        self.shown: Optional[Leader] = None
        self.failing_since: Optional[float] = None
        self.attempt = 0

    def wait_ms(self, t: float, deadline: Optional[float]) -> Optional[int]:
        """How long the next command may wait on the server: nothing before
        a version is known; else a chunk, cut at ``deadline`` (None: none)."""
        if self.version is None:
            return None
        if deadline is None:
            return OBSERVE_CHUNK_MS
        return max(0, min(OBSERVE_CHUNK_MS, int((deadline - t) * 1000)))

    def command(self, t: float, deadline: Optional[float]) -> Tuple[Any, ...]:
        return observe_cmd(self.name, self.version, self.wait_ms(t, deadline))

    def request(self, t: float, deadline: Optional[float]) -> Tuple[Tuple[Any, ...], float]:
        """The next command, and how long (seconds) the server may hold its
        reply: the shell waits that long beyond its I/O timeout."""
        return self.command(t, deadline), (self.wait_ms(t, deadline) or 0) / 1000

    def answer(self, reply: Any, t: float, deadline: Optional[float]) -> Tuple[bool, Optional[Leader]]:
        """A reply at ``t``: whether the call is done, and the state it
        returns (None: nothing changed before ``deadline``). Not done: send
        the next :meth:`request`. Raises :class:`NoLeader` (see
        :meth:`take`)."""
        state = self.take(reply)
        if state is not None:
            return True, state
        return is_due(t, deadline), None

    def take(self, reply: Any) -> Optional[Leader]:
        """A reply: the state to report, or None (the wait ran out, or the
        state is the one last reported). A reply naming several holders
        raises :class:`NoLeader` once its version is recorded: the next call
        waits for the holders to change."""
        self.failing_since = None
        self.attempt = 0
        got = parse_observed(reply)
        if got is None:
            return None
        version, info = got
        self.version = version
        try:
            state = leader_of(info)
        except NoLeader:
            self.shown = None
            raise
        if state == self.shown:
            return None
        self.shown = state
        return state

    def failed(self, retryable: bool, t: float, deadline: Optional[float], rand: float) -> Optional[float]:
        """After a failure at ``t``: the pause before the next try, or None
        to give up (raise): at once for a failure that is not
        ``retryable`` (a refusal, not a connection failure), else once the
        failures have lasted ``retry_for`` or the pause would end past
        ``deadline``. Giving up starts the count afresh for the next call."""
        if not retryable:
            self.failing_since = None
            self.attempt = 0
            return None
        if self.failing_since is None:
            self.failing_since = t
        pause = pause_after(self.attempt, rand)
        self.attempt += 1
        resume = t + pause
        if resume - self.failing_since >= self.retry_for or (deadline is not None and resume >= deadline):
            self.failing_since = None
            self.attempt = 0
            return None
        return pause


def is_due(t: float, deadline: Optional[float]) -> bool:
    """Whether a call bounded by ``deadline`` (None: none) is over at
    ``t``. A call always asks once, even past its deadline: a look without
    a wait."""
    return deadline is not None and t >= deadline


__all__: List[str] = [
    "Leads",
    "Nobody",
    "HandingOver",
    "Leader",
    "Observation",
    "NoLeader",
    "candidate_token",
    "id_problem",
    "id_of",
    "is_due",
    "leader_of",
    "observe_cmd",
    "parse_observed",
    "pause_after",
    "OBSERVE_CHUNK_MS",
]
