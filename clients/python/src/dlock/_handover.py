"""Handing an election's lead to a chosen candidate (``DLOCK.RELEASE
resource token TO waiter_token``), on the blocking API: the candidate's
token found in ``DLOCK.WAITERS`` pages, the handover with no renewal in
flight, and :meth:`dlock.Election` ``prefer``'s thread."""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ._core.election import id_problem
from ._core.retry import Outage
from ._node import check, run_pipeline
from ._spec import Key, Spec, now
from .errors import RETRY, InvalidRequest, ServerError

if TYPE_CHECKING:
    from ._lease import Lease
    from .locker import Locker

#: The loss reason of a lead handed over.
HANDED_OVER = "handed over to another candidate (RELEASE ... TO)"

#: The server's bound on one ``DLOCK.WAITERS`` page.
PAGE = 1000


def check_id(id: object) -> str:
    """The id of a candidate to hand over to, checked."""
    problem = id_problem(id) if id is not None else "an election id must not be None"
    if problem is not None:
        raise InvalidRequest(problem)
    assert isinstance(id, str)
    return id


def candidate_in(page: List[Dict[str, Any]], id: str) -> Optional[str]:
    """The token of candidate ``id`` in a page of waiters, the first in
    line (a set request is no candidate)."""
    for w in page:
        token = w.get("token")
        if isinstance(token, bytes):
            token = token.decode(errors="replace")
        if w.get("set") is None and isinstance(token, str) and token.split("/", 1)[0] == id and "/" in token:
            return token
    return None


def is_refusal(e: BaseException) -> bool:
    """A refusal that changes nothing: the candidate no longer waits, or
    does not fit now."""
    text = str(e)
    return "NOTWAITING dlock:" in text or "NOTREADY dlock:" in text


def find(locker: "Locker", name: Key, id: str) -> Optional[str]:
    offset = 0
    while True:
        page = locker.waiters(name, offset=offset, count=PAGE)
        token = candidate_in(page, id)
        if token is not None or len(page) < PAGE:
            return token
        offset += len(page)


def lost_reply_pause(e: BaseException, outage: Outage, retry_for: float, deadline: float) -> Optional[float]:
    """After a failed handover: the pause before sending it again, when the
    failure may have lost the reply (a connection error) and time is left;
    else None."""
    if getattr(e, "kind", None) != RETRY:
        return None
    return outage.next_pause(retry_for, deadline)


def hand_over(locker: "Locker", name: Key, lease: "Lease", id: str) -> bool:
    """Hands the lead ``lease`` holds on ``name`` to candidate ``id`` if it
    waits: True when it leads now (the lease is released and marked lost,
    with ``HANDED_OVER``); False when it does not wait or fit, or the lead
    had ended already."""
    id = check_id(id)
    to = find(locker, name, id)
    if to is None:
        return False
    sh = lease._sh
    with sh.renewing:
        with sh.lock:
            if sh.state.released or sh.state.over(now()):
                return False
        cmd = ("DLOCK.RELEASE", name, lease.token, "TO", to)

        def op(conn: Any, asking: bool) -> Any:
            return check(run_pipeline(conn, [("ASKING",), cmd] if asking else [cmd]))[-1]

        key = Spec([name], 1.0).route_key()
        # A reply lost on the way leaves the outcome unknown: the command is
        # sent again, and a hold handed over already answers 0 (not held).
        deadline = now() + locker.settings.retry_for
        outage = Outage(now, random.randrange)
        while True:
            try:
                reply = locker.topology.run(key, locker.settings.io_timeout, 0.0, op)
                break
            except Exception as e:  # noqa: BLE001 - a Failure or a ServerError
                pause = lost_reply_pause(e, outage, locker.settings.retry_for, deadline)
                if pause is not None:
                    time.sleep(pause)
                    continue
                err = e.into_error() if hasattr(e, "into_error") else e
                if is_refusal(err):
                    return False
                raise err from None
        if reply == 1:
            with sh.lock:
                sh.state.loss_reason = HANDED_OVER
                sh.gen += 1
            # The loss before `released`: a wait_lost woken by `released`
            # answers False unless it finds the loss marked already.
            sh.mark_lost()
            with sh.lock:
                sh.state.released = True
                sh.notify()
            return True
        if reply == 0:
            sh.mark_lost()
            return False
        raise ServerError(f"unexpected DLOCK.RELEASE ... TO reply {reply!r}")


def prefer(locker: "Locker", name: Key, lease: "Lease", id: str, every: float) -> None:
    """Starts the thread that hands the lead to ``id`` as soon as it waits:
    tried now, then every ``every`` seconds, until the lead ends."""

    def run() -> None:
        while not lease.released and not lease.lost:
            try:
                if hand_over(locker, name, lease, id):
                    return
            except Exception:  # noqa: BLE001 - tried again at the next period
                pass
            if lease.wait_lost(every):
                return

    threading.Thread(target=run, name="dlock-prefer", daemon=True).start()
