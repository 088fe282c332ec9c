"""One blocking redis-py connection of dlock's own: dlock's commands
written and their replies read on its socket (see :mod:`dlock._resp`), and
its closing."""

from __future__ import annotations

import socket
from typing import Any, List, Optional, Sequence, Tuple

from . import _resp
from ._spec import MAX_SOCKET_TIMEOUT, now

Conn = Any  # a redis.connection.AbstractConnection


def is_master(conn: Conn) -> bool:
    """Whether the server ``conn`` is connected to answers ``ROLE`` as a
    master."""
    role = run_pipeline(conn, [("ROLE",)])[0]
    if isinstance(role, Exception):
        raise role
    return isinstance(role, list) and bool(role) and role[0] == b"master"


def set_timeout(conn: Conn, t: float) -> None:
    """The reply to what is sent next on ``conn`` is due within ``t``
    seconds, and each write gives up after at most ``t``.

    A plain socket on Linux is left blocking, its timeouts set in the
    kernel (``SO_RCVTIMEO``/``SO_SNDTIMEO``): a socket with a Python timeout
    polls before every ``send`` and ``recv``, and ``settimeout`` makes an
    ``ioctl``; each of those releases the GIL, which with many threads
    contending for a lock is a switch between threads. The kernel's
    timeout is changed only when it would be longer than ``t`` or much
    shorter (under ``min(t, 1 s)``): a read it cuts short goes on until
    the reply's due time (see ``_resp.read``), so connections that serve
    calls of a 2 s ``io_timeout`` and waiting ``ACQUIRE`` calls in turn do not
    make two system calls per call. TLS sockets, and other platforms, keep
    Python's timeout (each read and write gives up after ``t``)."""
    sock = conn._sock
    if sock is None:
        return
    t = min(max(t, 0.001), MAX_SOCKET_TIMEOUT)
    if not _resp.KERNEL_TIMEOUTS or type(sock) is not socket.socket:
        if sock.gettimeout() != t:
            sock.settimeout(t)
        return
    kt: Optional[_resp.KernelTimeout] = getattr(conn, "_dlock_kt", None)
    if kt is None or kt.sock is not sock:
        sock.settimeout(None)
        kt = conn._dlock_kt = _resp.KernelTimeout(sock)
    kt.due = now() + t
    k = kt.k
    if k > t or k < min(t, 1.0):
        kt.set(t)


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
