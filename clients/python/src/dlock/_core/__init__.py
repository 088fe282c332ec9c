"""The lock rules, free of I/O: requests, replies, retries with the same
token, lease budgets, loss and Redlock arithmetic, written once and driven
by the blocking shells (threads, sockets) and the asyncio shells alike.
Nothing here sends, sleeps, reads a clock or draws a random number: time
and randomness are passed in."""
