"""Leader election on one resource (:meth:`dlock.Locker.election`):
candidates campaign (wait in the server's FIFO queue to lead), the leader
holds the resource's lock with a watchdog, and its term is the lock's fence,
above every term granted before it on that resource. Anyone can follow who
leads with ``DLOCK.OBSERVE``, which the server answers when the holders
change, never by polling.

The rules (the candidate's token, reading a reply, going on after a
failure) are :mod:`dlock._core.election`'s; this is the blocking shell."""

from __future__ import annotations

import logging
import os
import random
import time
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, overload

from ._core.election import (
    HandingOver,
    Leader,
    Leads,
    NoLeader,
    Nobody,
    Observation,
    candidate_token,
    id_problem,
)
from ._handover import check_id, hand_over, prefer
from ._lease import Lease
from ._node import check, run_pipeline
from ._spec import Duration, Key, Spec, new_token, now, seconds
from .errors import DlockError, Failure, InvalidRequest, NotAcquired, ServerError, RETRY

if TYPE_CHECKING:
    import threading

    from .locker import Locker

__all__ = ["Election", "Leadership", "Observer", "Leads", "Nobody", "HandingOver", "Leader"]

log = logging.getLogger("dlock")

FOREIGN = (
    "the leadership belongs to the parent process (won before a fork): only the parent resigns it"
)


def note_resign_failure(exc: Optional[BaseException], error: BaseException) -> None:
    """Leaving a leadership's block on an exception whose resign failed
    (the server gone): the block's exception is what the caller sees; the
    failure is logged and noted on it, and the leadership ends with its
    ttl."""
    text = f"dlock: resigning failed while leaving on an exception: {error}"
    log.warning(text)
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(text)


def _election_spec(name: Key, id: Optional[str], ttl: Duration) -> Spec:
    """The election's lock, checked before anything is sent: the name and
    ttl as a lock's, the id by the election's rule."""
    problem = id_problem(id)
    if problem is not None:
        raise InvalidRequest(problem)
    if not isinstance(name, (str, bytes)):
        raise InvalidRequest(f"an election's name is a str or bytes, not {name!r}")
    if isinstance(name, str):
        try:
            name.encode()
        except UnicodeEncodeError:
            raise InvalidRequest(f"an election's name must be encodable as UTF-8: {name!r}") from None
    return Spec([name], ttl)


class Election:
    """One election: the resource every candidate campaigns for. Made by
    :meth:`dlock.Locker.election`; cheap, thread-safe, reusable.

    >>> election = locker.election("leader:billing", id="worker-7", ttl=15)
    >>> with election.campaign() as lead:        # waits until it leads
    ...     while not lead.lost:
    ...         storage.write_as_leader(row, term=lead.term)
    >>> for state in election.observe():         # now, then each change
    ...     print(state)
    """

    def __init__(
        self,
        locker: "Locker",
        name: Key,
        *,
        id: Optional[str] = None,
        ttl: Duration = 15.0,
        retry_for: Optional[Duration] = None,
        prefer: Optional[str] = None,
    ) -> None:
        self._spec = _election_spec(name, id, ttl)
        self._prefer = None if prefer is None else check_id(prefer)
        self._locker = locker
        self._name = name
        self._id = id
        self._ttl = self._spec.ttl_ms / 1000
        self._retry_for = locker.settings.retry_for if retry_for is None else seconds(retry_for)

    @property
    def name(self) -> Key:
        """The resource the election is held on."""
        return self._name

    @property
    def id(self) -> Optional[str]:
        """What observers see of this candidate (None: its random token)."""
        return self._id

    @property
    def ttl(self) -> float:
        """The leadership's lease, in seconds: a leader that stops renewing
        (crashed, cut off) is replaced within this long."""
        return self._ttl

    @overload
    def campaign(self, wait: None = None) -> "Leadership": ...

    @overload
    def campaign(self, wait: Duration) -> Optional["Leadership"]: ...

    def campaign(self, wait: Optional[Duration] = None) -> Optional["Leadership"]:
        """Waits up to ``wait`` seconds to lead (None: until it does; 0: one
        try), in the server's FIFO queue of candidates. The Leadership, or
        None when another candidate still leads as the wait ends. Connection
        errors are retried with the same token for ``retry_for``, as a
        lock's acquire does."""
        token = candidate_token(self._id, new_token())
        lock = self._locker.lock(
            self._name, ttl=self._ttl, wait=wait, watchdog=True, token=token, retry_for=self._retry_for
        )
        lease = lock.acquire()
        if lease is None:
            if wait is None:
                raise NotAcquired(f"{self._name!r}: still not leading after the longest wait the server allows")
            return None
        lead = Leadership(lease, self._locker, self._name)
        if self._prefer is not None and self._prefer != self._id:
            prefer(self._locker, self._name, lease, self._prefer, self._ttl / 3)
        return lead

    def leader(self) -> Leader:
        """Who leads now (one look)."""
        return Observer(self).next_leader()

    def observe(self) -> "Observer":
        """Who leads now, then each change: an iterator of
        :class:`~dlock.Leads`, :class:`~dlock.Nobody` and
        :class:`~dlock.HandingOver` (see :class:`Observer`)."""
        return Observer(self)

    def _observe_once(self, cmd: Tuple[Any, ...], waits: float) -> Any:
        cmds: List[Tuple[Any, ...]] = [cmd]

        def op(conn: Any, asking: bool) -> Any:
            return check(run_pipeline(conn, [("ASKING",), *cmds] if asking else cmds))[-1]

        return self._locker.topology.run(self._spec.route_key(), self._locker.settings.io_timeout, waits, op)

    def __repr__(self) -> str:
        return f"<Election {self._name!r} id={self._id!r} ttl={self._ttl}>"


class Leadership:
    """The leadership this candidate holds: the election's lock, renewed by
    a watchdog at a third of the ttl. ``with`` resigns on leaving the block
    (a loss is told by :attr:`lost`, :attr:`lost_event` and
    :meth:`wait_lost`, not by an exception on leaving)."""

    def __init__(self, lease: Lease, locker: "Locker", name: Key) -> None:
        self._lease = lease
        self._locker = locker
        self._name = name
        # A forked child must never resign what its parent leads.
        self._pid = os.getpid()

    @property
    def term(self) -> int:
        """This leadership's term: its lock's fence, above every term
        granted before it on this resource. Pass it to the storage you
        write to, which refuses lower terms."""
        return self._lease.fence

    @property
    def token(self) -> str:
        """The lease's token: ``id/`` and a random part, or random without
        an id."""
        return self._lease.token

    @property
    def lost(self) -> bool:
        """Whether the leadership is lost (or may be: its renewals did not
        get through before the lease could have ended). A lost leader must
        stop acting as one."""
        return self._lease.lost

    @property
    def lost_event(self) -> "threading.Event":
        """A :class:`threading.Event` set when the leadership is lost."""
        return self._lease.lost_event

    def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Blocks until the leadership is lost or ``timeout`` seconds pass;
        True if lost."""
        return self._lease.wait_lost(timeout)

    @property
    def deadline(self) -> float:
        """Until when (``time.monotonic()``) the leadership surely lasts."""
        return self._lease.deadline

    @property
    def resigned(self) -> bool:
        """Whether :meth:`resign` was called (or the block left)."""
        return self._lease.released

    @property
    def lease(self) -> Lease:
        """The lock behind the leadership."""
        return self._lease

    def resign(self) -> bool:
        """Steps down: the next candidate in the queue leads at once.
        Whether this candidate still led (False also for a second call)."""
        if os.getpid() != self._pid:
            raise InvalidRequest(FOREIGN)
        return self._lease.release()

    def hand_over(self, id: str) -> bool:
        """Hands the lead to candidate ``id`` (its election ``id``) if it
        waits in the queue, however deep (``DLOCK.RELEASE ... TO`` its
        token, found with ``DLOCK.WAITERS``). True: ``id`` leads now with
        the next term and this leadership ended as by :meth:`resign`
        (:attr:`lost` is True, its loss told; ``lease.loss_reason`` says it
        was handed over). False: nobody by that id waits (or it no longer
        fits), and this candidate still leads, or had lost its lead."""
        if os.getpid() != self._pid:
            raise InvalidRequest(FOREIGN)
        return hand_over(self._locker, self._name, self._lease, id)

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._lease.released or os.getpid() != self._pid:
            return
        try:
            self.resign()
        except DlockError as e:
            if et is None:
                raise
            note_resign_failure(ev, e)

    def __repr__(self) -> str:
        state = "resigned" if self.resigned else ("lost" if self.lost else "leading")
        return f"<Leadership {self._lease.resource!r} term={self.term} {state}>"


class Observer:
    """Who leads an election, as it changes (:meth:`Election.observe`):
    iterating gives who leads now, then one state per change, each when the
    server tells of it (``DLOCK.OBSERVE``; nothing is polled). States, not
    steps: a leadership that came and went between two items may not be
    shown, the latest always is.

    A server that cannot be reached is retried for the election's
    ``retry_for``, then :class:`~dlock.Unavailable` is raised; the next
    call resumes from the last state seen and reports at once what changed
    meanwhile. A resource several hold (a shared lock's readers, a
    semaphore's holders) has no leader: :class:`~dlock.ServerError`, and
    the next call waits for its holders to change. One thread at a time."""

    def __init__(self, election: Election) -> None:
        self._election = election
        self._obs = Observation(election.name, election._retry_for)

    def __iter__(self) -> "Observer":
        return self

    def __next__(self) -> Leader:
        return self.next_leader()

    @overload
    def next_leader(self, timeout: None = None) -> Leader: ...

    @overload
    def next_leader(self, timeout: Duration) -> Optional[Leader]: ...

    def next_leader(self, timeout: Optional[Duration] = None) -> Optional[Leader]:
        """The next state: at once the first time (and when it changed
        since the last), else when it changes; None when ``timeout``
        seconds pass first (None: no limit)."""
        obs = self._obs
        deadline = None if timeout is None else now() + seconds(timeout)
        while True:
            cmd, waits = obs.request(now(), deadline)
            try:
                reply = self._election._observe_once(cmd, waits)
            except Failure as f:
                pause = obs.failed(f.kind == RETRY, now(), deadline, random.random())
                if pause is None:
                    raise f.into_error() from None
                time.sleep(pause)
                continue
            try:
                done, state = obs.answer(reply, now(), deadline)
            except NoLeader as e:
                raise ServerError(str(e)) from None
            if done:
                return state
