"""Leader election for asyncio (:meth:`dlock.asyncio.Locker.election`): the
blocking API's :class:`dlock.Election` with ``await``, on the rules of
:mod:`dlock._core.election`."""

from __future__ import annotations

import asyncio
import os
import random
from typing import TYPE_CHECKING, Any, Generator, Generic, List, Optional, Tuple, TypeVar, cast, overload

from ._ahandover import hand_over, prefer
from ._alease import Lease
from ._handover import check_id
from ._anode import Conn, _pipeline
from ._core.election import Leader, NoLeader, Observation, candidate_token
from ._spec import Duration, Key, new_token, now, seconds
from .election import FOREIGN, _election_spec, note_resign_failure
from .errors import RETRY, DlockError, Failure, InvalidRequest, NotAcquired, ServerError

if TYPE_CHECKING:
    from ._alocker import Locker

__all__ = ["Election", "Leadership", "Observer", "Campaign"]

T = TypeVar("T", "Leadership", Optional["Leadership"])


class Election:
    """One election for asyncio code (see :class:`dlock.Election`)."""

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
        return self._name

    @property
    def id(self) -> Optional[str]:
        return self._id

    @property
    def ttl(self) -> float:
        return self._ttl

    @overload
    def campaign(self, wait: None = None) -> "Campaign[Leadership]": ...

    @overload
    def campaign(self, wait: Duration) -> "Campaign[Optional[Leadership]]": ...

    def campaign(self, wait: Optional[Duration] = None) -> "Campaign[Any]":
        """Waits up to ``wait`` seconds to lead (None: until it does; 0: one
        try): ``lead = await election.campaign()`` (None when another still
        leads as the wait ends), or ``async with election.campaign() as
        lead:`` (raises :class:`~dlock.NotAcquired` then; resigns on
        leaving). Cancelled, it leaves no hold and no waiter behind."""
        return Campaign(self, wait)

    async def _campaign(self, wait: Optional[Duration]) -> Optional["Leadership"]:
        token = candidate_token(self._id, new_token())
        lock = self._locker.lock(
            self._name, ttl=self._ttl, wait=wait, watchdog=True, token=token, retry_for=self._retry_for
        )
        lease = await lock.acquire()
        if lease is None:
            if wait is None:
                raise NotAcquired(f"{self._name!r}: still not leading after the longest wait the server allows")
            return None
        lead = Leadership(lease, self._locker, self._name)
        if self._prefer is not None and self._prefer != self._id:
            lead._prefer = prefer(self._locker, self._name, lease, self._prefer, self._ttl / 3)
        return lead

    async def leader(self) -> Leader:
        """Who leads now (one look)."""
        return await Observer(self).next_leader()

    def observe(self) -> "Observer":
        """Who leads now, then each change: an async iterator (``async for
        state in election.observe():``)."""
        return Observer(self)

    async def _observe_once(self, cmd: Tuple[Any, ...], waits: float) -> Any:
        cmds: List[Tuple[Any, ...]] = [cmd]

        async def op(conn: Conn, asking: bool) -> Any:
            r = (await _pipeline(conn, [("ASKING",), *cmds] if asking else cmds))[-1]
            if isinstance(r, Exception):
                raise r
            return r

        return await self._locker.topology.run(self._spec.route_key(), self._locker.settings.io_timeout, waits, op)

    def __repr__(self) -> str:
        return f"<async Election {self._name!r} id={self._id!r} ttl={self._ttl}>"


class Campaign(Generic[T]):
    """A campaign not yet run: ``await`` it for the Leadership (or None),
    or enter it with ``async with`` (resigning on leaving)."""

    def __init__(self, election: Election, wait: Optional[Duration]) -> None:
        self._election = election
        self._wait = wait
        self._lead: Optional[Leadership] = None

    def __await__(self) -> Generator[Any, None, T]:
        return cast("Generator[Any, None, T]", self._election._campaign(self._wait).__await__())

    async def __aenter__(self) -> "Leadership":
        lead = await self._election._campaign(self._wait)
        if lead is None:
            raise NotAcquired(f"{self._election.name!r}: another candidate still leads")
        self._lead = lead
        return lead

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lead, self._lead = self._lead, None
        if lead is not None:
            await lead.__aexit__(et, ev, tb)


class Leadership:
    """The leadership this candidate holds (see :class:`dlock.Leadership`);
    its watchdog is a task of the event loop it was won on."""

    def __init__(self, lease: Lease, locker: "Locker", name: Key) -> None:
        self._lease = lease
        self._locker = locker
        self._name = name
        self._prefer: Optional["asyncio.Task[None]"] = None
        # A forked child must never resign what its parent leads.
        self._pid = os.getpid()

    @property
    def term(self) -> int:
        return self._lease.fence

    @property
    def token(self) -> str:
        return self._lease.token

    @property
    def lost(self) -> bool:
        return self._lease.lost

    @property
    def lost_event(self) -> asyncio.Event:
        """An :class:`asyncio.Event` set when the leadership is lost."""
        return self._lease.lost_event

    async def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Waits until the leadership is lost or ``timeout`` seconds pass;
        True if lost."""
        return await self._lease.wait_lost(timeout)

    @property
    def deadline(self) -> float:
        return self._lease.deadline

    @property
    def resigned(self) -> bool:
        return self._lease.released

    @property
    def lease(self) -> Lease:
        return self._lease

    async def resign(self) -> bool:
        """Steps down: the next candidate leads at once. Whether this
        candidate still led."""
        if os.getpid() != self._pid:
            raise InvalidRequest(FOREIGN)
        return await self._lease.release()

    async def hand_over(self, id: str) -> bool:
        """Hands the lead to candidate ``id`` if it waits (see
        :meth:`dlock.Leadership.hand_over`): True, ``id`` leads and this
        leadership ended; False, this candidate still leads (or had lost
        its lead)."""
        if os.getpid() != self._pid:
            raise InvalidRequest(FOREIGN)
        return await hand_over(self._locker, self._name, self._lease, id)

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._lease.released or os.getpid() != self._pid:
            return
        try:
            await self.resign()
        except DlockError as e:
            if et is None:
                raise
            note_resign_failure(ev, e)

    def __repr__(self) -> str:
        state = "resigned" if self.resigned else ("lost" if self.lost else "leading")
        return f"<async Leadership {self._lease.resource!r} term={self.term} {state}>"


class Observer:
    """Who leads, as it changes (see :class:`dlock.Observer`): ``async for
    state in election.observe():``, or ``await observer.next_leader(t)``.
    Cancelled while waiting, it leaves nothing on the server (its
    connection is closed). One task at a time."""

    def __init__(self, election: Election) -> None:
        self._election = election
        self._obs = Observation(election.name, election._retry_for)

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Leader:
        return await self.next_leader()

    @overload
    async def next_leader(self, timeout: None = None) -> Leader: ...

    @overload
    async def next_leader(self, timeout: Duration) -> Optional[Leader]: ...

    async def next_leader(self, timeout: Optional[Duration] = None) -> Optional[Leader]:
        """The next state: at once the first time (and when it changed
        since the last), else when it changes; None when ``timeout``
        seconds pass first (None: no limit)."""
        obs = self._obs
        deadline = None if timeout is None else now() + seconds(timeout)
        while True:
            cmd, waits = obs.request(now(), deadline)
            try:
                reply = await self._election._observe_once(cmd, waits)
            except Failure as f:
                pause = obs.failed(f.kind == RETRY, now(), deadline, random.random())
                if pause is None:
                    raise f.into_error() from None
                await asyncio.sleep(pause)
                continue
            try:
                done, state = obs.answer(reply, now(), deadline)
            except NoLeader as e:
                raise ServerError(str(e)) from None
            if done:
                return state
