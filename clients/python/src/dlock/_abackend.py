"""A lease on one server (or one Redis Cluster slot's master) for the
asyncio API: the acquire with same-token retries, its undo when cancelled,
the renewal and the release."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, List, Optional, Tuple, Union

import redis
import redis.asyncio
import redis.asyncio.cluster

from ._anode import Conn, _abort, _pack, _pipeline, _read_all, _send, _Topology
from ._lease import EXTENDED, FAILED, LOST, Renewal
from ._single import OnRetry, Settings, commands, split_replies
from ._spec import (
    MAX_MS,
    REPLY_MARGIN,
    Outage,
    Spec,
    call_deadline,
    now,
)
from .errors import (
    RETRY,
    Failure,
    LockLost,
    TooFewReplicas,
    is_io_error,
    unexpected,
)

LONGEST = float(MAX_MS) / 1000

# Background cleanups (a cancelled acquire's RELEASE): kept referenced
# until done.
_background: "set[asyncio.Task]" = set()


class _Backend:
    """A lease on one server (or one slot's master), for the asyncio API."""

    def __init__(self, topology: _Topology, spec: Spec, token: str, settings: Settings) -> None:
        self.topology = topology
        self.spec = spec
        self.token = token
        self.settings = settings

    def io_until(self, deadline: float, waiting: float) -> float:
        left = deadline - now() + REPLY_MARGIN
        return max(min(self.settings.io_timeout, left - waiting), 0.001)

    async def call(
        self,
        cmd: Union[Tuple, Callable[[], Tuple]],
        durable: bool,
        io: float,
        extra: float,
        connected: Optional[List[bool]] = None,
        on_cancel: Optional[Callable[[Conn], None]] = None,
    ) -> Tuple[Any, Optional[int]]:
        durability = self.settings.min_replicas if durable else None
        waits = extra
        if durability is not None:
            extra += durability[1]

        async def op(conn: Conn, asking: bool) -> Tuple[Any, Optional[int]]:
            try:
                c = cmd() if callable(cmd) else cmd
                replies = await _pipeline(conn, commands(asking, c, durability))
            except Exception as e:
                if connected is not None and is_io_error(e):
                    connected[0] = True
                raise
            r = split_replies(replies, asking, durability is not None)
            if connected is not None:
                connected[0] = True
            return r

        try:
            return await self.topology.run(self.spec.route_key(), io, extra, op, on_cancel, waits)
        except Failure as f:
            if f.kind == RETRY and "no answer within" in str(f.error) and connected is not None:
                connected[0] = True  # sent, then timed out: it reached a server
            raise

    def check_replicas(self, acked: Optional[int]) -> None:
        mr = self.settings.min_replicas
        if mr is not None and acked is not None and acked < mr[0]:
            raise TooFewReplicas(acked, mr[0])

    async def acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry]) -> Optional[Tuple[int, float]]:
        try:
            return await self._acquire(wait_ms, on_retry)
        except asyncio.CancelledError:
            # Anything sent may have been granted: release with the token
            # in the background (this task is going away), then go.
            t = asyncio.ensure_future(self.abandon(now() + self.settings.io_timeout))
            _background.add(t)
            t.add_done_callback(_background.discard)
            raise

    async def _acquire(self, wait_ms: Optional[int], on_retry: Optional[OnRetry]) -> Optional[Tuple[int, float]]:
        start = now()
        wait_deadline = None if wait_ms is None else start + wait_ms / 1000
        deadline = call_deadline(start, wait_ms, self.settings.retry_for)
        maybe_granted = False
        outage = Outage()
        release_packed: List[Optional[bytes]] = [None]

        def on_cancel(conn: Conn) -> None:
            # Cancelled while the ACQUIRE may be queued or granted: RELEASE
            # behind it on the same connection, then close (the server drops
            # a queued waiter; a grant made before it reads the close is
            # released by the RELEASE, which it runs after the ACQUIRE).
            try:
                release_packed[0] = _pack(conn, [self.spec.release_cmd(self.token)])
            except Exception:
                release_packed[0] = None
            _abort(conn, release_packed[0])

        while True:
            sent = now()
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
            io = self.io_until(deadline, waiting)
            connected = [False]
            try:
                reply, acked = await self.call(cmd, w is None, io, waiting, connected, on_cancel)
            except Failure as f:
                if f.kind == RETRY:
                    maybe_granted = True
                    if connected[0]:
                        outage = Outage()
                    pause = outage.next_pause(self.settings.retry_for, deadline)
                    if pause is None:
                        await self.abandon(deadline)
                        raise f.error from None
                    if on_retry is not None:
                        on_retry(f.error)
                    await asyncio.sleep(pause)
                    continue
                if maybe_granted:
                    await self.abandon(deadline)
                raise f.into_error() from None
            if reply is None:
                return None
            if not isinstance(reply, int):
                raise unexpected(reply)
            try:
                self.check_replicas(acked)
            except TooFewReplicas:
                await self.abandon(deadline)
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
        refresh_by = max(deadline, now() + REPLY_MARGIN)
        r = await self.extend_by(self.spec.ttl_ms, refresh_by)
        if r.kind == EXTENDED:
            return fence, r.until
        if r.kind == LOST:
            raise LockLost("the lease handed over while waiting ended before its refresh")
        await self.abandon(deadline)
        assert r.error is not None
        raise r.error

    async def abandon(self, deadline: float) -> None:
        deadline = min(deadline, now() + REPLY_MARGIN)
        cmd = self.spec.release_cmd(self.token)
        outage = Outage()
        while True:
            try:
                await self.call(cmd, False, self.io_until(deadline, 0.0), 0.0)
                return
            except Failure as f:
                if f.kind != RETRY:
                    return
                pause = outage.next_pause(LONGEST, deadline)
                if pause is None:
                    return
                await asyncio.sleep(pause)

    async def extend_by(self, ttl_ms: int, deadline: float) -> Renewal:
        cmd = self.spec.extend_cmd(self.token, ttl_ms)
        outage = Outage()
        while True:
            sent = now()
            try:
                reply, acked = await self.call(cmd, True, self.io_until(deadline, 0.0), 0.0)
            except Failure as f:
                if f.kind == RETRY:
                    pause = outage.next_pause(LONGEST, deadline)
                    if pause is not None:
                        await asyncio.sleep(pause)
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

    async def extend(self, ttl_ms: int) -> Renewal:
        return await self.extend_by(ttl_ms, now() + self.settings.retry_for)

    async def release(self, valid_until: float) -> bool:
        """As the blocking API judges it: a retry answered "not held" means
        an earlier attempt released the lease only if that attempt may have
        run (sent on a live connection, not answered with an error reply)
        and was sent within the budget."""
        cmd = self.spec.release_cmd(self.token)
        deadline = now() + self.settings.retry_for
        first_run: Optional[float] = None
        outage = Outage()
        dead_pooled = 0
        while True:
            sent: List[Optional[float]] = [None]
            dead = [False]

            async def op(conn: Conn, asking: bool) -> Any:
                probe = getattr(conn, "_dlock_pooled", False)
                cmds = commands(asking, cmd, None)
                t = now()
                if probe:
                    try:
                        await _send(conn, [("PING",)] + cmds)
                        await conn.read_response(disconnect_on_error=False)
                    except redis.exceptions.ResponseError:
                        pass
                    except Exception as e:
                        dead[0] = is_io_error(e) and not isinstance(e, redis.exceptions.TimeoutError)
                        raise
                else:
                    await _send(conn, cmds)
                sent[0] = t
                r = (await _read_all(conn, len(cmds)))[-1]
                if isinstance(r, Exception):
                    sent[0] = None
                    raise r
                return r

            try:
                reply = await self.topology.run(self.spec.route_key(), self.settings.io_timeout, 0.0, op)
            except Failure as f:
                if first_run is None:
                    first_run = sent[0]
                if f.kind != RETRY:
                    raise f.into_error() from None
                if dead[0] and dead_pooled < 10:
                    dead_pooled += 1
                    continue
                pause = outage.next_pause(LONGEST, deadline)
                if pause is None:
                    raise f.error from None
                await asyncio.sleep(pause)
                continue
            done = self.spec.released(reply)
            if done is None:
                raise unexpected(reply)
            if done:
                return True
            return first_run is not None and first_run < valid_until


