"""A lease on one server (or one cluster slot's master): the acquire with
same-token retries and the lease budget, ``min_replicas``, and the renewal
and release behind a :class:`~dlock.Lease` from a :class:`~dlock.Locker`."""

from __future__ import annotations

import socket
import time
from typing import Any, Callable, List, Optional, Tuple, Union

import redis

from ._lease import EXTENDED, FAILED, LOST, Renewal
from ._node import Conn, Topology, read_all, run_pipeline, send
from ._spec import REPLY_MARGIN, Outage, Spec, call_deadline, now
from .errors import (
    RETRY,
    DlockError,
    Failure,
    LockLost,
    TooFewReplicas,
    is_io_error,
    unexpected,
)

LONGEST = float(1 << 47) / 1000

#: Called before each same-token retry of an acquire, with what failed.
OnRetry = Callable[[DlockError], Any]


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


def commands(asking: bool, cmd: Tuple, wait: Optional[Tuple[int, float]]) -> List[Tuple]:
    """``ASKING`` (when redirected) + the command + ``WAIT n timeout`` (when
    durability is asked for), as one pipeline on one connection."""
    cmds: List[Tuple] = []
    if asking:
        cmds.append(("ASKING",))
    cmds.append(cmd)
    if wait is not None:
        n, t = wait
        # `WAIT n 0` blocks forever: a timeout under 1 ms waits 1 ms.
        cmds.append(("WAIT", n, max(int(t * 1000), 1)))
    return cmds


def split_replies(
    replies: List[Any], asking: bool, durable: bool
) -> Tuple[Any, Optional[int]]:
    """The command's reply (an error reply raised) and the replicas'
    acknowledgements (``WAIT``'s reply; 0 when it failed)."""
    i = 1 if asking else 0
    reply = replies[i]
    acked: Optional[int] = None
    if durable:
        w = replies[i + 1]
        acked = w if isinstance(w, int) else 0
    if isinstance(reply, Exception):
        raise reply
    return reply, acked


class SingleBackend:
    """A lease on one server: what a Lease from a Locker renews and
    releases."""

    def __init__(self, topology: Topology, spec: Spec, token: str, settings: Settings) -> None:
        self.topology = topology
        self.spec = spec
        self.token = token
        self.settings = settings

    def io_until(self, deadline: float, waiting: float) -> float:
        """The io timeout, beyond the server-side ``waiting``, of a command
        sent now for a call that ends at ``deadline``: its reply is due by
        then, plus a reply's margin."""
        left = deadline - now() + REPLY_MARGIN
        return max(min(self.settings.io_timeout, left - waiting), 0.001)

    def call(
        self,
        cmd: Union[Tuple, Callable[[], Tuple]],
        durable: bool,
        io: float,
        extra: float,
        connected: Optional[List[bool]] = None,
    ) -> Tuple[Any, Optional[int]]:
        """Runs ``cmd`` (+ ``WAIT n`` when ``durable`` and asked for) on the
        resource's server; returns its reply and the replicas' acks."""
        durability = self.settings.min_replicas if durable else None
        waits = extra
        if durability is not None:
            extra += durability[1]

        def op(conn: Conn, asking: bool) -> Tuple[Any, Optional[int]]:
            try:
                c = cmd() if callable(cmd) else cmd
                cmds = commands(asking, c, durability) if asking or durability else [c]
                replies = run_pipeline(conn, cmds)
            except BaseException as e:
                # Its connection broke or timed out after it was sent: it
                # reached a working server (one that died while we waited in
                # its queue).
                if connected is not None and is_io_error(e):
                    connected[0] = True
                raise
            r = split_replies(replies, asking, durability is not None)
            if connected is not None:
                connected[0] = True
            return r

        return self.topology.run(self.spec.route_key(), io, extra, op, waits=waits)

    def check_replicas(self, acked: Optional[int]) -> None:
        mr = self.settings.min_replicas
        if mr is not None and acked is not None and acked < mr[0]:
            raise TooFewReplicas(acked, mr[0])

    def acquire(
        self, wait_ms: Optional[int], on_retry: Optional[OnRetry] = None
    ) -> Optional[Tuple[int, float]]:
        """Acquire with same-token retries: ``(fence, valid_until)`` or None
        (busy). The whole call, retries and the undo of a possibly granted
        attempt included, ends by its deadline plus a reply's margin."""
        start = now()
        wait_deadline = None if wait_ms is None else start + wait_ms / 1000
        deadline = call_deadline(start, wait_ms, self.settings.retry_for)
        # Once an attempt may have been granted without our hearing, a
        # failure must release with the token before giving up.
        maybe_granted = False
        outage: Optional[Outage] = None  # made at the first failure
        while True:
            sent = now()
            # A wait used up (or under 1 ms) is a plain try: WAIT 0 would
            # wait forever.
            w: Optional[int] = None
            if wait_deadline is not None:
                w = int((wait_deadline - sent) * 1000)
                if w <= 0:
                    w = None

            def cmd(w: Optional[int] = w) -> Tuple:
                # The wait left when the command goes out: its connection
                # may have come after a wait in line (max_connections).
                if w is not None and wait_deadline is not None:
                    w = int((wait_deadline - now()) * 1000)
                return self.spec.acquire_cmd(self.token, w if w is not None and w > 0 else None)

            waiting = (w or 0) / 1000
            # The reply of a waiting attempt is due when its wait ends.
            io = self.io_until(deadline, waiting)
            connected = [False]
            # A waiting grant's durability is confirmed by the refresh below.
            durable = w is None
            try:
                reply, acked = self.call(cmd, durable, io, waiting, connected)
            except Failure as f:
                if f.kind == RETRY:
                    maybe_granted = True
                    if connected[0] or outage is None:
                        outage = Outage()
                    pause = outage.next_pause(self.settings.retry_for, deadline)
                    if pause is None:
                        self.abandon(deadline)
                        raise f.error from None
                    if on_retry is not None:
                        on_retry(f.error)
                    time.sleep(pause)
                    continue
                if maybe_granted:
                    self.abandon(deadline)
                raise f.into_error() from None
            except BaseException:
                # Interrupted (KeyboardInterrupt, ...): the attempt may have
                # been granted; leave nothing behind.
                self.abandon(now() + REPLY_MARGIN)
                raise
            if reply is None:
                return None
            if not isinstance(reply, int):
                raise unexpected(reply)
            try:
                self.check_replicas(acked)
            except TooFewReplicas:
                self.abandon(deadline)
                raise
            fence = reply
            break
        ttl = self.spec.ttl_ms / 1000
        if w is None:
            return fence, sent + ttl
        # A grant handed over while waiting started its lease at the
        # handoff, after this attempt was sent: counted from the send, the
        # budget ends no later than the server's deadline. A quick handoff
        # keeps that budget (most of the ttl is left); after a longer wait
        # (past a third of the ttl, when a watchdog would renew at once) or
        # when replicas must confirm the grant, refresh with the same token
        # and count from the refresh's send.
        if now() - sent <= ttl / 3 and self.settings.min_replicas is None:
            return fence, sent + ttl
        # The refresh gets what is left of the call, and at least a
        # reply's margin.
        refresh_by = max(deadline, now() + REPLY_MARGIN)
        r = self.extend_by(self.spec.ttl_ms, refresh_by)
        if r.kind == EXTENDED:
            return fence, r.until
        if r.kind == LOST:
            raise LockLost("the lease handed over while waiting ended before its refresh")
        self.abandon(deadline)
        assert r.error is not None
        raise r.error

    def abandon(self, deadline: float) -> None:
        """Best-effort release of a grant the caller will not get (too few
        replicas, or given up after a possibly granted attempt), within the
        call's deadline and a reply's margin from now: a grant left behind
        ends with its ttl."""
        deadline = min(deadline, now() + REPLY_MARGIN)
        cmd = self.spec.release_cmd(self.token)
        outage = Outage()
        while True:
            try:
                self.call(cmd, False, self.io_until(deadline, 0.0), 0.0)
                return
            except Failure as f:
                if f.kind != RETRY:
                    return
                pause = outage.next_pause(LONGEST, deadline)
                if pause is None:
                    return
                time.sleep(pause)

    def extend_by(self, ttl_ms: int, deadline: float) -> Renewal:
        """``EXTEND``, retried through connection errors until ``deadline``,
        each reply due by then plus a reply's margin."""
        cmd = self.spec.extend_cmd(self.token, ttl_ms)
        outage = Outage()
        while True:
            sent = now()
            try:
                reply, acked = self.call(cmd, True, self.io_until(deadline, 0.0), 0.0)
            except Failure as f:
                if f.kind == RETRY:
                    pause = outage.next_pause(LONGEST, deadline)
                    if pause is not None:
                        time.sleep(pause)
                        continue
                return Renewal(FAILED, error=f.into_error())
            if reply == 1:
                try:
                    self.check_replicas(acked)
                except TooFewReplicas as e:
                    return Renewal(FAILED, error=e)
                return Renewal(EXTENDED, until=sent + ttl_ms / 1000)
            if reply == 0:
                return Renewal(LOST)
            return Renewal(FAILED, error=unexpected(reply))

    def extend(self, ttl_ms: int) -> Renewal:
        return self.extend_by(ttl_ms, now() + self.settings.retry_for)

    def release(self, valid_until: float) -> bool:
        """``RELEASE``, retried through connection errors for ``retry_for``:
        True if an attempt released the lease. A retry answered "not held"
        means an earlier attempt released it only if that attempt may have
        been run by the server and was sent while the lease surely lasted
        (``valid_until``). "May have been run": sent on a live connection
        (a new one, or a pooled one that answered the ``PING`` pipelined
        before it: a server that closed an idle connection, or restarted,
        leaves dead ones in the pool) and not answered with an error reply
        such as a redirect."""
        cmd = self.spec.release_cmd(self.token)
        deadline = now() + self.settings.retry_for
        first_run: Optional[float] = None
        outage: Optional[Outage] = None  # made at the first failure
        dead_pooled = 0
        while True:
            sent: List[Optional[float]] = [None]
            dead: List[bool] = [False]

            def op(conn: Conn, asking: bool) -> Any:
                probe = getattr(conn, "_dlock_pooled", False)
                cmds = [("ASKING",), cmd] if asking else [cmd]
                t = now()
                if probe:
                    try:
                        send(conn, [("PING",)] + cmds)
                        read_all(conn, 1)  # an error reply (-LOADING, ...): alive
                    except BaseException as e:
                        # Closed while idle: nothing after the PING ran.
                        dead[0] = is_io_error(e) and not isinstance(
                            e, (redis.exceptions.TimeoutError, socket.timeout)
                        )
                        raise
                else:
                    send(conn, cmds)
                sent[0] = t
                r = read_all(conn, len(cmds))[-1]
                if isinstance(r, Exception):
                    # The server answered with an error (MOVED, ASK,
                    # READONLY, LOADING, ...): it did not run the command.
                    sent[0] = None
                    raise r
                return r

            try:
                reply = self.topology.run(self.spec.route_key(), self.settings.io_timeout, 0.0, op)
            except Failure as f:
                if first_run is None:
                    first_run = sent[0]
                if f.kind != RETRY:
                    raise f.into_error() from None
                if dead[0] and dead_pooled < 10:
                    dead_pooled += 1  # the next connection, at once
                    continue
                if outage is None:
                    outage = Outage()
                pause = outage.next_pause(LONGEST, deadline)
                if pause is None:
                    raise f.error from None
                time.sleep(pause)
                continue
            done = self.spec.released(reply)
            if done is None:
                raise unexpected(reply)
            if done:
                return True
            return first_run is not None and first_run < valid_until
