"""Guarded writes (``DLOCK.GUARD``) and the sequencer check
(``DLOCK.CHECK``), without I/O: the commands, what an error reply means,
and whether a failed attempt may be tried again.

A guarded write is not idempotent (an ``INCR`` run twice counts twice): it
is tried again only while it surely did not run (no connection, or an
error reply that ran nothing). Once it may have reached the server and its
reply was lost, the caller is told so instead. A check only reads and is
retried like any read."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

#: The server's fences: 1 to 2^63-1.
MAX_FENCE = (1 << 63) - 1

#: Error codes that say "not now, try again" (or "elsewhere"): the server
#: ran nothing, and another try may succeed.
TRANSIENT = frozenset(
    ("LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOREPLICAS", "MOVED", "ASK")
)

Arg = Union[str, bytes, int]


class Invalid(Exception):
    """A guarded write or check that cannot be sent (the shells raise it
    as ``InvalidRequest``)."""


def _word(a: object, which: str) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, str):
        try:
            return a.encode()
        except UnicodeEncodeError:
            raise Invalid(f"{which} has an argument that is not valid UTF-8 text: {a!r}") from None
    if isinstance(a, int) and not isinstance(a, bool):
        return str(a).encode()
    raise Invalid(f"{which} takes str, bytes or int arguments, not {type(a).__name__} {a!r}")


def _words(command: Sequence[object], which: str) -> List[bytes]:
    if isinstance(command, (str, bytes)) or not isinstance(command, (tuple, list)):
        raise Invalid(f"{which} must be a tuple or list of arguments, not {command!r}")
    if not command:
        raise Invalid(f"{which} is empty")
    return [_word(a, which) for a in command]


def _proof(name: str, resource: bytes, fence: object) -> List[bytes]:
    if not resource:
        raise Invalid("resource must not be empty")
    if isinstance(fence, bool) or not isinstance(fence, int) or not 1 <= fence <= MAX_FENCE:
        raise Invalid(f"fence {fence!r} is not a fence (an integer from 1 to 2^63-1)")
    return [name.encode(), resource, b"FENCE", str(fence).encode()]


def write_cmd(resource: bytes, fence: object, command: Sequence[object]) -> Tuple[bytes, ...]:
    """``DLOCK.GUARD resource FENCE fence command [arg ...]``."""
    return tuple(_proof("DLOCK.GUARD", resource, fence) + _words(command, "the command"))


def batch_cmd(resource: bytes, fence: object, commands: Sequence[Sequence[object]]) -> Tuple[bytes, ...]:
    """``DLOCK.GUARD resource FENCE fence BATCH count argc command [arg ...] ...``."""
    if isinstance(commands, (str, bytes)) or not isinstance(commands, (tuple, list)):
        raise Invalid(f"a batch is a list of commands, not {commands!r}")
    if not commands:
        raise Invalid("a guarded batch needs at least one command")
    out = _proof("DLOCK.GUARD", resource, fence) + [b"BATCH", str(len(commands)).encode()]
    for i, one in enumerate(commands):
        words = _words(one, f"command {i + 1} of the batch")
        out.append(str(len(words)).encode())
        out += words
    return tuple(out)


def check_cmd(resource: bytes, fence: object) -> Tuple[bytes, ...]:
    """``DLOCK.CHECK resource FENCE fence``."""
    return tuple(_proof("DLOCK.CHECK", resource, fence))


def is_transient(text: str) -> bool:
    """An error reply (code first) that ran nothing and may succeed when
    tried again (or elsewhere: a redirect)."""
    return text.split(" ", 1)[0] in TRANSIENT


#: What an error reply that is the command's own answer means.
NOT_HELD = "notheld"


def refusal(text: str) -> Tuple[str, str]:
    """An error reply (code first, as the server sent it) that is the
    guarded command's own answer: ``(NOT_HELD, "")`` when the proof did
    not hold, else ``(code, message)``. The server's unknown-command reply
    echoes the arguments (the data written among them): not kept."""
    code, _, message = text.partition(" ")
    if code == "NOTHELD":
        return NOT_HELD, ""
    low = message.lower()
    if code == "ERR" and low.startswith("unknown command"):
        for name in ("dlock.guard", "dlock.check"):
            if f"'{name}'" in low:
                return code, (
                    f"the server does not know {name.upper()}: its dlock module is missing "
                    "or older than guarded writes"
                )
    return code, message


def check_reply(reply: object) -> Optional[bool]:
    """``DLOCK.CHECK``'s answer: True live, False not, None unexpected."""
    if reply == 1 and not isinstance(reply, bool):
        return True
    if reply == 0 and not isinstance(reply, bool):
        return False
    return None


#: After a failed attempt: try again (after a pause, while the call's time
#: lasts), or give up saying the write may have run.
RETRY, MAY_HAVE_RUN = "retry", "may-have-run"


def after_failure(may_have_run: bool, read_only: bool) -> str:
    """A guarded write that may have reached the server is never sent
    again; a check is."""
    if may_have_run and not read_only:
        return MAY_HAVE_RUN
    return RETRY


MAY_HAVE_RUN_NOTE = "the reply of the guarded write was lost: it may or may not have run"
