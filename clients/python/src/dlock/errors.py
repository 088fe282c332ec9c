"""The exceptions dlock raises, and how a failed server call is classified.

Every exception derives from :class:`DlockError`. "Busy" is not an error:
``Lock.acquire()`` returns ``None`` when the lock was not granted, and only
the context manager (``with locker.lock(...)``) raises :class:`NotAcquired`.
"""

from __future__ import annotations

import socket
from typing import Optional, Tuple

from redis import exceptions as rx

__all__ = [
    "DlockError",
    "InvalidRequest",
    "NotAcquired",
    "LockLost",
    "MaxHoldReached",
    "Unavailable",
    "NoQuorum",
    "Quarantined",
    "TooFewReplicas",
    "ModuleNotLoaded",
    "Denied",
    "ServerError",
]


class DlockError(Exception):
    """Base class of every dlock exception."""


class InvalidRequest(DlockError, ValueError):
    """The request itself is invalid: no server was asked."""


class NotAcquired(DlockError):
    """The lock was not granted: busy, or the wait ran out (raised by the
    context manager only; ``acquire()`` returns ``None`` instead)."""


class LockLost(DlockError):
    """The lease ended (expired, deleted by an admin, taken over) before the
    operation, or while the ``with`` block ran: work done meanwhile ran
    without the lock. ``reason``: why, for a capped lease (``max_hold``):
    the cap reached, or the server's refusal of an extend past it; else
    None."""

    def __init__(self, *args: object, reason: Optional[str] = None) -> None:
        super().__init__(*args)
        self.reason = reason


def lost_error(resource: object, reason: Optional[str]) -> LockLost:
    """The error leaving a ``with`` block whose lease was lost: with the
    server's reason, when it gave one."""
    text = f"the lease on {resource!r} was lost before the block ended"
    if reason is None:
        return LockLost(text)
    return MaxHoldReached(f"{text}: {reason}", reason=reason)


class MaxHoldReached(LockLost):
    """The lease's cap (``max_hold``, the server's ``MAXHOLD``): reached,
    or an extend past it refused by the server. ``reason`` says which."""


class Unavailable(DlockError):
    """No server could be reached, or none answered in time, after retrying
    with the same token for as long as allowed."""


class NoQuorum(Unavailable):
    """Redlock: too many servers were unreachable for a majority."""

    def __init__(self, granted: int, reached: int, nodes: int) -> None:
        self.granted = granted
        self.reached = reached
        self.nodes = nodes
        super().__init__(
            f"no quorum: granted on {granted}, reached {reached} of {nodes} servers"
        )


class Quarantined(DlockError):
    """The server refuses new grants for a while after a restart or failover
    that may have lost acknowledged grants (its ``QUARANTINE`` error)."""


class TooFewReplicas(DlockError):
    """Fewer replicas than ``min_replicas`` acknowledged the write in time.
    On acquire, the grant was released again; on a renewal the lease budget
    stays at the last acknowledged deadline."""

    def __init__(self, acked: int, wanted: int) -> None:
        self.acked = acked
        self.wanted = wanted
        super().__init__(
            f"only {acked} of {wanted} replicas acknowledged the write in time"
        )


class ModuleNotLoaded(DlockError):
    """The server does not know dlock's commands: the module is not loaded."""

    def __init__(self, addr: str = "") -> None:
        self.addr = addr
        super().__init__(
            f"the dlock module is not loaded on {addr or 'the server'}: load it with "
            "`loadmodule /path/to/libdlock.so` in the server's config, or "
            "`MODULE LOAD /path/to/libdlock.so`"
        )


class Denied(DlockError):
    """The server refused the login (wrong user or password), or the user's
    ACL denies a dlock command (``NOPERM``)."""

    def __init__(self, detail: str, addr: str = "") -> None:
        self.addr = addr
        self.detail = detail
        msg = f"{detail} on {addr or 'the server'}"
        if detail.startswith("authentication failed"):
            msg += ": check the user and password"
        super().__init__(msg)


class ServerError(DlockError):
    """Any other error reply from the server, as it was sent (e.g.
    ``ERR syntax error``, ``WRONGTYPE ...``, ``CROSSSLOT ...``)."""


# --- Classification of failures (internal) --------------------------------

RETRY = "retry"  # connection broke or timed out, or the server is in transit
MOVED = "moved"
ASK = "ask"
FATAL = "fatal"


class Failure(Exception):
    """A failed server call: its kind (retry, moved, ask, fatal), the error
    to raise, and for a redirect the address."""

    def __init__(self, kind: str, error: DlockError, addr: str = "") -> None:
        super().__init__(str(error))
        self.kind = kind
        self.error = error
        self.addr = addr

    def at(self, addr: str) -> "Failure":
        """The failure, its message naming the server ``addr`` (once)."""
        e = self.error
        if isinstance(e, ModuleNotLoaded) and not e.addr:
            self.error = ModuleNotLoaded(addr)
        elif isinstance(e, Denied) and not e.addr:
            self.error = Denied(e.detail, addr)
        elif type(e) in (Unavailable, Quarantined):
            msg = str(e)
            if not msg.startswith(addr):
                self.error = type(e)(f"{addr}: {msg}")
        return self

    def into_error(self) -> DlockError:
        if self.kind in (MOVED, ASK):
            return Unavailable(f"redirected to {self.addr} too many times")
        return self.error


# Error codes redis-py strips from the message (its parser maps them to
# exception classes).
_STRIPPED = {
    rx.TryAgainError: "TRYAGAIN",
    rx.ClusterDownError: "CLUSTERDOWN",
    rx.MasterDownError: "MASTERDOWN",
    rx.ReadOnlyError: "READONLY",
    rx.BusyLoadingError: "LOADING",
    rx.ClusterCrossSlotError: "CROSSSLOT",
    rx.NoPermissionError: "NOPERM",
    rx.OutOfMemoryError: "OOM",
}

IO_ERRORS: Tuple[type, ...] = (
    rx.ConnectionError,
    rx.TimeoutError,
    OSError,
    socket.timeout,
    EOFError,
)


def is_io_error(e: BaseException) -> bool:
    """A broken or timed-out connection (the command may have run: its
    reply was lost), as opposed to an error reply (which the server sends
    instead of running the command)."""
    if isinstance(e, (rx.AuthenticationError,)):
        return False
    return isinstance(e, IO_ERRORS)


def reply_text(e: BaseException) -> str:
    """An error reply as the server sent it, code included."""
    msg = str(e)
    for cls, code in _STRIPPED.items():
        if isinstance(e, cls):
            return f"{code} {msg}"
    if type(e) is rx.ResponseError:
        first = msg.split(" ", 1)[0]
        if not (first.isupper() and first.isalpha()):
            return f"ERR {msg}"
    return msg


def classify(e: BaseException) -> Failure:
    """How a failed call is handled: retried with the same token, followed
    (a cluster redirect), or final."""
    # MovedError derives from AskError in redis-py: MOVED first.
    if isinstance(e, rx.MovedError):
        return Failure(MOVED, Unavailable(str(e)), f"{e.host}:{e.port}")
    if isinstance(e, rx.AskError):
        return Failure(ASK, Unavailable(str(e)), f"{e.host}:{e.port}")
    if isinstance(e, rx.AuthenticationError):
        return Failure(FATAL, Denied("authentication failed"))
    if is_io_error(e):
        return Failure(RETRY, Unavailable(str(e) or type(e).__name__))
    if isinstance(e, rx.NoPermissionError):
        return Failure(FATAL, Denied(reply_text(e)))
    if isinstance(
        e,
        (
            rx.BusyLoadingError,
            rx.TryAgainError,
            rx.ClusterDownError,
            rx.MasterDownError,
            rx.ReadOnlyError,
        ),
    ):
        return Failure(RETRY, Unavailable(reply_text(e)))
    text = reply_text(e)
    code = text.split(" ", 1)[0]
    if code in ("MOVED", "ASK"):
        # Older redis-py parsers map these only for their cluster client.
        parts = text.split()
        if len(parts) >= 3:
            return Failure(MOVED if code == "MOVED" else ASK, Unavailable(text), parts[2])
    # NOREPLICAS: too few replicas for `min-replicas-to-write` (a master
    # whose replica was promoted, a partition, replicas reconnecting).
    if code in ("TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "READONLY", "NOREPLICAS"):
        return Failure(RETRY, Unavailable(text))
    if code == "NOPERM":
        return Failure(FATAL, Denied(text))
    low = text.lower()
    if low.startswith("err unknown command") and low[21:27] == "dlock.":
        # The reply echoes the arguments, the token among them: not kept.
        return Failure(FATAL, ModuleNotLoaded())
    if text.startswith("NOAUTH") or text.startswith("WRONGPASS"):
        return Failure(FATAL, Denied("authentication failed"))
    if text.startswith("QUARANTINE"):
        return Failure(FATAL, Quarantined(text))
    if text.startswith("MAXHOLD"):
        return Failure(FATAL, MaxHoldReached(text, reason=text))
    if text.startswith("UNBLOCKED"):
        # A waiter's server became a replica (a failover): the new master
        # may grant it.
        return Failure(RETRY, Unavailable(text))
    if isinstance(e, rx.RedisError):
        return Failure(FATAL, ServerError(text))
    raise e


def lost_master(e: BaseException) -> bool:
    """Whether ``e`` says the server is no longer a master that can serve
    dlock: it became a replica (``READONLY``), or lost its replicas
    (``NOREPLICAS``: its replica was promoted). Its connections are not
    used again."""
    if isinstance(e, rx.ReadOnlyError):
        return True
    return isinstance(e, rx.ResponseError) and reply_text(e).startswith("NOREPLICAS")


def unexpected(reply: object) -> ServerError:
    return ServerError(f"unexpected reply {reply!r}")


def first_line(s: Optional[str]) -> str:
    return (s or "").splitlines()[0] if s else ""


# --- Guarded writes (DLOCK.GUARD) -------------------------------------------


class NotHeld(LockLost):
    """A guarded write or check found the lease's hold not live (expired,
    released, taken over), or the lease was already known lost or released
    (then nothing was sent): nothing was written, and the lease is marked
    lost."""


class Refused(DlockError):
    """A guarded write's command was refused or failed (``code`` as the
    server sent it: the command's own, ``WRONGTYPE``, ``NOPERM``, ``OOM``,
    ``CROSSSLOT``, or ``ERR`` for a command the server does not run guarded
    or a batch over its limit). Nothing was written (a batch is undone);
    the lease is not lost."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code} {message}" if message else code)


class NotOwned(DlockError, RuntimeError):
    """``Lock.release()`` or ``Lock.extend()`` found no lease of that Lock
    held by the calling thread (task, with asyncio): never acquired there,
    or already released. A :class:`RuntimeError` too, as
    ``threading.Lock.release()`` raises on an unlocked lock."""


__all__ += ["NotHeld", "Refused", "NotOwned"]
