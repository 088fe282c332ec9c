"""Sessions (``DLOCK.SESSION``) for the asyncio API: the same rules as
:mod:`dlock.session` (read it first), with a keeper task on the loop the
session was opened on instead of a thread."""

from __future__ import annotations

import asyncio
import os
import random
import uuid
import weakref
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Set, Tuple, Union

from ._abackend import _Backend
from ._alease import Lease, OnLost
from ._aconn import Conn, _abort, _pipeline
from ._core import session as core
from ._lease import EXTENDED, FAILED, LOST, Renewal
from ._single import OnRetry
from ._spec import MAX_MS, Duration, Key, check_token, new_token, now, to_ms
from .errors import (
    FATAL,
    RETRY,
    Failure,
    InvalidRequest,
    LockLost,
    NotAcquired,
    ServerError,
    Unavailable,
    is_io_error,
    unexpected,
)
from ._session_parts import NOT_ON_A_CLUSTER, Own, SessionSpec, inherited, resources_of, settings_of, sorted_reply, within

if TYPE_CHECKING:
    from ._alocker import Locker

__all__ = ["Session", "SessionLock"]

# Keeper tasks, referenced until done.
_keepers: "Set[asyncio.Task[None]]" = set()


class SessionBackend(_Backend):
    """A lock bound to a session (see :class:`dlock.session.SessionBackend`)."""

    def __init__(self, session: "Session", spec: SessionSpec, token: str) -> None:
        super().__init__(session._topology, spec, token, session._settings)
        self.rules = core.BoundRules(spec, token, session._settings, now, random.randrange, session._core.bindable)
        self.session = session
        self.until = 0.0

    async def extend(self, ttl_ms: int) -> Renewal:
        r = await self.session._renew(self.until)
        if r.kind == EXTENDED:
            self.until = r.until
        return r


class Session:
    """A session on one server, for asyncio: see
    :meth:`dlock.asyncio.Locker.session`. ``async with locker.session(ttl=30)
    as s:`` (closed on leaving), or ``await s.close()``."""

    def __init__(self, locker: "Locker", ttl: Duration = 30.0, bind: bool = False, lock_delay: Optional[Duration] = None) -> None:
        if locker.topology.single is None:
            raise InvalidRequest(NOT_ON_A_CLUSTER)
        self._ttl_ms, self._lock_delay = settings_of(ttl, lock_delay)
        self._bind = bool(bind)
        self._topology = locker.topology
        self._node = locker.topology.single
        self._settings = locker.settings
        #: The session's id: a UUID, so that a retried ``OPEN`` is the same session.
        self.id = str(uuid.uuid4())
        self._core = core.SessionCore(self._ttl_ms)
        self._changed = asyncio.Event()
        self._renewing = asyncio.Lock()
        self._leases: List["weakref.ref[Lease]"] = []
        self._conn: Optional[Conn] = None
        self._pid = os.getpid()  # see dlock.session.Session

    @property
    def ttl(self) -> float:
        return self._ttl_ms / 1000

    @property
    def alive(self) -> bool:
        return self._core.bindable(now()) is not None

    @property
    def ended(self) -> bool:
        c = self._core
        return c.phase == core.ENDED or (c.phase == core.LIVE and now() >= c.valid_until)

    @property
    def deadline(self) -> float:
        return self._core.valid_until

    def __repr__(self) -> str:
        return f"<async Session {self.id} ttl={self.ttl}s {self._core.phase}>"

    # --- server calls ------------------------------------------------------------

    def _inherited(self) -> Optional[InvalidRequest]:
        return inherited(self.id, self._pid, os.getpid())

    async def _call(self, cmd: Tuple[Any, ...], io: Optional[float] = None) -> Any:
        if io is None:
            io = self._settings.io_timeout

        async def op(conn: Conn) -> Any:
            return sorted_reply((await _pipeline(conn, [cmd]))[0])

        if not self._bind:
            return await self._node.with_conn(io, op)
        conn = self._conn
        if conn is None:
            raise Failure(FATAL, Unavailable("the session's connection was closed"))
        try:
            return await asyncio.wait_for(op(conn), io)
        except asyncio.TimeoutError:
            self._lose_conn()
            raise Failure(RETRY, Unavailable(f"{self._node.addr}: no answer within {io:.3f} s")) from None
        except asyncio.CancelledError:
            # Cut off mid-reply: the connection is in no known state.
            self._lose_conn()
            raise
        except Exception as e:
            if is_io_error(e):
                self._lose_conn()
            raise self._node.failure(e) from None

    def _lose_conn(self) -> None:
        """The connection BIND ties the session to is gone: the server ends
        the session when it sees the close."""
        conn, self._conn = self._conn, None
        if conn is not None:
            _abort(conn)
        if self._core.phase == core.LIVE:  # a failed OPEN leaves it new
            self._end("its BIND connection broke")

    async def open(self) -> None:
        """Opens the session now (the first lock does it otherwise)."""
        refused = self._inherited()
        if refused is not None:
            raise refused
        async with self._renewing:
            if self._core.phase == core.LIVE:
                return
            if self._core.phase == core.ENDED:
                raise self._ended_error()
            cmd = core.open_cmd(self.id, self._ttl_ms, self._bind, self._lock_delay)
            sent = now()
            try:
                if self._bind and self._conn is None:
                    self._conn = await self._node.get(self._settings.io_timeout)
                reply = await self._call(cmd)
            except Failure as f:
                raise f.into_error() from None
            if isinstance(reply, Own):
                if core.lacks_sessions(reply.text):
                    raise ServerError(core.LACKS_SESSIONS)
                raise ServerError(reply.text)
            if reply not in (0, 1):
                raise unexpected(reply)
            self._core.opened(sent)
        t = asyncio.ensure_future(_keep(weakref.ref(self), self._changed))
        _keepers.add(t)
        t.add_done_callback(_keepers.discard)

    def _ended_error(self) -> LockLost:
        return LockLost(f"the session {self.id} ended ({self._core.ended_how}): its locks were released; open a new session")

    async def _renew(self, under: float) -> Renewal:
        refused = self._inherited()
        if refused is not None:
            return Renewal(FAILED, error=refused)
        async with self._renewing:
            c = self._core
            if c.phase != core.LIVE or now() >= c.valid_until:
                self._end("its budget passed")
                return Renewal(LOST)
            until = c.covers(under)
            if until is not None:
                return Renewal(EXTENDED, until=until)
            r = await self._keep_alive_once()
        if r.kind == LOST:
            self._tell_lost()
        return r

    async def _keep_alive_once(self) -> Renewal:
        if self._core.phase != core.LIVE:
            return Renewal(LOST)
        sent = now()
        try:
            # No use after the budget passed: see dlock.session.
            reply = await self._call(core.keepalive_cmd(self.id), within(self._settings.io_timeout, self._core.valid_until - sent))
        except Failure as f:
            self._core.failed(now())
            if self._core.phase == core.ENDED:
                return Renewal(LOST)
            return Renewal(FAILED, error=f.into_error())
        if isinstance(reply, Own):
            self._end("the server ended it" if core.is_no_session(reply.text) else reply.text)
            return Renewal(LOST)
        if isinstance(reply, int) and not isinstance(reply, bool) and reply > 0:
            until = self._core.kept_alive(sent, reply, now())
            self._changed.set()
            return Renewal(LOST) if until is None else Renewal(EXTENDED, until=until)
        self._core.failed(now())
        return Renewal(FAILED, error=unexpected(reply))

    async def keep_alive(self) -> bool:
        """As :meth:`dlock.session.Session.keep_alive`."""
        refused = self._inherited()
        if refused is not None:
            raise refused
        if self._core.phase == core.NEW:
            await self.open()
        async with self._renewing:
            r = await self._keep_alive_once()
        if r.kind == FAILED:
            assert r.error is not None
            raise r.error
        if r.kind == LOST:
            self._tell_lost()
        return r.kind == EXTENDED

    def _end(self, how: str) -> Optional[str]:
        was = self._core.end(how)
        self._changed.set()
        if was is not None:
            self._tell_lost()
        return was

    def _tell_lost(self) -> None:
        from . import _guard

        refs, self._leases = self._leases, []
        for ref in refs:
            lease = ref()
            if lease is not None:
                h = _guard.held(lease)
                if h.ended != "released":
                    h.mark_lost()

    async def close(self) -> bool:
        """As :meth:`dlock.session.Session.close`."""
        if self._inherited() is not None:
            return False
        was = self._end("closed")
        if was != core.LIVE:
            return False
        try:
            async with self._renewing:
                return bool(await self._call(core.close_cmd(self.id)) == 1)
        except Failure as f:
            raise f.into_error() from None
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                _abort(conn)

    async def __aenter__(self) -> "Session":
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- locks -------------------------------------------------------------------

    def lock(
        self,
        resource: Union[Key, Sequence[Key]],
        *,
        wait: Optional[Duration] = None,
        blocking: bool = True,
        shared: bool = False,
        limit: Optional[int] = None,
        owner: Optional[Key] = None,
        on_lost: Optional[OnLost] = None,
        token: Optional[str] = None,
        on_retry: Optional[OnRetry] = None,
    ) -> "SessionLock":
        """As :meth:`dlock.session.Session.lock`."""
        spec = SessionSpec(self.id, resources_of(resource), self._ttl_ms / 1000, shared, limit, owner)
        check_token(token)
        if wait is not None:
            to_ms(wait, "wait")
        return SessionLock(self, spec, wait, blocking, on_lost, token, on_retry)

    def _bind_lease(self, backend: SessionBackend, fence: int, on_lost: Optional[OnLost]) -> Lease:
        until = self._core.bindable(now())
        lease = Lease(backend, fence, until or now(), True, on_lost)
        self._leases = [r for r in self._leases if r() is not None]
        self._leases.append(weakref.ref(lease))
        backend.until = lease.deadline
        return lease


class SessionLock:
    """A lock request bound to a session: ``async with lock as lease:`` or
    ``await lock.acquire()``."""

    def __init__(
        self,
        session: Session,
        spec: SessionSpec,
        wait: Optional[Duration],
        blocking: bool,
        on_lost: Optional[OnLost],
        token: Optional[str],
        on_retry: Optional[OnRetry],
    ) -> None:
        self.session = session
        self.spec = spec
        self.wait = wait
        self.blocking = blocking
        self.on_lost = on_lost
        self.token = token
        self.on_retry = on_retry
        self._stacks: "weakref.WeakKeyDictionary[Any, List[Lease]]" = weakref.WeakKeyDictionary()

    @property
    def resource(self) -> Key:
        return self.spec.resources[0]

    async def acquire(self, blocking: Optional[bool] = None, wait: Optional[Duration] = None, *, token: Optional[str] = None) -> Optional[Lease]:
        """As :meth:`dlock.session.SessionLock.acquire`."""
        check_token(token)
        s = self.session
        await s.open()
        b = self.blocking if blocking is None else blocking
        w = self.wait if wait is None else wait
        wait_ms = None if not b else (MAX_MS if w is None else to_ms(w, "wait"))
        backend = SessionBackend(s, self.spec, token or self.token or new_token())
        try:
            got = await backend.acquire(wait_ms, self.on_retry)
        except ServerError as e:
            if core.is_no_session(str(e)):
                s._end("the server ended it")
                raise s._ended_error() from None
            raise
        if got is None:
            return None
        return s._bind_lease(backend, got[0], self.on_lost)

    def _stack(self) -> List[Lease]:
        key = asyncio.current_task()
        st = self._stacks.get(key)
        if st is None:
            st = self._stacks[key] = []
        return st

    async def __aenter__(self) -> Lease:
        lease = await self.acquire()
        if lease is None:
            raise NotAcquired(f"{self.resource!r} is busy")
        self._stack().append(lease)
        return lease

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._stack().pop()
        if not await lease.release() and et is None:
            raise LockLost(f"the lease on {self.resource!r} was lost before the block ended")

    def __repr__(self) -> str:
        return f"<async SessionLock {self.spec.resources!r} session={self.session.id}>"


async def _keep(ref: "weakref.ref[Session]", changed: asyncio.Event) -> None:
    """The keeper task (see :func:`dlock.session._keep`)."""
    while True:
        s = ref()
        if s is None:
            return
        what, until = s._core.next(now())
        if what == core.STOP:
            return
        if what == core.EXPIRED:
            s._end("its budget passed")
            return
        if what == core.SLEEP:
            del s
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), max(min(until - now(), 1.0), 0.0005))
            except asyncio.TimeoutError:
                pass
            continue
        async with s._renewing:
            r = await s._keep_alive_once() if s._core.next(now())[0] == core.KEEP_ALIVE else None
        if r is not None and r.kind == LOST:
            s._tell_lost()
        del s
