"""A lease on one server (or one cluster slot's master), blocking: the
driver that runs the rules of ``_core.single`` over a ``Topology`` of
sockets, and :class:`SingleBackend`, what a :class:`~dlock.Lease` from a
:class:`~dlock.Locker` renews and releases."""

from __future__ import annotations

import random
import socket
import time
from inspect import GEN_CLOSED, getgeneratorstate
from typing import Any, List, Optional, Tuple

import redis

from ._core.effects import Call, Outcome, Rule, Sleep, T
from ._core.lease import Renewal
from ._core.single import OnRetry, Settings, Single
from ._node import Conn, read_all, send
from ._topology import Topology
from ._spec import Spec, now
from .errors import Failure, is_io_error

__all__ = ["OnRetry", "Settings", "SingleBackend", "commands", "drive", "perform"]


def commands(asking: bool, cmd: Tuple[Any, ...], wait: Optional[Tuple[int, float]]) -> List[Tuple[Any, ...]]:
    """``ASKING`` (when redirected) + the command + ``WAIT n timeout`` (when
    durability is asked for), as one pipeline on one connection."""
    cmds: List[Tuple[Any, ...]] = []
    if asking:
        cmds.append(("ASKING",))
    cmds.append(cmd)
    if wait is not None:
        n, t = wait
        # `WAIT n 0` blocks forever: a timeout under 1 ms waits 1 ms.
        cmds.append(("WAIT", n, max(int(t * 1000), 1)))
    return cmds


_TIMEOUTS = (redis.exceptions.TimeoutError, socket.timeout)


def perform(topology: Topology, call: Call) -> Outcome:
    """Runs one :class:`Call` on its server; its outcome (a failure
    included, never raised)."""
    out = Outcome()

    def op(conn: Conn, asking: bool) -> List[Any]:
        t = now()
        sent = call.commands(t)
        cmds = [("ASKING",), *sent] if asking else list(sent)
        out.reached, out.sent_at = True, None
        if call.probe and conn._dlock_pooled:
            got: List[Any] = []
            try:
                send(conn, [("PING",), *cmds])
                read_all(conn, len(cmds) + 1, got)
            except BaseException as e:
                if got:  # the PING answered (an error reply too: alive)
                    out.sent_at = t
                else:
                    # Closed while idle: nothing after the PING ran.
                    out.reached = False
                    out.dead_pooled = is_io_error(e) and not isinstance(e, _TIMEOUTS)
                raise
            out.sent_at = t
            replies = got[1:]
        else:
            send(conn, cmds)
            out.sent_at = t
            replies = read_all(conn, len(cmds))
        if asking:
            replies = replies[1:]
        if isinstance(replies[0], Exception):
            # An error reply (MOVED, LOADING, ...): the command did not run.
            out.reached, out.sent_at = False, None
            raise replies[0]
        return replies

    try:
        out.replies = topology.run(call.route_key, call.io_timeout, call.extra_wait, op, waits=call.waits)
    except Failure as f:
        out.failure = f
    return out


def drive(topology: Topology, rule: Rule[T]) -> T:
    """Runs a rule (see ``_core.effects``) to its end on this thread. An
    exception while performing an effect (``KeyboardInterrupt``) is thrown
    into the rule, which cleans up and re-raises."""
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        # The loop runs inside the try: an interrupt landing between an
        # effect's outcome and the rule hearing it (the loop's own jump
        # back) goes to the rule too, which may have been granted.
        try:
            while True:
                effect = rule.throw(error) if error is not None else rule.send(value)
                value, error = None, None
                if isinstance(effect, Sleep):
                    time.sleep(effect.seconds)
                else:
                    value = perform(topology, effect)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        except BaseException as e:  # noqa: B036 - the rule decides
            if getgeneratorstate(rule) == GEN_CLOSED:
                raise  # the rule's own end
            error = e


class SingleBackend:
    """A lease on one server: what a Lease from a Locker renews and
    releases (the rules are ``_core.single.Single``'s)."""

    def __init__(self, topology: Topology, spec: Spec, token: str, settings: Settings) -> None:
        self.topology = topology
        self.spec = spec
        self.token = token
        self.settings = settings
        self.rules = Single(spec, token, settings, now, random.randrange)

    def acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry] = None) -> Optional[Tuple[int, float]]:
        """Acquire with same-token retries: ``(fence, valid_until)`` or None
        (busy)."""
        return drive(self.topology, self.rules.acquire(wait_ms, on_retry))

    def abandon(self, deadline: float) -> None:
        """Best-effort release of a grant the caller will not get."""
        drive(self.topology, self.rules.abandon(deadline))

    def extend_by(self, ttl_ms: int, deadline: float) -> Renewal:
        return drive(self.topology, self.rules.extend_by(ttl_ms, deadline))

    def extend(self, ttl_ms: int) -> Renewal:
        return drive(self.topology, self.rules.extend(ttl_ms))

    def extend_within(self, ttl_ms: int, budget: float) -> Renewal:
        """A renewal that waits for no answer past ``budget``."""
        return drive(self.topology, self.rules.extend(ttl_ms, budget))

    def release(self, valid_until: float) -> bool:
        return drive(self.topology, self.rules.release(valid_until))
