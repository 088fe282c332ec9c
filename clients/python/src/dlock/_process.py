"""This process's id, known without a system call: ``os.getpid()`` asks the
kernel every time (a lock cycle asked about seven times), while a fork
(``os.fork``, ``multiprocessing``, or a C extension that forks as the C API
says, through ``PyOS_AfterFork_Child``) runs the hook below in the child
before any Python code of the child's. A process forked without that hook
has no working Python threads either."""

from __future__ import annotations

import os

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):  # not on Windows, where nothing forks
    os.register_at_fork(after_in_child=_forked)


def pid() -> int:
    """The id of the process running now."""
    return _pid
