"""Where requests wait: ``DLOCK.POSITION`` and ``DLOCK.WAITERS`` as
commands and decoded replies, without I/O (the blocking and asyncio
lockers run them)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ._spec import MAX_LIMIT, Key, check_token
from .errors import InvalidRequest, ServerError

#: The most waiters one ``waiters`` call lists (the server's bound on COUNT).
MAX_WAITERS_PAGE = 1000
_MAX_OFFSET = 2**63 - 1


def position_command(resource: Key, token: str) -> Tuple[Any, ...]:
    check_token(token)
    if token is None:
        raise InvalidRequest("token must be a non-empty str")
    return ("DLOCK.POSITION", resource, token)


def decode_position(v: Any) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    raise ServerError(f"unexpected DLOCK.POSITION reply {v!r}")


def resize_command(resource: Key, n: int) -> Tuple[Any, ...]:
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= MAX_LIMIT:
        raise InvalidRequest(f"a resize takes a limit from 2 to {MAX_LIMIT}, not {n!r}")
    return ("DLOCK.RESIZE", resource, n)


def decode_resize(v: Any) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    raise ServerError(f"unexpected DLOCK.RESIZE reply {v!r}")


def waiters_command(resource: Key, offset: int, count: int) -> Tuple[Any, ...]:
    for name, value, low, high in (("offset", offset, 0, _MAX_OFFSET), ("count", count, 1, MAX_WAITERS_PAGE)):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise InvalidRequest(f"{name} must be an int from {low} to {high}, not {value!r}")
    return ("DLOCK.WAITERS", resource, "OFFSET", offset, "COUNT", count)


def _text(v: Any) -> Any:
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return v
    return v


def decode_waiters(v: Any) -> List[Dict[str, Any]]:
    """One dict per waiter (RESP2's flat arrays of pairs, or RESP3's
    maps), str keys, tokens, owners and sessions as str where UTF-8;
    ``permits`` 1 when the server sends none (one permit asked for)."""
    if not isinstance(v, list):
        raise ServerError(f"unexpected DLOCK.WAITERS reply {v!r}")
    out = []
    for item in v:
        if isinstance(item, dict):
            pairs = list(item.items())
        elif isinstance(item, list) and len(item) % 2 == 0:
            pairs = list(zip(item[0::2], item[1::2]))
        else:
            raise ServerError(f"unexpected DLOCK.WAITERS entry {item!r}")
        fields = {_text(k): _text(x) for k, x in pairs}
        if "position" not in fields or "token" not in fields:
            raise ServerError(f"a DLOCK.WAITERS entry without its fields: {item!r}")
        fields.setdefault("permits", 1)
        out.append(fields)
    return out
