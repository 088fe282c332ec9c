"""Who owns each slot in use of a blocking pool's :class:`~dlock._pool.Slots`,
so that a caller unwound at any instant by an exception from a signal
handler (``KeyboardInterrupt``, a timeout alarm) never leaves a slot taken
for good (redis-py 8.1 caps a pool at 100 connections by default: leaked
slots would stop every later command).

A slot in use is owned by a :class:`Ticket`: a connection carries its own
for its whole life; a caller holds one while it opens a connection or
stands in line for one. Only owners keep tickets alive, so a caller's
ticket dies with its frame, a dropped connection's with the connection.
When the cap leaves no slot, the pool counts again from the live owners
(taking back what the dead held, and mending counts an exception cut short
inside the bookkeeping) and serves the line before it refuses.

No I/O; everything runs under the pool's lock. Without a cap nothing is
tracked: no caller ever waits for a slot."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Optional, Tuple

from ._pool import Grant, Slots

Conn = Any


class Ticket:
    """The owner of a slot (see the module's doc)."""

    __slots__ = ("__weakref__", "ref")

    def __init__(self) -> None:
        #: Made once: a slot's owner is recorded by it on every take.
        self.ref = weakref.ref(self)


class Owners:
    """The live owners of a :class:`Slots`' slots in use."""

    __slots__ = ("slots", "out")

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        #: ``id(ticket) -> (weak reference, counts as a waiting command's)``.
        self.out: Dict[int, Tuple["weakref.ref[Ticket]", bool]] = {}

    def own(self, ticket: Ticket, waits: bool) -> None:
        """A slot in use becomes ``ticket``'s."""
        if self.slots.cap is not None:
            self.out[id(ticket)] = (ticket.ref, waits)

    def drop(self, ticket: Optional[Ticket]) -> None:
        """``ticket`` no longer owns a slot in use (given back, or closed)."""
        if ticket is not None:
            self.out.pop(id(ticket), None)

    def forget(self, ticket: Optional[Ticket], waits: bool) -> None:
        """The slot ``ticket`` owns is closed (or was never opened)."""
        self.drop(ticket)
        self.slots.forget(waits)

    def take(self, waits: bool) -> Tuple[bool, Optional[Conn], Optional[Ticket]]:
        """:meth:`Slots.try_take`, the slot owned at once: by the idle
        connection's ticket, or by a new one for the caller to open a
        connection with. Refused with a cap: the slots whose owners died
        are taken back and the line is served first, then one more try."""
        slots = self.slots
        ok, conn = slots.try_take(waits)
        if not ok and slots.cap is not None:
            self.reclaim()
            slots.dispatch()
            ok, conn = slots.try_take(waits)
        if not ok:
            return False, None, None
        ticket = conn._dlock_ticket if conn is not None else Ticket()
        self.own(ticket, waits)
        return True, conn, ticket

    def reclaim(self) -> None:
        """Counts the slots again: in use are the live owners' (the dead
        ones are dropped), open are those and the idle. O(connections),
        run only when the cap leaves no slot."""
        out = self.out
        for k in [k for k, (ref, _) in out.items() if ref() is None]:
            del out[k]
        slots = self.slots
        slots.open = len(slots.idle) + len(out)
        slots.waiting = sum(1 for _, waits in out.values() if waits)

    def waker(self, ticket: Ticket, waits: bool, ready: Any) -> Callable[[], bool]:
        """What a grant in line does when :meth:`Slots.dispatch` gives it a
        slot: nothing if its caller is gone (its ticket died), else the
        slot becomes the ticket's and the caller is woken. ``ready`` is a
        lock the caller holds and waits to acquire again: releasing it takes
        no lock that the caller's thread could have been left holding, as
        an Event's would."""
        ref = ticket.ref

        def wake() -> bool:
            t = ref()
            if t is None:
                return False
            self.own(t, waits)
            ready.release()
            return True

        return wake

    def claim(self, grant: Grant, ticket: Ticket, waits: bool) -> Tuple[Optional[Conn], Ticket]:
        """A granted caller's connection (None: a slot to open one in) and
        the slot's owner: an idle connection handed over is owned by its
        own ticket, a slot to open one in by the caller's."""
        conn = grant.conn
        if conn is None:
            return None, ticket
        self.drop(ticket)
        self.own(conn._dlock_ticket, waits)
        return conn, conn._dlock_ticket

    def give_up(self, grant: Grant, ticket: Ticket, waits: bool) -> Optional[Conn]:
        """A caller leaves the line (its time ran out, or an exception
        unwinds it), handing back what it was granted meanwhile; an
        idle connection to close may come back (see :meth:`Slots.put_back`).
        An unwound caller's frame lives on while the exception is handled
        (its ticket with it), so it lets go here rather than wait for its
        ticket to die."""
        slots = self.slots
        slots.leave(grant)
        self.drop(ticket)
        if not grant.granted:
            return None
        grant.granted = False
        conn, grant.conn = grant.conn, None
        if conn is None:
            slots.forget(waits)
            return None
        return slots.put_back(conn, waits)
