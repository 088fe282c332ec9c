"""The lock rules, free of I/O: requests, replies, retries with the same
token, lease budgets, loss and Redlock arithmetic, written once and driven
by the blocking shells (threads, sockets) and the asyncio shells alike.
Nothing here sends, sleeps, reads a clock or draws a random number: time
and randomness are passed in.

- ``effects``: the protocol between a rule and its shells (a rule yields
  ``Call``/``Sleep`` effects and is sent ``Outcome``\\ s).
- ``retry``: same-token retries (backoff, outages, deadlines).
- ``single``: the rules of a lease on one server or one cluster slot.
- ``lease``: a held lease's state and decisions (budget, renewal, loss,
  release, leaving a ``with`` block).

The only module outside this package a rule may use is ``dlock.errors``
(the exceptions it raises)."""
