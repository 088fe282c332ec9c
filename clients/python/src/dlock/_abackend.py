"""A lease on one server (or one Redis Cluster slot's master) for the
asyncio API: the driver that runs the rules of ``_core.single`` over an
asyncio ``_Topology``, and :class:`_Backend`, what an asyncio Lease renews
and releases. A cancelled task's rule finishes its cleanup (an acquire's
release with its token) in a background task."""

from __future__ import annotations

import asyncio
import random
from inspect import GEN_CLOSED, getgeneratorstate
from typing import Any, List, Optional, Set, Tuple

import redis

from ._anode import Conn, _abort, _pack, _read_all, _send, _Topology
from ._core.effects import Call, Effect, Outcome, Rule, Sleep, T
from ._core.lease import Renewal
from ._core.single import OnRetry, Settings, Single
from ._spec import Spec, now
from .errors import Failure, is_io_error

# Background work (a cancelled rule's cleanup, a lost lease's RELEASE):
# kept referenced until done.
_background: "Set[asyncio.Future[Any]]" = set()


def in_background(aw: Any) -> None:
    """Runs an awaitable to its end in a task of its own, errors ignored."""
    t = asyncio.ensure_future(aw)
    _background.add(t)
    t.add_done_callback(_done)


def _done(t: "asyncio.Future[Any]") -> None:
    _background.discard(t)
    if not t.cancelled():
        t.exception()  # retrieved: a best-effort cleanup's failure is no news


async def perform(topology: _Topology, call: Call) -> Outcome:
    """Runs one :class:`Call` on its server; its outcome (a failure
    included, never raised). Cancelled while out, ``call.undo`` is written
    behind the call's commands on the same connection, which is closed."""
    out = Outcome()

    async def op(conn: Conn, asking: bool) -> List[Any]:
        t = now()
        sent = call.commands(t)
        cmds = [("ASKING",), *sent] if asking else list(sent)
        out.reached, out.sent_at = True, None
        if call.probe and getattr(conn, "_dlock_pooled", False):
            try:
                await _send(conn, [("PING",), *cmds])
                await conn.read_response(disconnect_on_error=False)
            except redis.exceptions.ResponseError:
                pass  # an error reply (-LOADING, ...): alive
            except Exception as e:
                # Closed while idle: nothing after the PING ran.
                out.reached = False
                out.dead_pooled = is_io_error(e) and not isinstance(e, redis.exceptions.TimeoutError)
                raise
        else:
            await _send(conn, cmds)
        out.sent_at = t
        replies = await _read_all(conn, len(cmds))
        if asking:
            replies = replies[1:]
        if isinstance(replies[0], Exception):
            # An error reply (MOVED, LOADING, ...): the command did not run.
            out.reached, out.sent_at = False, None
            raise replies[0]
        return replies

    on_cancel = None
    if call.undo is not None:
        undo = call.undo

        def on_cancel(conn: Conn) -> None:
            # Cancelled while the call may be queued or granted: the undo
            # behind it on the same connection, then close (the server drops
            # a queued waiter; a grant made before it reads the close is
            # undone by the undo, which it runs after the call).
            try:
                packed: Optional[bytes] = _pack(conn, [undo])
            except Exception:
                packed = None
            _abort(conn, packed)

    try:
        out.replies = await topology.run(call.route_key, call.io_timeout, call.extra_wait, op, on_cancel, call.waits)
    except Failure as f:
        out.failure = f
    return out


async def drive(topology: _Topology, rule: Rule[T]) -> T:
    """Runs a rule (see ``_core.effects``) to its end in this task. When
    the task is cancelled, the cancellation is thrown into the rule; what
    the rule still does to clean up runs on in a background task, and this
    task goes at once."""
    try:
        effect = rule.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    return await _drive_from(topology, rule, effect)


async def _drive_from(topology: _Topology, rule: Rule[T], effect: Effect) -> T:
    while True:
        # The loop runs inside the try: an interrupt landing between an
        # effect's outcome and the rule hearing it goes to the rule too,
        # which may have been granted.
        try:
            while True:
                value: Any = None
                error: Optional[BaseException] = None
                try:
                    if isinstance(effect, Sleep):
                        await asyncio.sleep(effect.seconds)
                    else:
                        value = await perform(topology, effect)
                except asyncio.CancelledError:
                    raise
                except BaseException as e:  # noqa: B036 - the rule decides
                    error = e
                effect = rule.throw(error) if error is not None else rule.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        except asyncio.CancelledError as cancelled:
            if getgeneratorstate(rule) == GEN_CLOSED:
                raise  # the rule's own end
            cleanup: Optional[Effect] = None
            try:
                cleanup = rule.throw(cancelled)
            except BaseException:
                pass  # nothing to clean up: the rule let it through
            if cleanup is not None:
                in_background(_clean_up(topology, rule, cleanup))
            raise
        except BaseException as e:  # noqa: B036 - the rule decides
            if getgeneratorstate(rule) == GEN_CLOSED:
                raise  # the rule's own end
            try:
                effect = rule.throw(e)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


async def _clean_up(topology: _Topology, rule: Rule[Any], effect: Effect) -> None:
    """A cancelled rule's cleanup, from its first effect; it ends by
    re-raising the cancellation."""
    try:
        await _drive_from(topology, rule, effect)
    except asyncio.CancelledError:
        pass


class _Backend:
    """A lease on one server (or one slot's master), for the asyncio API
    (the rules are ``_core.single.Single``'s)."""

    def __init__(self, topology: _Topology, spec: Spec, token: str, settings: Settings) -> None:
        self.topology = topology
        self.spec = spec
        self.token = token
        self.settings = settings
        self.rules = Single(spec, token, settings, now, random.randrange)

    async def acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry]) -> Optional[Tuple[int, float]]:
        """Acquire with same-token retries: ``(fence, valid_until)`` or None
        (busy). Cancelled, it leaves no hold and no waiter behind."""
        return await drive(self.topology, self.rules.acquire(wait_ms, on_retry))

    async def abandon(self, deadline: float) -> None:
        await drive(self.topology, self.rules.abandon(deadline))

    async def extend_by(self, ttl_ms: int, deadline: float) -> Renewal:
        return await drive(self.topology, self.rules.extend_by(ttl_ms, deadline))

    async def extend(self, ttl_ms: int) -> Renewal:
        return await drive(self.topology, self.rules.extend(ttl_ms))

    async def extend_within(self, ttl_ms: int, budget: float) -> Renewal:
        """A renewal that waits for no answer past ``budget``."""
        return await drive(self.topology, self.rules.extend(ttl_ms, budget))

    async def release(self, valid_until: float) -> bool:
        return await drive(self.topology, self.rules.release(valid_until))
