"""The core (``dlock._core``) does no I/O and reads no clock: every one of
its modules imports in a process where redis, socket, asyncio, threading,
time and random cannot be imported. The one module outside the core it
may use is ``dlock.errors`` (the exceptions it raises), loaded before the
ban."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import textwrap

import dlock._core

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(dlock._core.__file__))))
BANNED = ("redis", "socket", "asyncio", "threading", "time", "random")

CHECK = textwrap.dedent(
    """
    import importlib, importlib.abc, sys, types

    src, banned, modules = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    # The package without its __init__ (which loads the whole client).
    pkg = types.ModuleType("dlock")
    pkg.__path__ = [src + "/dlock"]
    sys.modules["dlock"] = pkg
    importlib.import_module("dlock.errors")

    class Ban(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in banned:
                raise ImportError(f"the core imported {name}")
            return None

    for name in list(sys.modules):
        if name.split(".")[0] in banned:
            del sys.modules[name]
    sys.meta_path.insert(0, Ban())
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            print(f"{m}: {e}")
            sys.exit(1)
    """
)


def core_modules(src: str) -> list:
    path = os.path.join(src, "dlock", "_core")
    return ["dlock._core"] + [f"dlock._core.{m.name}" for m in pkgutil.iter_modules([path])]


def check(src: str) -> subprocess.CompletedProcess:
    mods = core_modules(src)
    return subprocess.run(
        [sys.executable, "-c", CHECK, src, ",".join(BANNED), ",".join(mods)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_core_module_imports_without_io_clock_or_randomness():
    mods = core_modules(SRC)
    assert {"dlock._core.effects", "dlock._core.lease", "dlock._core.single", "dlock._core.retry"} <= set(mods)
    r = check(SRC)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_check_catches_a_core_module_that_reads_the_clock(tmp_path):
    # A copy of the package with `import time` planted in one core module.
    import shutil

    dst = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "dlock"), dst / "dlock")
    lease = dst / "dlock" / "_core" / "lease.py"
    text = lease.read_text()
    lease.write_text(text.replace("from __future__ import annotations\n", "from __future__ import annotations\n\nimport time\n", 1))
    r = check(str(dst))
    assert r.returncode == 1 and "dlock._core.lease: the core imported time" in r.stdout, r.stdout + r.stderr


def test_the_cap_refusal_says_how_long_the_hold_may_live_and_moves_the_floor():
    from dlock._core.lease import CAP_REACHED, Cap, left_to_cap_ms

    refusal = "MAXHOLD the hold may live 5 ms more: it cannot be extended past its MAXHOLD"
    assert left_to_cap_ms(refusal) == 5
    assert left_to_cap_ms("MAXHOLD the hold may live 0 ms more") == 0
    for other in (CAP_REACHED, "MAXHOLD may live x ms more", "MAXHOLD may live -1 ms more", ""):
        assert left_to_cap_ms(other) is None, other
    cap = Cap(100.0, 3000)
    cap.no_earlier_than(102.0)
    assert cap.floor == 103.0, "an earlier time leaves the floor"
    cap.no_earlier_than(106.0)
    assert cap.floor == 106.0
