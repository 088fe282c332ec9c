"""Handing an election's lead to a chosen candidate for asyncio: the
blocking :mod:`dlock._handover` with ``await`` (the candidate found in
``DLOCK.WAITERS`` pages, the handover with no renewal in flight, and
``prefer``'s task)."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Optional

from ._anode import Conn, _pipeline
from ._core.retry import Outage
from ._handover import HANDED_OVER, PAGE, candidate_in, check_id, is_refusal, lost_reply_pause
from ._spec import Key, Spec, now
from .errors import ServerError

if TYPE_CHECKING:
    from ._alease import Lease
    from ._alocker import Locker


async def find(locker: "Locker", name: Key, id: str) -> Optional[str]:
    offset = 0
    while True:
        page = await locker.waiters(name, offset=offset, count=PAGE)
        token = candidate_in(page, id)
        if token is not None or len(page) < PAGE:
            return token
        offset += len(page)


async def hand_over(locker: "Locker", name: Key, lease: "Lease", id: str) -> bool:
    """As :func:`dlock._handover.hand_over`."""
    id = check_id(id)
    to = await find(locker, name, id)
    if to is None:
        return False
    st = lease._st
    async with lease._renewing:
        if st.released or st.over(now()):
            return False
        cmd = ("DLOCK.RELEASE", name, lease.token, "TO", to)

        async def op(conn: Conn, asking: bool) -> Any:
            r = (await _pipeline(conn, [("ASKING",), cmd] if asking else [cmd]))[-1]
            if isinstance(r, Exception):
                raise r
            return r

        key = Spec([name], 1.0).route_key()
        # As the blocking handover: a lost reply is resolved by sending again.
        deadline = now() + locker.settings.retry_for
        outage = Outage(now, random.randrange)
        while True:
            try:
                reply = await locker.topology.run(key, locker.settings.io_timeout, 0.0, op)
                break
            except Exception as e:  # noqa: BLE001 - a Failure or a server error
                pause = lost_reply_pause(e, outage, locker.settings.retry_for, deadline)
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
                err = e.into_error() if hasattr(e, "into_error") else e
                if is_refusal(err):
                    return False
                raise err from None
        if reply == 1:
            st.released = True
            st.loss_reason = HANDED_OVER
            lease._mark_lost()
            return True
        if reply == 0:
            lease._mark_lost()
            return False
        raise ServerError(f"unexpected DLOCK.RELEASE ... TO reply {reply!r}")


def prefer(locker: "Locker", name: Key, lease: "Lease", id: str, every: float) -> "asyncio.Task[None]":
    """The task that hands the lead to ``id`` as soon as it waits: tried
    now, then every ``every`` seconds, until the lead ends."""

    async def run() -> None:
        while not lease.released and not lease.lost:
            try:
                if await hand_over(locker, name, lease, id):
                    return
            except Exception:  # noqa: BLE001 - tried again at the next period
                pass
            if await lease.wait_lost(every):
                return

    return asyncio.ensure_future(run())
