"""Guarded writes and the sequencer check of a lease (``lease.write``,
``lease.write_batch``, ``lease.check``) and of a fence
(``locker.check``): the rules are in ``_core.guard``; this is the blocking
and the asyncio I/O.

Each attempt runs on a connection that answered a ``PING`` first (a new
one, or a pooled one probed): a failure before the command was written
means it surely did not run, and is tried again while ``retry_for``
lasts; a failure after it was written means it may have run, and a write
then ends with :class:`~dlock.Unavailable` saying so (a check is read-only
and is tried again). Redirects are followed by the topology."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import redis

from ._abackend import _Backend
from ._aconn import _read_all, _send
from ._core import guard as core
from ._conn import read_all, send
from ._single import SingleBackend
from ._core.retry import Outage
from ._spec import Key, now
from .errors import (
    FATAL,
    Failure,
    InvalidRequest,
    NotHeld,
    Refused,
    Unavailable,
    is_io_error,
    reply_text,
    unexpected,
)

Arg = Union[str, bytes, int]

#: Why a Redlock lease makes no guarded write and no check.
NOT_ONE_SERVER = (
    "a Redlock lease makes no guarded write and no check: DLOCK.GUARD proves a hold on the one "
    "server it runs on, and a write on one server of a Redlock is not protected by a majority "
    "(store lease.fences in the storage instead, docs/fencing.md)"
)

#: A pooled connection found closed (the server's idle timeout, a
#: restart) is replaced at once, this many times in a row.
DEAD_POOLED = 10


class Held:
    """What a guarded write needs of a lease: where its hold lives, its
    proof, its settings, and how to learn and mark that it ended."""

    __slots__ = ("topology", "route", "fence", "settings", "ended", "mark_lost")

    def __init__(
        self,
        topology: Any,
        route: bytes,
        fence: int,
        settings: Any,
        ended: Optional[str],
        mark_lost: Callable[[], None],
    ) -> None:
        self.topology = topology
        self.route = route
        self.fence = fence
        self.settings = settings
        #: "lost", "released", or None while the lease may hold.
        self.ended = ended
        self.mark_lost = mark_lost


def held(lease: Any) -> Held:
    """The one place that reads a Lease's (blocking or asyncio) insides.
    Refuses a Redlock lease."""
    backend = getattr(lease, "_b", None)
    sh = getattr(lease, "_sh", None)
    mark_lost: Callable[[], None]
    if backend is not None:
        mark_lost = lease._mark_lost  # the asyncio Lease
        released = lease._st.released
    elif sh is not None:
        backend = sh.backend  # the blocking Lease
        mark_lost = sh.mark_lost
        released = sh.state.released
    if not isinstance(backend, (SingleBackend, _Backend)):
        # A Redlock lease: its backend spans several servers.
        raise InvalidRequest(NOT_ONE_SERVER)
    ended = "released" if released else ("lost" if lease.lost else None)
    return Held(backend.topology, backend.spec.route_key(), lease.fence, backend.settings, ended, mark_lost)


def _invalid(e: core.Invalid) -> InvalidRequest:
    return InvalidRequest(str(e))


def _key(resource: Key) -> bytes:
    if isinstance(resource, bytes):
        return resource
    if isinstance(resource, str):
        try:
            return resource.encode()
        except UnicodeEncodeError:
            raise InvalidRequest(f"resource {resource!r} is not valid UTF-8 text") from None
    raise InvalidRequest(f"a resource is a str or bytes, not {resource!r}")


class _Own:
    """An error reply that is the command's own answer (code first)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _answer(reply: Any, h: Optional[Held]) -> Any:
    """The command's reply, or its own error reply raised."""
    if not isinstance(reply, _Own):
        return reply
    code, message = core.refusal(reply.text)
    if code == core.NOT_HELD:
        if h is not None:
            h.mark_lost()
        raise NotHeld("the lease's hold is not live on the server (expired, released or taken over): nothing was run")
    raise Refused(code, message)


def _sorted_reply(r: Any, sent: List[bool]) -> Any:
    """The last reply of an attempt: a transient error reply (a redirect,
    ``LOADING``, ...) ran nothing and is raised for the topology to follow
    or retry; any other error reply is the command's own answer."""
    if isinstance(r, Exception):
        text = reply_text(r)
        if isinstance(r, redis.exceptions.AskError) or core.is_transient(text):
            sent[0] = False
            raise r
        return _Own(text)
    return r


def _gave_up(f: Failure, sent: bool, read_only: bool, outage: Outage, retry_for: float, deadline: float) -> float:
    """After a failed attempt: the pause before the next one, or the
    error raised."""
    if f.kind == FATAL:
        raise f.into_error() from None
    if core.after_failure(sent, read_only) == core.MAY_HAVE_RUN:
        raise Unavailable(f"{f.into_error()}; {core.MAY_HAVE_RUN_NOTE}") from None
    pause = outage.next_pause(retry_for, deadline)
    if pause is None:
        raise f.into_error() from None
    return pause


# --- blocking ------------------------------------------------------------------


def _run(topology: Any, route: bytes, settings: Any, cmd: Tuple[bytes, ...], read_only: bool) -> Any:
    deadline = now() + settings.retry_for
    outage = Outage(now, random.randrange)
    dead_pooled = 0
    while True:
        sent = [False]
        dead = [False]

        def op(conn: Any, asking: bool) -> Any:
            if getattr(conn, "_dlock_pooled", False):
                try:
                    send(conn, [(b"PING",)])
                    read_all(conn, 1)  # an error reply (-LOADING, ...): alive
                except BaseException as e:
                    dead[0] = is_io_error(e) and not isinstance(e, redis.exceptions.TimeoutError)
                    raise
            cmds = [(b"ASKING",), cmd] if asking else [cmd]
            sent[0] = True
            send(conn, cmds)
            return _sorted_reply(read_all(conn, len(cmds))[-1], sent)

        try:
            return topology.run(route, settings.io_timeout, 0.0, op)
        except Failure as f:
            if dead[0] and not sent[0] and dead_pooled < DEAD_POOLED:
                dead_pooled += 1
                continue
            time.sleep(_gave_up(f, sent[0], read_only, outage, settings.retry_for, deadline))


def _written(lease: Any, build: Callable[[bytes, int], Tuple[bytes, ...]]) -> Any:
    h = held(lease)
    try:
        cmd = build(h.route, h.fence)
    except core.Invalid as e:
        raise _invalid(e) from None
    if h.ended is not None:
        if h.ended == "lost":
            h.mark_lost()
        raise NotHeld(f"the lease was {h.ended} before the guarded write: nothing was sent")
    return _answer(_run(h.topology, h.route, h.settings, cmd, False), h)


def write(lease: Any, command: Sequence[Arg]) -> Any:
    """``lease.write(*command)``: the command's reply."""
    return _written(lease, lambda r, f: core.write_cmd(r, f, command))


def write_batch(lease: Any, commands: Sequence[Sequence[Arg]]) -> List[Any]:
    """``lease.write_batch(commands)``: the replies, in order."""
    replies = _written(lease, lambda r, f: core.batch_cmd(r, f, commands))
    if not isinstance(replies, list):
        raise unexpected(replies)
    return replies


def _checked(reply: Any, h: Optional[Held]) -> bool:
    live = core.check_reply(_answer(reply, h))
    if live is None:
        raise unexpected(reply)
    if not live and h is not None:
        h.mark_lost()
    return live


def check(lease: Any) -> bool:
    """``lease.check()``: whether the lease's hold is live on the server
    now (``DLOCK.CHECK``); False marks the lease lost."""
    h = held(lease)
    try:
        cmd = core.check_cmd(h.route, h.fence)
    except core.Invalid as e:
        raise _invalid(e) from None
    if h.ended is not None:
        if h.ended == "lost":
            h.mark_lost()
        return False
    return _checked(_run(h.topology, h.route, h.settings, cmd, True), h)


def check_fence(topology: Any, settings: Any, resource: Key, fence: int) -> bool:
    """``locker.check(resource, fence)``: whether ``fence`` is a live hold
    on ``resource`` now."""
    route = _key(resource)
    try:
        cmd = core.check_cmd(route, fence)
    except core.Invalid as e:
        raise _invalid(e) from None
    return _checked(_run(topology, route, settings, cmd, True), None)


# --- asyncio -------------------------------------------------------------------


async def _arun(topology: Any, route: bytes, settings: Any, cmd: Tuple[bytes, ...], read_only: bool) -> Any:
    deadline = now() + settings.retry_for
    outage = Outage(now, random.randrange)
    dead_pooled = 0
    while True:
        sent = [False]
        dead = [False]

        async def op(conn: Any, asking: bool) -> Any:
            if getattr(conn, "_dlock_pooled", False):
                try:
                    await _send(conn, [(b"PING",)])
                    await _read_all(conn, 1)
                except Exception as e:
                    dead[0] = is_io_error(e) and not isinstance(e, redis.exceptions.TimeoutError)
                    raise
            cmds = [(b"ASKING",), cmd] if asking else [cmd]
            sent[0] = True
            await _send(conn, cmds)
            return _sorted_reply((await _read_all(conn, len(cmds)))[-1], sent)

        try:
            return await topology.run(route, settings.io_timeout, 0.0, op)
        except Failure as f:
            if dead[0] and not sent[0] and dead_pooled < DEAD_POOLED:
                dead_pooled += 1
                continue
            await asyncio.sleep(_gave_up(f, sent[0], read_only, outage, settings.retry_for, deadline))


async def _awritten(lease: Any, build: Callable[[bytes, int], Tuple[bytes, ...]]) -> Any:
    h = held(lease)
    try:
        cmd = build(h.route, h.fence)
    except core.Invalid as e:
        raise _invalid(e) from None
    if h.ended is not None:
        if h.ended == "lost":
            h.mark_lost()
        raise NotHeld(f"the lease was {h.ended} before the guarded write: nothing was sent")
    return _answer(await _arun(h.topology, h.route, h.settings, cmd, False), h)


async def awrite(lease: Any, command: Sequence[Arg]) -> Any:
    return await _awritten(lease, lambda r, f: core.write_cmd(r, f, command))


async def awrite_batch(lease: Any, commands: Sequence[Sequence[Arg]]) -> List[Any]:
    replies = await _awritten(lease, lambda r, f: core.batch_cmd(r, f, commands))
    if not isinstance(replies, list):
        raise unexpected(replies)
    return replies


async def acheck(lease: Any) -> bool:
    h = held(lease)
    try:
        cmd = core.check_cmd(h.route, h.fence)
    except core.Invalid as e:
        raise _invalid(e) from None
    if h.ended is not None:
        if h.ended == "lost":
            h.mark_lost()
        return False
    return _checked(await _arun(h.topology, h.route, h.settings, cmd, True), h)


async def acheck_fence(topology: Any, settings: Any, resource: Key, fence: int) -> bool:
    route = _key(resource)
    try:
        cmd = core.check_cmd(route, fence)
    except core.Invalid as e:
        raise _invalid(e) from None
    return _checked(await _arun(topology, route, settings, cmd, True), None)

