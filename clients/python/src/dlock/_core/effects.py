"""The protocol between the rules and the shells that run them.

A rule is a generator function. It *yields effects* and is *sent outcomes*:

- :class:`Call` ``(route_key, cmds, io_timeout, extra_wait, probe, undo)``:
  run ``cmds`` as one pipeline on one connection to the server that owns
  ``route_key`` (redirects and ``ASKING`` are the shell's: its topology
  follows them). The shell sends back an :class:`Outcome`: the replies, or
  the :class:`~dlock.errors.Failure` the call ended with, and whether the
  commands may have run.
- :class:`Sleep` ``(seconds)``: pause; the shell sends back ``None``.

A rule's ``return`` value is the operation's result; a ``DlockError`` it
raises is the operation's error. Failures never arrive as exceptions:
the rule reads ``outcome.failure`` and decides (retry with the same token,
give up, undo).

An exception that is not a failed call (``KeyboardInterrupt``, a task's
``CancelledError``) is thrown into the rule at the ``yield`` it hit, so
that the rule can clean up (an acquire releases with its token what it may
have been granted) and re-raise. The shell keeps running the effects the
rule yields while it cleans up: the blocking shell at once, the asyncio
shell in a background task (the cancelled task is going away).

Time and randomness are the shell's too: a rule reads the clock through
the ``clock`` callable it was given (``time.monotonic`` in the shells) and
draws jitter through ``rand(n)`` (an integer in ``[0, n)``).

The drivers are ``_single.drive`` (blocking) and ``_abackend.drive``
(asyncio); any rule written this way (a session's, an election's) runs on
both.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, List, Optional, Tuple, TypeVar, Union

from ..errors import Failure

#: The clock a rule reads (seconds, monotonic).
Clock = Callable[[], float]
#: ``rand(n)``: a random integer in ``[0, n)``.
Rand = Callable[[int], int]
#: One command: its name and arguments.
Cmd = Tuple[Any, ...]


class Call:
    """Run ``cmds`` as one pipeline on the server of ``route_key``, each
    reply awaited for ``io_timeout + extra_wait`` (``extra_wait``: the time
    the server itself may hold the reply, as a ``WAIT``).

    - ``probe``: on a pooled connection, send ``PING`` first (in the same
      write) and tell (:attr:`Outcome.dead_pooled`) whether the connection
      was found closed before anything after the ``PING`` ran.
    - ``undo``: a command the asyncio shell writes behind ``cmds`` on the
      same connection when the task is cancelled while the call is out (the
      server runs it after them), before closing that connection.
    - ``waits``: how long the commands wait on the server (a ``WAIT`` of
      the request): the shell's pool keeps a connection free for calls that
      do not wait (``max_connections``). Default: ``extra_wait``.
    - ``cmds_at``: the commands as they go out at a given clock reading
      (a waiting request may first wait in line for a connection: its
      ``WAIT`` is what is left of its wait when it is sent)."""

    __slots__ = ("route_key", "cmds", "io_timeout", "extra_wait", "probe", "undo", "waits", "cmds_at")

    def __init__(
        self,
        route_key: bytes,
        cmds: Tuple[Cmd, ...],
        io_timeout: float,
        extra_wait: float = 0.0,
        probe: bool = False,
        undo: Optional[Cmd] = None,
        waits: Optional[float] = None,
        cmds_at: Optional[Callable[[float], Tuple[Cmd, ...]]] = None,
    ) -> None:
        self.route_key = route_key
        self.cmds = cmds
        self.io_timeout = io_timeout
        self.extra_wait = extra_wait
        self.probe = probe
        self.undo = undo
        self.waits = waits
        self.cmds_at = cmds_at

    def commands(self, t: float) -> Tuple[Cmd, ...]:
        """The commands to send at clock reading ``t``."""
        return self.cmds if self.cmds_at is None else self.cmds_at(t)

    def __repr__(self) -> str:
        names = ",".join(str(c[0]) for c in self.cmds)
        return f"Call({names} io={self.io_timeout:.3f} extra={self.extra_wait:.3f})"


class Sleep:
    """Pause for ``seconds``."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __repr__(self) -> str:
        return f"Sleep({self.seconds:.3f})"


class Outcome:
    """What a :class:`Call` came back with.

    - ``replies``: one per command of the call (``ASKING`` left out), when
      the call succeeded; a later command's error reply is in place (as the
      exception the client library made of it). The first command's error
      reply is a failure instead (the server did not run it).
    - ``failure``: the call failed (after the shell followed redirects).
    - ``reached``: the commands may have run (they were written to a
      connection that then broke or timed out, or were answered).
    - ``sent_at``: the clock when the commands were written on a live
      connection (a new one, or a pooled one that answered the ``PING`` of a
      probe); None when they surely did not run.
    - ``dead_pooled``: a probe found a pooled connection closed (nothing
      after the ``PING`` ran): try the next one at once."""

    __slots__ = ("replies", "failure", "reached", "sent_at", "dead_pooled")

    def __init__(
        self,
        replies: Optional[List[Any]] = None,
        failure: Optional[Failure] = None,
        reached: bool = False,
        sent_at: Optional[float] = None,
        dead_pooled: bool = False,
    ) -> None:
        self.replies = replies
        self.failure = failure
        self.reached = reached
        self.sent_at = sent_at
        self.dead_pooled = dead_pooled

    def __repr__(self) -> str:
        if self.failure is not None:
            return f"Outcome(failure={self.failure.kind}:{self.failure.error!r} reached={self.reached})"
        return f"Outcome(replies={self.replies!r})"


Effect = Union[Call, Sleep]
T = TypeVar("T")
#: A rule: yields effects, is sent outcomes (None after a Sleep), returns T.
Rule = Generator[Effect, Optional[Outcome], T]
