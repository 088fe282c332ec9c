"""Sessions (``DLOCK.SESSION``) for the blocking API: one liveness lease
for many locks. :meth:`Locker.session` makes a :class:`Session`; it opens
on first use, keeps itself alive (one ``KEEPALIVE`` per third of its ttl,
however many locks it holds), and its locks (``session.lock(...)``, taken
with ``SESSION id``) live as long as it does: when it ends (closed,
killed, its ttl passed on the server or its budget here), every one of
them is lost at once."""

from __future__ import annotations

import os
import random
import threading
import uuid
import weakref
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple, Union

from ._core import session as core
from ._lease import EXTENDED, FAILED, LOST, Lease, OnLost, Renewal
from ._conn import Conn, run_pipeline, set_timeout
from ._single import OnRetry, SingleBackend
from ._session_parts import NOT_ON_A_CLUSTER, Own, SessionSpec, inherited, resources_of, settings_of, sorted_reply, within
from ._spec import MAX_MS, Duration, Key, check_token, new_token, now, to_ms
from .errors import (
    FATAL,
    Failure,
    InvalidRequest,
    LockLost,
    NotAcquired,
    ServerError,
    Unavailable,
    classify,
    is_io_error,
    unexpected,
)

if TYPE_CHECKING:
    from .locker import Locker

__all__ = ["Session", "SessionLock"]


class SessionBackend(SingleBackend):
    """A lock bound to a session: acquired with ``SESSION id``, released
    with ``RELEASE`` (the rules: ``_core.session.BoundRules``); its renewal
    is the session's keep-alive (the server refuses an ``EXTEND`` of a
    bound hold)."""

    def __init__(self, session: "Session", spec: SessionSpec, token: str) -> None:
        super().__init__(session._topology, spec, token, session._settings)
        self.rules = core.BoundRules(spec, token, session._settings, now, random.randrange, session._budget)
        self.session = session
        #: The budget last handed to the lock (see ``SessionCore.covers``).
        self.until = 0.0

    def extend(self, ttl_ms: int) -> Renewal:
        r = self.session._renew(self.until)
        if r.kind == EXTENDED:
            self.until = r.until
        return r


class Session:
    """A session on one server: see :meth:`dlock.Locker.session`. Use it as
    ``with locker.session(ttl=30) as s:`` (closed on leaving), or call
    :meth:`close`. Thread-safe."""

    def __init__(self, locker: "Locker", ttl: Duration = 30.0, bind: bool = False, lock_delay: Optional[Duration] = None) -> None:
        if locker.topology.single is None:
            raise InvalidRequest(NOT_ON_A_CLUSTER)
        self._ttl_ms, self._lock_delay = settings_of(ttl, lock_delay)
        self._bind = bool(bind)
        self._locker = locker
        self._topology = locker.topology
        self._node = locker.topology.single
        self._settings = locker.settings
        #: The session's id: a UUID, so that a retried ``OPEN`` is the same session.
        self.id = str(uuid.uuid4())
        self._core = core.SessionCore(self._ttl_ms)
        self._state = threading.Condition(threading.Lock())
        # One session command at a time (the BIND connection carries one):
        # a lock asking for a keep-alive while one is on its way gets its
        # outcome instead of sending another. Reentrant: the end of the
        # session tells its locks with it held, and their on_lost callbacks
        # may use the session.
        self._renewing = threading.RLock()
        self._leases: List["weakref.ref[Lease]"] = []
        self._conn: Optional[Conn] = None  # BIND: the connection that opened it
        self._keeper: Optional[threading.Thread] = None
        #: The process the session belongs to: a forked child never sends
        #: its commands (closing or keeping alive what its parent holds).
        self._pid = os.getpid()

    # --- what it is ------------------------------------------------------------

    @property
    def ttl(self) -> float:
        return self._ttl_ms / 1000

    @property
    def alive(self) -> bool:
        """Open, not ended, and its budget not passed."""
        with self._state:
            return self._core.bindable(now()) is not None

    @property
    def ended(self) -> bool:
        """Closed, killed, expired, or its budget passed."""
        with self._state:
            return self._core.phase == core.ENDED or (self._core.phase == core.LIVE and now() >= self._core.valid_until)

    @property
    def deadline(self) -> float:
        """Until when (``time.monotonic()``) the session surely lasts."""
        with self._state:
            return self._core.valid_until

    def __repr__(self) -> str:
        with self._state:
            phase = self._core.phase
        return f"<Session {self.id} ttl={self.ttl}s {phase}>"

    # --- server calls ------------------------------------------------------------

    def _inherited(self) -> Optional[InvalidRequest]:
        return inherited(self.id, self._pid, os.getpid())

    def _call(self, cmd: Tuple[Any, ...], io: Optional[float] = None) -> Any:
        """One session command, its reply awaited for ``io`` (default: the
        io timeout): on the ``BIND`` connection, or a pooled one. Raises
        Failure."""
        if io is None:
            io = self._settings.io_timeout
        if not self._bind:
            return self._node.with_conn(io, lambda c: sorted_reply(run_pipeline(c, [cmd])[0]))
        conn = self._conn
        if conn is None:
            raise Failure(FATAL, Unavailable("the session's connection was closed"))
        try:
            set_timeout(conn, io)
            return sorted_reply(run_pipeline(conn, [cmd])[0])
        except Exception as e:
            if is_io_error(e):
                # The connection BIND ties the session to: the server ends
                # the session when it sees the close. (An OPEN that failed
                # so leaves the session new: the next one tries again.)
                self._conn = None
                try:
                    conn.disconnect()
                except Exception:
                    pass
                with self._state:
                    live = self._core.phase == core.LIVE
                if live:
                    self._end("its BIND connection broke")
            raise self._node.failure(e) from None

    def open(self) -> None:
        """Opens the session on the server now (the first lock does it
        otherwise). Raises :class:`~dlock.ServerError` on a server without
        sessions, :class:`~dlock.LockLost` once the session ended."""
        refused = self._inherited()
        if refused is not None:
            raise refused
        with self._renewing:
            with self._state:
                phase = self._core.phase
            if phase == core.LIVE:
                return
            if phase == core.ENDED:
                raise self._ended_error()
            cmd = core.open_cmd(self.id, self._ttl_ms, self._bind, self._lock_delay)
            sent = now()
            try:
                if self._bind and self._conn is None:
                    self._conn = self._node.connect(self._settings.io_timeout)
                reply = self._call(cmd)
            except Failure as f:
                raise f.into_error() from None
            except Exception as e:
                if is_io_error(e):
                    raise classify(e).at(self._node.addr).into_error() from None
                raise
            if isinstance(reply, Own):
                if core.lacks_sessions(reply.text):
                    raise ServerError(core.LACKS_SESSIONS)
                raise ServerError(reply.text)
            if reply not in (0, 1):
                raise unexpected(reply)
            with self._state:
                self._core.opened(sent)
        t = threading.Thread(target=_keep, args=(weakref.ref(self),), name="dlock-session", daemon=True)
        self._keeper = t
        t.start()

    def _budget(self, t: float) -> Optional[float]:
        """The budget a lock bound at ``t`` gets (None: none)."""
        with self._state:
            return self._core.bindable(t)

    def _ended_error(self) -> LockLost:
        return LockLost(f"the session {self.id} ended ({self._core.ended_how}): its locks were released; open a new session")

    def _renew(self, under: float) -> Renewal:
        """A lock whose budget is ``under`` asks for a renewal: the
        session's budget if a keep-alive landed since, else one now."""
        refused = self._inherited()
        if refused is not None:
            return Renewal(FAILED, error=refused)
        with self._renewing:
            with self._state:
                c = self._core
                if c.phase != core.LIVE or now() >= c.valid_until:
                    lost = True
                else:
                    lost = False
                    until = c.covers(under)
                    if until is not None:
                        return Renewal(EXTENDED, until=until)
            if lost:
                self._end("its budget passed")
                return Renewal(LOST)
            r = self._keep_alive_once()
        if r.kind == LOST:
            self._tell_lost()
        return r

    def _keep_alive_once(self) -> Renewal:
        """One ``KEEPALIVE`` (with ``_renewing`` held)."""
        sent = now()
        with self._state:
            if self._core.phase != core.LIVE:
                return Renewal(LOST)
            left = self._core.valid_until - sent
        try:
            # Its answer is no use after the budget passed (the session is
            # over then): waiting longer would only hold the loss back.
            reply = self._call(core.keepalive_cmd(self.id), within(self._settings.io_timeout, left))
        except Failure as f:
            with self._state:
                self._core.failed(now())
                ended = self._core.phase == core.ENDED
            return Renewal(LOST) if ended else Renewal(FAILED, error=f.into_error())
        if isinstance(reply, Own):
            self._end("the server ended it" if core.is_no_session(reply.text) else reply.text)
            return Renewal(LOST)
        if isinstance(reply, int) and not isinstance(reply, bool) and reply > 0:
            with self._state:
                until = self._core.kept_alive(sent, reply, now())
                self._state.notify_all()
            if until is None:
                return Renewal(LOST)
            return Renewal(EXTENDED, until=until)
        with self._state:
            self._core.failed(now())
        return Renewal(FAILED, error=unexpected(reply))

    def keep_alive(self) -> bool:
        """Sends a ``KEEPALIVE`` now: True kept alive, False the session has
        ended (its locks are lost). Raises :class:`~dlock.Unavailable` when
        it got no answer."""
        refused = self._inherited()
        if refused is not None:
            raise refused
        with self._renewing:
            with self._state:
                phase = self._core.phase
            if phase == core.NEW:
                self.open()
            r = self._keep_alive_once()
        if r.kind == FAILED:
            assert r.error is not None
            raise r.error
        if r.kind == LOST:
            self._tell_lost()
        return r.kind == EXTENDED

    def _end(self, how: str) -> Optional[str]:
        with self._state:
            was = self._core.end(how)
            self._state.notify_all()
        if was is not None:
            self._tell_lost()
        return was

    def _tell_lost(self) -> None:
        """Marks every lock of the session lost (the released ones aside)."""
        from . import _guard

        with self._state:
            refs, self._leases = self._leases, []
        for ref in refs:
            lease = ref()
            if lease is not None:
                h = _guard.held(lease)
                if h.ended != "released":
                    h.mark_lost()

    def close(self) -> bool:
        """Ends the session (``DLOCK.SESSION CLOSE``): the server releases
        its holds (no lock-delay), and its locks are marked lost here. True
        if the session was open on the server. Later locks raise
        :class:`~dlock.LockLost`. In a forked child it does nothing and
        answers False: the session is its parent's."""
        if self._inherited() is not None:
            return False
        was = self._end("closed")
        closed = False
        if was == core.LIVE:
            try:
                with self._renewing:
                    reply = self._call(core.close_cmd(self.id))
                closed = reply == 1
            except Failure as f:
                raise f.into_error() from None
            finally:
                conn, self._conn = self._conn, None
                if conn is not None:
                    try:
                        conn.disconnect()
                    except Exception:
                        pass
        return closed

    def __enter__(self) -> "Session":
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

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
        """A lock bound to this session (``ACQUIRE ... SESSION id``), as
        :meth:`dlock.Locker.lock` takes it (``shared=True``: a read lock;
        ``limit=n``: a semaphore's permit; a list of resources: a set, all
        or nothing), without a ttl: its lease lasts as long as the session
        (its budget is the session's), and is lost when the session ends."""
        spec = SessionSpec(self.id, resources_of(resource), self._ttl_ms / 1000, shared, limit, owner)
        check_token(token)
        if wait is not None:
            to_ms(wait, "wait")
        return SessionLock(self, spec, wait, blocking, on_lost, token, on_retry)

    def _bind_lease(self, backend: SessionBackend, fence: int, on_lost: Optional[OnLost]) -> Lease:
        """The lease of a grant bound to the session: listed first, then
        given the session's budget (an end in between is not missed)."""
        with self._state:
            until = self._core.bindable(now())
        spec = backend.spec
        lease = Lease(backend, spec.resources, backend.token, [fence], spec.ttl_ms, until or now(), True, on_lost)
        with self._state:
            self._leases = [r for r in self._leases if r() is not None]
            self._leases.append(weakref.ref(lease))
            ended = self._core.phase == core.ENDED
        backend.until = lease.deadline
        if ended:
            from . import _guard

            _guard.held(lease).mark_lost()
        return lease


class SessionLock:
    """A lock request bound to a session: ``with lock as lease:`` or
    ``lock.acquire()``, as :class:`dlock.Lock`."""

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
        self._local = threading.local()

    @property
    def resource(self) -> Key:
        return self.spec.resources[0]

    def acquire(self, blocking: Optional[bool] = None, wait: Optional[Duration] = None, *, token: Optional[str] = None) -> Optional[Lease]:
        """The lease when granted, None when busy (or the wait ran out).
        Raises :class:`~dlock.LockLost` when the session has ended."""
        check_token(token)
        s = self.session
        s.open()
        b = self.blocking if blocking is None else blocking
        w = self.wait if wait is None else wait
        wait_ms = None if not b else (MAX_MS if w is None else to_ms(w, "wait"))
        backend = SessionBackend(s, self.spec, token or self.token or new_token())
        try:
            got = backend.acquire(wait_ms, self.on_retry)
        except ServerError as e:
            if core.is_no_session(str(e)):
                s._end("the server ended it")
                raise s._ended_error() from None
            raise
        if got is None:
            return None
        return s._bind_lease(backend, got[0], self.on_lost)

    def __enter__(self) -> Lease:
        lease = self.acquire()
        if lease is None:
            raise NotAcquired(f"{self.resource!r} is busy")
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(lease)
        return lease

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease: Lease = self._local.stack.pop()
        if not lease.release() and et is None:
            raise LockLost(f"the lease on {self.resource!r} was lost before the block ended")

    def __repr__(self) -> str:
        return f"<SessionLock {self.spec.resources!r} session={self.session.id}>"


def _keep(ref: "weakref.ref[Session]") -> None:
    """The keeper thread: a ``KEEPALIVE`` a third of the ttl after the last
    one was sent, and the end of the session when its budget passes. Holds
    the session only while it looks at it (a sleep is at most a second):
    a session dropped without a close ends with its ttl on the server."""
    while True:
        s = ref()
        if s is None:
            return
        what = _keep_once(s)
        del s
        if what in (core.STOP, core.EXPIRED):
            return


def _keep_once(s: Session) -> str:
    with s._state:
        what, until = s._core.next(now())
        if what == core.SLEEP:
            s._state.wait(max(min(until - now(), 1.0), 0.0005))
            return what
    if what == core.EXPIRED:
        s._end("its budget passed")
    elif what == core.KEEP_ALIVE:
        with s._renewing:
            with s._state:
                due = s._core.next(now())[0] == core.KEEP_ALIVE
            r = s._keep_alive_once() if due else None
        if r is not None and r.kind == LOST:
            s._tell_lost()
    return what
