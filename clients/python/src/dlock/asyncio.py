"""The asyncio API, on ``redis.asyncio``: :class:`Locker`, :class:`Lock`
and :class:`Lease` with the same rules as the blocking API (same-token
retries, a lease budget counted from send times, a refresh after a ``WAIT``
grant, ``min_replicas``, a watchdog, a loss signal), on one server or a
Redis Cluster.

>>> import redis.asyncio, dlock.asyncio
>>> locker = dlock.asyncio.Locker(redis.asyncio.Redis(port=6379))
>>> async with locker.lock("orders:42", ttl=30, wait=5) as lease:
...     await storage.write(row, fence=lease.fence)

A :class:`Lock` has the blocking Lock's calls, awaited (``await
lock.acquire()``, ``release()``, ``extend(ttl)``, ``locked()``, ``run(fn,
*args)``; ``lock.owned()`` is a plain call), and decorates coroutine
functions. ``acquire()``, ``release()``, ``extend()`` and ``run()`` read the
calling task when called, so ``await asyncio.wait_for(lock.acquire(), 3)``
acquires for the caller (a reentrant lock nests) on every Python.

The watchdog is a task of the event loop the lease was acquired on; leave
the ``async with`` block (or ``await lease.release()``) on that loop.
**Cancellation**: a cancelled acquire leaves no hold and no waiter behind:
the waiting connection gets a ``RELEASE`` written behind its ``ACQUIRE`` and
is closed (the server drops the waiter, or frees a grant it handed over
meanwhile), and a ``RELEASE`` with the token is sent on another connection
in the background.
"""

from __future__ import annotations

from ._alease import Lease
from ._aelection import Election, Leadership, Observer
from ._core.election import HandingOver, Leads, Nobody
from ._alocker import Lock, Locker, task_owner
from ._aredlock import Redlock
from ._asession import Session

__all__ = [
    "Locker",
    "Lock",
    "Lease",
    "task_owner",
    "Redlock",
    "Session",
    "Election",
    "Leadership",
    "Observer",
    "Leads",
    "Nobody",
    "HandingOver",
]
