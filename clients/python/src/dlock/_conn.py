"""One blocking redis-py connection of dlock's own: dlock's commands
written and their replies read on its socket (see :mod:`dlock._resp`), and
its closing."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from . import _resp
from ._spec import MAX_SOCKET_TIMEOUT

Conn = Any  # a redis.connection.AbstractConnection


def is_master(conn: Conn) -> bool:
    """Whether the server ``conn`` is connected to answers ``ROLE`` as a
    master."""
    role = run_pipeline(conn, [("ROLE",)])[0]
    if isinstance(role, Exception):
        raise role
    return isinstance(role, list) and bool(role) and role[0] == b"master"


def set_timeout(conn: Conn, t: float) -> None:
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        t = min(max(t, 0.001), MAX_SOCKET_TIMEOUT)
        if sock.gettimeout() != t:
            sock.settimeout(t)


#: ``send(conn, cmds)``: writes the commands (the socket's timeout applies).
send = _resp.send
#: ``read_all(conn, n)``: ``n`` replies; an error reply is returned in place
#: (as redis-py's exception) so that the replies after it are still read and
#: the connection stays in a known state.
read_all = _resp.read


def run_pipeline(conn: Conn, cmds: Sequence[Tuple[Any, ...]]) -> List[Any]:
    _resp.send(conn, cmds)
    return _resp.read(conn, len(cmds))


def close(conn: Conn) -> None:
    """Closes a connection taken from a :class:`Node` (its slot is freed
    for the next caller), or any other."""
    node = getattr(conn, "_dlock_node", None)
    if node is not None:
        node.forget(conn)
    try:
        conn.disconnect()
    except Exception:
        pass


def check(replies: List[Any]) -> List[Any]:
    """Raises the first error reply among ``replies``."""
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return replies
