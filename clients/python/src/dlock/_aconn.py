"""One ``redis.asyncio`` connection of dlock's own: commands written and
replies read on it, and its closing, from a task being cancelled (without
awaiting) or without its event loop (a closed loop's, a forked parent's)."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import redis

Conn = Any


async def _close(conn: Conn) -> None:
    try:
        await conn.disconnect()
    except BaseException:
        pass


def _abort(conn: Conn, then_send: Optional[bytes] = None) -> None:
    """Closes a connection without awaiting (in a cancelled task), after
    writing ``then_send`` behind what it sent: the transport flushes it
    before closing. Its slot in its pool is freed, and it sends nothing
    more (see :func:`_send`)."""
    conn._dlock_closed = True
    slots = getattr(conn, "_dlock_slots", None)
    if slots is not None:
        conn._dlock_slots = None
        slots.forget(conn._dlock_waits)
    w = getattr(conn, "_writer", None)
    try:
        if w is not None:
            if then_send:
                w.write(then_send)
            w.close()
    except Exception:
        pass
    try:
        conn._reader = None
        conn._writer = None
        parser = getattr(conn, "_parser", None)
        if parser is not None:
            parser.on_disconnect()
    except Exception:
        pass


def _drop(conn: Conn) -> None:
    """Closes the socket of a connection whose event loop is closed, or
    that a forked child inherited, without its loop: a closed loop cannot
    run the transport's close, and in a child the loop's selector is the
    parent's (unregistering the socket there would stop the parent hearing
    from it). Closing this process's descriptor leaves the parent's socket
    as it is."""
    conn._dlock_closed = True
    conn._dlock_slots = None
    w = getattr(conn, "_writer", None)
    # redis-py's own clean-up touches the transport: it must not.
    conn._writer = None
    conn._reader = None
    if w is None:
        return
    try:
        tr = w.transport
        ts = tr.get_extra_info("socket")
        raw = getattr(ts, "_sock", ts)
        # The transport that owns the socket (under TLS, the one beneath):
        # told it is closed, it does not warn or close it again.
        inner = getattr(getattr(tr, "_ssl_protocol", None), "_transport", None) or tr
        if getattr(inner, "_sock", None) is not None:
            inner._sock = None
        # Marked closing, so that the stream does not warn of a closed loop.
        for t in (tr, inner):
            if hasattr(t, "_closing"):
                t._closing = True
            if hasattr(t, "_closed"):
                t._closed = True
        if raw is not None:
            raw.close()
    except Exception:
        pass


def _pack(conn: Conn, cmds: Sequence[Tuple[Any, ...]]) -> bytes:
    return b"".join(conn.pack_commands(cmds))


async def _send(conn: Conn, cmds: Sequence[Tuple[Any, ...]]) -> None:
    if getattr(conn, "_dlock_closed", False):
        # Closed by its caller (interrupted while ``asyncio.wait_for`` had
        # started the call in a task of its own): redis-py would connect
        # again and send a command nobody waits for, such as an ACQUIRE.
        raise redis.exceptions.ConnectionError("the connection was closed by its caller")
    await conn.send_packed_command(conn.pack_commands(cmds), check_health=False)


async def _read_all(conn: Conn, n: int) -> List[Any]:
    out: List[Any] = []
    for _ in range(n):
        try:
            # The connection is this module's to close (a cancelled acquire
            # writes a RELEASE on it first).
            out.append(await conn.read_response(disconnect_on_error=False))
        except redis.exceptions.ResponseError as e:
            out.append(e)
    return out


async def _pipeline(conn: Conn, cmds: Sequence[Tuple[Any, ...]]) -> List[Any]:
    await _send(conn, cmds)
    return await _read_all(conn, len(cmds))
