"""The rules of a lease on one server (or one Redis Cluster slot's master),
written once for the blocking and the asyncio shells (see ``effects``):
the acquire with same-token retries, its undo, the refresh after a long
``WAIT``, ``min_replicas``, the renewal and the release's judgement."""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence, Tuple

from ..errors import RETRY, DlockError, LockLost, MaxHoldReached, TooFewReplicas, unexpected
from .effects import Call, Clock, Cmd, Outcome, Rand, Rule, Sleep
from .lease import CAP_REACHED, EXTENDED, FAILED, LOST, Cap, Renewal, capped_ttl_ms, left_to_cap_ms
from .retry import LONGEST, REPLY_MARGIN, Outage, call_deadline, io_until
from .wanted import WantedState, read_reply

#: Called before each same-token retry of an acquire, with what failed.
OnRetry = Callable[[DlockError], Any]


class SpecLike(Protocol):
    """What the rules need of a request (``dlock._spec.Spec``)."""

    @property
    def ttl_ms(self) -> int: ...
    @property
    def max_hold_ms(self) -> Optional[int]: ...
    @property
    def resources(self) -> Sequence[Any]: ...
    def route_key(self) -> bytes: ...
    def acquire_cmd(self, token: str, wait_ms: Optional[int], ttl_ms: Optional[int] = None) -> Cmd: ...
    def extend_cmd(self, token: str, ttl_ms: int) -> Cmd: ...
    def release_cmd(self, token: str) -> Cmd: ...
    def released(self, reply: object) -> Optional[bool]: ...


class Settings:
    """Settings shared by every request of a Locker (each can be changed
    per lock)."""

    __slots__ = ("io_timeout", "retry_for", "min_replicas")

    def __init__(
        self,
        io_timeout: float = 2.0,
        retry_for: float = 2.0,
        min_replicas: Optional[Tuple[int, float]] = None,
    ) -> None:
        self.io_timeout = io_timeout
        self.retry_for = retry_for
        self.min_replicas = min_replicas

    def copy(self, **kw: Any) -> "Settings":
        s = Settings(self.io_timeout, self.retry_for, self.min_replicas)
        for k, v in kw.items():
            setattr(s, k, v)
        return s


class Single:
    """One lease's requests on one server: ``spec`` with ``token`` under
    ``settings``, reading ``clock`` and drawing jitter from ``rand``."""

    __slots__ = ("spec", "token", "settings", "clock", "rand", "granted", "wanted", "cap")

    def __init__(self, spec: SpecLike, token: str, settings: Settings, clock: Clock, rand: Rand) -> None:
        self.spec = spec
        self.token = token
        self.settings = settings
        self.clock = clock
        self.rand = rand
        #: The acquire returned a grant: from then on, the shell releases it
        #: if anything (an interrupt) keeps the lease from its caller.
        self.granted = False
        #: ``on_wanted``: renewals ask who waits (set by the shell once the
        #: lease exists).
        self.wanted: Optional[WantedState] = None
        #: A capped hold's floor (``max_hold``), from the acquire's first
        #: send: the lease's renewals stay short of it.
        self.cap: Optional[Cap] = None

    # --- calls -----------------------------------------------------------------

    def _call(self, cmd: Cmd, durable: bool, io: float, extra: float, undo: Optional[Cmd] = None) -> Call:
        """``cmd`` (+ ``WAIT n t`` when ``durable`` and replicas are asked
        for) as one call."""
        mr = self.settings.min_replicas if durable else None
        if mr is None:
            return Call(self.spec.route_key(), (cmd,), io, extra, undo=undo)
        n, t = mr
        # `WAIT n 0` blocks forever: a timeout under 1 ms waits 1 ms.
        wait = ("WAIT", n, max(int(t * 1000), 1))
        return Call(self.spec.route_key(), (cmd, wait), io, extra + t, undo=undo)

    def _too_few(self, o: Outcome) -> Optional[TooFewReplicas]:
        """The replicas' shortfall of a durable call (a failed ``WAIT``
        counts as none acknowledged)."""
        mr = self.settings.min_replicas
        replies = o.replies or []
        if mr is None or len(replies) < 2:
            return None
        acked = replies[1] if isinstance(replies[1], int) and not isinstance(replies[1], bool) else 0
        return TooFewReplicas(acked, mr[0]) if acked < mr[0] else None

    # --- acquire ---------------------------------------------------------------

    def acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry] = None) -> Rule[Optional[Tuple[int, float]]]:
        """Acquire with same-token retries: ``(fence, valid_until)`` or None
        (busy). The whole call, retries and the undo of a possibly granted
        attempt included, ends by its deadline plus a reply's margin.
        Interrupted (an exception thrown in), it releases with its token
        what it may have been granted, then re-raises."""
        try:
            got = yield from self._acquire(wait_ms, on_retry)
            self.granted = got is not None
            return got
        except (GeneratorExit, DlockError):
            raise
        except BaseException:
            yield from self.abandon(self.clock() + REPLY_MARGIN)
            raise

    def _acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry]) -> Rule[Optional[Tuple[int, float]]]:
        clock, settings = self.clock, self.settings
        start = clock()
        max_hold_ms = getattr(self.spec, "max_hold_ms", None)
        cap = self.cap = None if max_hold_ms is None else Cap(start, max_hold_ms)
        ttl_ms = self.spec.ttl_ms
        wait_deadline = None if wait_ms is None else start + wait_ms / 1000
        deadline = call_deadline(start, wait_ms, settings.retry_for)
        # Once an attempt may have been granted without our hearing, a
        # failure must release with the token before giving up.
        maybe_granted = False
        outage: Optional[Outage] = None  # made at the first failure
        undo = self.spec.release_cmd(self.token)
        while True:
            sent = clock()
            # A wait used up (or under 1 ms) is a plain try: WAIT 0 would
            # wait forever.
            w: Optional[int] = None
            if wait_deadline is not None:
                w = int((wait_deadline - sent) * 1000)
                if w <= 0:
                    w = None
            waiting = (w or 0) / 1000
            # The reply of a waiting attempt is due when its wait ends; a
            # waiting grant's durability is confirmed by the refresh below.
            io = io_until(settings.io_timeout, deadline, waiting, sent)
            call = self._call(self.spec.acquire_cmd(self.token, w, ttl_ms), w is None, io, waiting, undo)
            if wait_deadline is not None and w is not None:
                call.waits = waiting
                call.cmds_at = self._acquire_at(wait_deadline, ttl_ms)
            o = yield call
            assert o is not None
            f = o.failure
            if f is not None:
                if f.kind == RETRY:
                    maybe_granted = True
                    # A failure after reaching a server (one that died while
                    # we waited in its queue) starts a new outage.
                    if o.reached or outage is None:
                        outage = Outage(clock, self.rand)
                    pause = outage.next_pause(settings.retry_for, deadline)
                    if pause is None:
                        yield from self.abandon(deadline)
                        raise f.error
                    if on_retry is not None:
                        on_retry(f.error)
                    yield Sleep(pause)
                    # The first attempt may have been granted: a capped
                    # hold's retry stays short of the cap's floor.
                    left = capped_ttl_ms(cap, self.spec.ttl_ms, clock())
                    if left is None:
                        yield from self.abandon(deadline)
                        raise MaxHoldReached(CAP_REACHED, reason=CAP_REACHED)
                    ttl_ms = left
                    continue
                if maybe_granted:
                    yield from self.abandon(deadline)
                raise f.into_error()
            assert o.replies is not None
            reply = o.replies[0]
            if reply is None:
                return None
            if not isinstance(reply, int) or isinstance(reply, bool):
                raise unexpected(reply)
            short = self._too_few(o)
            if short is not None:
                yield from self.abandon(deadline)
                raise short
            fence = reply
            break
        ttl = ttl_ms / 1000
        if w is None:
            return fence, sent + ttl
        # A grant handed over while waiting started its lease at the
        # handoff, after this attempt was sent: counted from the send, the
        # budget ends no later than the server's deadline. A quick handoff
        # keeps that budget (most of the ttl is left); after a longer wait
        # (past a third of the ttl, when a watchdog would renew at once) or
        # when replicas must confirm the grant, refresh with the same token
        # and count from the refresh's send.
        if clock() - sent <= ttl / 3 and settings.min_replicas is None:
            return fence, sent + ttl
        # The refresh gets what is left of the call, and at least a
        # reply's margin.
        refresh_by = max(deadline, clock() + REPLY_MARGIN)
        # A capped hold's refresh stays short of the cap's floor. Granted
        # after a wait past the floor, while the server's cap (counted from
        # the grant) lies ahead, it asks for the whole ttl once, and the
        # answer moves the floor: accepted, the cap is no earlier than that
        # lease's end; refused at the cap, the server says how long the
        # hold may live, and a second refresh asks for what is left.
        probe = None
        refresh_ms = capped_ttl_ms(cap, self.spec.ttl_ms, clock())
        if refresh_ms is None:
            probe, refresh_ms = clock(), self.spec.ttl_ms
        r = yield from self.extend_by(refresh_ms, refresh_by)
        if probe is not None and cap is not None:
            if r.kind == EXTENDED:
                cap.no_earlier_than(probe + refresh_ms / 1000)
            elif r.kind == FAILED and isinstance(r.error, MaxHoldReached):
                left = left_to_cap_ms(r.error.reason or "")
                if left is not None:
                    cap.no_earlier_than(probe + left / 1000)
                    refresh_ms = capped_ttl_ms(cap, self.spec.ttl_ms, clock())
                    if refresh_ms is None:
                        return fence, sent + ttl
                    r = yield from self.extend_by(refresh_ms, refresh_by)
        if r.kind == EXTENDED:
            return fence, r.until
        if r.kind == LOST:
            raise LockLost("the lease handed over while waiting ended before its refresh")
        yield from self.abandon(deadline)
        assert r.error is not None
        raise r.error

    def _acquire_at(self, wait_deadline: float, ttl_ms: int) -> Callable[[float], Tuple[Cmd, ...]]:
        """The waiting ``ACQUIRE`` as sent at a clock reading: its ``WAIT``
        is what is left of the wait then (none left: a plain try)."""
        spec, token = self.spec, self.token

        def at(t: float) -> Tuple[Cmd, ...]:
            w = int((wait_deadline - t) * 1000)
            return (spec.acquire_cmd(token, w if w > 0 else None, ttl_ms),)

        return at

    def abandon(self, deadline: float) -> Rule[None]:
        """Best-effort release of a grant the caller will not get (too few
        replicas, given up or interrupted after a possibly granted attempt),
        within ``deadline`` and a reply's margin from now: a grant left
        behind ends with its ttl."""
        deadline = min(deadline, self.clock() + REPLY_MARGIN)
        cmd = self.spec.release_cmd(self.token)
        outage = Outage(self.clock, self.rand)
        while True:
            io = io_until(self.settings.io_timeout, deadline, 0.0, self.clock())
            o = yield self._call(cmd, False, io, 0.0)
            assert o is not None
            if o.failure is None or o.failure.kind != RETRY:
                return
            pause = outage.next_pause(LONGEST, deadline)
            if pause is None:
                return
            yield Sleep(pause)

    # --- extend ----------------------------------------------------------------

    def extend_by(self, ttl_ms: int, deadline: float) -> Rule[Renewal]:
        """``EXTEND``, retried through connection errors until ``deadline``,
        each reply due by then plus a reply's margin. The budget of a
        renewal counts from its send. With an ``on_wanted`` hook it asks who
        waits (``WANTED``); a server that refuses the option is asked again
        at once without it."""
        wanted = self.wanted if self.wanted is not None and self.wanted.asks() else None
        cmd = self.spec.extend_cmd(self.token, ttl_ms)
        if wanted is not None:
            cmd = (*cmd, "WANTED")
        outage = Outage(self.clock, self.rand)
        while True:
            sent = self.clock()
            o = yield self._call(cmd, True, io_until(self.settings.io_timeout, deadline, 0.0, sent), 0.0)
            assert o is not None
            f = o.failure
            if f is not None:
                if f.kind == RETRY:
                    pause = outage.next_pause(LONGEST, deadline)
                    if pause is not None:
                        yield Sleep(pause)
                        continue
                error = f.into_error()
                if wanted is not None and wanted.refuse(error):
                    return (yield from self.extend_by(ttl_ms, deadline))
                return Renewal(FAILED, error=error)
            assert o.replies is not None
            raw = o.replies[0]
            read = read_reply(raw)
            reply = read[0] if read is not None else raw
            if read is not None and read[1] is not None and wanted is not None:
                wanted.seen(read[1])
            if reply == 1:
                short = self._too_few(o)
                if short is not None:
                    return Renewal(FAILED, error=short)
                return Renewal(EXTENDED, until=sent + ttl_ms / 1000)
            if reply == 0:
                return Renewal(LOST)
            return Renewal(FAILED, error=unexpected(raw))

    def extend(self, ttl_ms: int, budget: Optional[float] = None) -> Rule[Renewal]:
        """A renewal retried for ``retry_for``, and not past ``budget`` (the
        lease's ``valid_until``, when given): an answer after the budget
        passed is a loss anyway, so nobody waits longer for it."""
        deadline = self.clock() + self.settings.retry_for
        if budget is not None:
            deadline = min(deadline, budget)
        return self.extend_by(ttl_ms, deadline)

    # --- release ---------------------------------------------------------------

    def release(self, valid_until: float) -> Rule[bool]:
        """``RELEASE``, retried through connection errors for ``retry_for``:
        True if an attempt released the lease. A retry answered "not held"
        means an earlier attempt released it only if that attempt may have
        been run by the server and was sent while the lease surely lasted
        (``valid_until``). "May have been run": sent on a live connection
        (a new one, or a pooled one that answered the ``PING`` probe: a
        server that closed an idle connection, or restarted, leaves dead
        ones in the pool) and not answered with an error reply such as a
        redirect."""
        cmd = self.spec.release_cmd(self.token)
        deadline = self.clock() + self.settings.retry_for
        first_run: Optional[float] = None
        outage: Optional[Outage] = None  # made at the first failure
        dead_pooled = 0
        while True:
            o = yield Call(self.spec.route_key(), (cmd,), self.settings.io_timeout, 0.0, probe=True)
            assert o is not None
            f = o.failure
            if f is not None:
                if first_run is None:
                    first_run = o.sent_at
                if f.kind != RETRY:
                    raise f.into_error()
                if o.dead_pooled and dead_pooled < 10:
                    dead_pooled += 1  # the next connection, at once
                    continue
                if outage is None:
                    outage = Outage(self.clock, self.rand)
                pause = outage.next_pause(LONGEST, deadline)
                if pause is None:
                    raise f.error
                yield Sleep(pause)
                continue
            assert o.replies is not None
            return released_judgement(self.spec, o.replies[0], first_run, valid_until)


def released_judgement(spec: SpecLike, reply: Any, first_run: Optional[float], valid_until: float) -> bool:
    """A RELEASE's answer: released now (every member), or released by an
    earlier attempt that may have run (``first_run``, its send) while the
    lease surely lasted."""
    done = spec.released(reply)
    if done is None:
        raise unexpected(reply)
    if done:
        return True
    return first_run is not None and first_run < valid_until


