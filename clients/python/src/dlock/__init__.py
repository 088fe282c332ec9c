"""dlock: distributed locks for Python on the dlock Redis/Valkey module.

Locks are native server commands (``DLOCK.ACQUIRE``, ``RELEASE``,
``EXTEND``, ``INFO`` and the set commands ``MACQUIRE``/``MRELEASE``/
``MEXTEND``): every grant carries a fencing token, waiting happens in the
server's FIFO queue (never by polling), and a lock can be plain, a
read-write lock, a semaphore, reentrant, or a set of resources.

>>> import redis, dlock
>>> locker = dlock.Locker(redis.Redis(port=6379))
>>> with locker.lock("orders:42", ttl=30, wait=5) as lease:
...     write(row, fence=lease.fence)

A :class:`Lock` is used as redis-py's and ``threading``'s locks are:
``lock.acquire(blocking=False)``, ``lock.release()``, ``lock.locked()``,
``lock.owned()``, ``lock.extend(ttl)``, ``@lock`` on a function, and
``lock.run(fn, *args)``.

The asyncio API is :mod:`dlock.asyncio`; Redlock over several
independent servers is :class:`dlock.Redlock`.
"""

from ._lease import Lease
from .election import Election, HandingOver, Leadership, Leads, Nobody, Observer
from ._spec import MAX_LIMIT, MAX_MS, MAX_SET, new_token
from ._version import __version__
from .errors import (
    Denied,
    DlockError,
    InvalidRequest,
    LockLost,
    MaxHoldReached,
    ModuleNotLoaded,
    NoQuorum,
    NotAcquired,
    NotHeld,
    NotOwned,
    Quarantined,
    Refused,
    ServerError,
    TooFewReplicas,
    Unavailable,
)
from .locker import Lock, Locker, thread_owner
from .redlock import Redlock
from .session import Session

__all__ = [
    "__version__",
    "Locker",
    "Lock",
    "Lease",
    "Redlock",
    "Session",
    "Election",
    "Leadership",
    "Observer",
    "Leads",
    "Nobody",
    "HandingOver",
    "thread_owner",
    "new_token",
    "MAX_LIMIT",
    "MAX_MS",
    "MAX_SET",
    "DlockError",
    "InvalidRequest",
    "NotAcquired",
    "NotHeld",
    "LockLost",
    "MaxHoldReached",
    "Unavailable",
    "NoQuorum",
    "Quarantined",
    "TooFewReplicas",
    "ModuleNotLoaded",
    "Denied",
    "ServerError",
    "NotOwned",
    "Refused",
]
