"""A lean RESP writer and reader for dlock's own commands on a connection
redis-py set up (address, login, TLS, protocol). redis-py's general command
path costs about 100 µs of Python per command; a lock's hot path (acquire,
release) sends a handful of short commands whose replies are integers, nil,
simple strings or errors, and reading them here costs a fraction of that.

Error replies become redis-py's own exception classes (its parser's
``parse_error``), so that redirects, ``LOADING``, ``NOPERM``... are told
apart as everywhere else."""

from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Any, List, Optional, Sequence, Tuple

from redis import exceptions as rx

try:  # redis-py >= 5
    from redis._parsers.base import BaseParser as _BaseParser
except ImportError:  # pragma: no cover
    from redis.connection import BaseParser as _BaseParser  # type: ignore[attr-defined,unused-ignore]


def _arg(a: Any) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, str):
        return a.encode()
    if isinstance(a, int) and not isinstance(a, bool):
        return str(a).encode()
    if isinstance(a, memoryview):
        return a.tobytes()
    raise TypeError(f"cannot send {a!r}")


def pack(cmds: Sequence[Tuple[Any, ...]]) -> bytes:
    """Commands as one RESP buffer."""
    # dlock's commands are ASCII words, numbers and (mostly ASCII) str
    # resources and tokens: formatted as one str, encoded once.
    out: List[str] = []
    app = out.append
    for c in cmds:
        app(f"*{len(c)}\r\n")
        for a in c:
            t = type(a)
            if t is str and a.isascii():
                app(f"${len(a)}\r\n{a}\r\n")
            elif t is int:
                a = str(a)
                app(f"${len(a)}\r\n{a}\r\n")
            else:
                return _pack_bytes(cmds)
    return "".join(out).encode()


def _pack_bytes(cmds: Sequence[Tuple[Any, ...]]) -> bytes:
    out: List[bytes] = []
    for c in cmds:
        out.append(b"*%d\r\n" % len(c))
        for a in c:
            b = _arg(a)
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _parse_error(text: str) -> Exception:
    """An error reply as redis-py's exception class for it."""
    e: Exception = _BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    return e


#: A ``struct timeval`` for ``SO_RCVTIMEO``/``SO_SNDTIMEO``, where its
#: layout is known (64-bit Linux: two longs); elsewhere sockets keep
#: Python's timeouts.
_TIMEVAL = struct.Struct("@ll")
KERNEL_TIMEOUTS = sys.platform.startswith("linux") and _TIMEVAL.size == 16


class KernelTimeout:
    """A blocking socket's timeouts as set in the kernel (``k`` seconds,
    0 before the first setting), and when the reply now awaited is due
    (``due``, on ``time.monotonic``'s clock); see ``_conn.set_timeout``."""

    __slots__ = ("sock", "k", "due")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.k = 0.0
        self.due = 0.0

    def set(self, t: float) -> None:
        sec = int(t)  # t >= 1 ms: never the zero timeval (no timeout at all)
        tv = _TIMEVAL.pack(sec, int((t - sec) * 1e6))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.k = t

    def read_on(self) -> bool:
        """A read timed out in the kernel: whether the reply is still not
        due (then the kernel's timeout is made to end no later than the
        due time, and the read goes on)."""
        left = self.due - time.monotonic()
        if left < 0.001:
            return False
        if left < self.k:
            self.set(left)
        return True


class _Incomplete(Exception):
    pass


class _Push(List[Any]):
    """A RESP3 push message (client tracking, ...): not a reply."""


def _line(buf: bytearray, pos: int) -> Tuple[bytes, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    return bytes(buf[pos:end]), end + 2


def _parse(buf: bytearray, pos: int) -> Tuple[Any, int]:
    if pos >= len(buf):
        raise _Incomplete
    t = buf[pos]
    line, pos = _line(buf, pos + 1)
    if t == 58:  # ':'
        return int(line), pos
    if t == 36 or t == 61 or t == 33:  # '$' '=' '!'
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise _Incomplete
        v = bytes(buf[pos : pos + n])
        if t == 33:
            return _parse_error(v.decode("utf-8", "replace")), pos + n + 2
        return v, pos + n + 2
    if t == 43:  # '+'
        return line, pos
    if t == 45:  # '-'
        return _parse_error(line.decode("utf-8", "replace")), pos
    if t == 42 or t == 126 or t == 62:  # '*' '~' '>'
        n = int(line)
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            v, pos = _parse(buf, pos)
            items.append(v)
        return (_Push(items) if t == 62 else items), pos
    if t == 37 or t == 124:  # '%' '|'
        n = int(line)
        d = {}
        for _ in range(n):
            k, pos = _parse(buf, pos)
            v, pos = _parse(buf, pos)
            d[k] = v
        return d, pos
    if t == 95:  # '_'
        return None, pos
    if t == 35:  # '#'
        return line == b"t", pos
    if t == 44:  # ','
        return float(line), pos
    if t == 40:  # '('
        return int(line), pos
    raise rx.InvalidResponse(f"unexpected RESP type {chr(t)!r}")


def send(conn: Any, cmds: Sequence[Tuple[Any, ...]]) -> None:
    """Writes ``cmds`` on ``conn``'s socket (its current timeout applies)."""
    sock = conn._sock
    if sock is None:
        raise rx.ConnectionError("not connected")
    try:
        sock.sendall(pack(cmds))
    except (socket.timeout, BlockingIOError):  # Python's timeout, or the kernel's (_conn.set_timeout)
        raise rx.TimeoutError("Timeout writing to socket") from None
    except OSError as e:
        raise rx.ConnectionError(f"Error while writing to socket: {e}") from None


def read(conn: Any, n: int, out: Optional[List[Any]] = None) -> List[Any]:
    """``n`` replies from ``conn``'s socket; an error reply is returned in
    place (as redis-py's exception) so that the replies after it are read
    too. Raises redis-py's TimeoutError or ConnectionError; the replies
    read before are in ``out`` (when given, the replies go there)."""
    try:
        buf: bytearray = conn._dlock_rbuf
    except AttributeError:
        buf = conn._dlock_rbuf = bytearray()
    if out is None:
        out = []
    if n <= 0:
        return out
    sock = conn._sock
    pos = 0
    while True:
        # Every whole reply in the buffer, then more from the socket.
        while pos < len(buf):
            t = buf[pos]
            if t == 58 or t == 43:  # ':' and '+' (PING's), parsed in place
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                v: Any = int(buf[pos + 1 : end]) if t == 58 else bytes(buf[pos + 1 : end])
                pos = end + 2
            elif buf.startswith(b"$-1\r\n", pos):  # nil
                v = None
                pos += 5
            else:
                try:
                    v, pos = _parse(buf, pos)
                except _Incomplete:
                    break
                if type(v) is _Push:
                    continue
            out.append(v)
            if len(out) == n:
                del buf[:pos]
                return out
        del buf[:pos]
        pos = 0
        if sock is None:
            raise rx.ConnectionError("not connected")
        try:
            data = sock.recv(65536)
        except BlockingIOError:  # the kernel's timeout (see _conn.set_timeout)
            kt = getattr(conn, "_dlock_kt", None)
            if kt is not None and kt.sock is sock and kt.read_on():
                continue
            raise rx.TimeoutError("Timeout reading from socket") from None
        except socket.timeout:
            raise rx.TimeoutError("Timeout reading from socket") from None
        except OSError as e:
            raise rx.ConnectionError(f"Error while reading from socket: {e}") from None
        if not data:
            raise rx.ConnectionError("Connection closed by server.")
        buf += data
