"""Benchmarks of the Python client, side by side with redis-py's ``Lock`` and
python-redis-lock, on one server (``DLOCK_SERVER`` with the dlock module,
started here on a loopback port):

1. an uncontended lock/unlock cycle (latency per cycle);
2. critical sections per second with THREADS threads contending for one
   lock (default 32), with each thread's count, so that starvation shows:
   once back to back (a thread that releases asks again at once, so a
   client without a queue can re-take the lock it just released while the
   others sleep), once with OUTSIDE ms of work outside the lock between
   critical sections (default 1 ms), as most programs do. Beside them, the
   same commands on a bare socket per thread with no client logic at all:
   what the machine allows any Python client (interpreter, GIL, sockets).

Prints Markdown tables. Usage (``make bench-python`` does this):

    python clients/python/bench/bench.py [--threads 32] [--seconds 5] [--cycles 3000] [--outside 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import threading
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import dlock  # noqa: E402
from harness import Server  # noqa: E402

try:
    import redis_lock  # python-redis-lock
except ImportError:  # pragma: no cover
    redis_lock = None


class Bare:
    """The same commands on a bare socket of its own, with no client logic
    at all (no timeouts, retries, lease budget, pool or watchdog): what the
    machine allows any Python client of dlock, not a client to use."""

    def __init__(self, port: int, resource: str, wait: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        token = os.urandom(16).hex()
        waiting = ("WAIT", "10000") if wait else ()
        self.acquire = self.pack("DLOCK.ACQUIRE", resource, token, "10000", *waiting)
        self.release = self.pack("DLOCK.RELEASE", resource, token)
        self.buf = b""

    @staticmethod
    def pack(*args: str) -> bytes:
        return f"*{len(args)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args)

    def reply(self) -> bytes:
        while b"\r\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def __enter__(self) -> "Bare":
        while True:
            self.sock.sendall(self.acquire)
            if self.reply().startswith(b":"):
                return self

    def __exit__(self, *exc: object) -> None:
        self.sock.sendall(self.release)
        self.reply()


def cycles(name, make_cycle, n):
    """Median of 3 runs of n lock/unlock cycles: µs per cycle."""
    runs = []
    for _ in range(3):
        cycle = make_cycle()
        for _ in range(50):
            cycle()
        t0 = time.perf_counter()
        for _ in range(n):
            cycle()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return name, statistics.median(runs)


def contend(name, make_section, threads, seconds, outside=0.0):
    """``threads`` threads, each looping: acquire (blocking), a tiny
    critical section (checks mutual exclusion), release, then ``outside``
    seconds of work outside the lock (0: retry at once). Returns CS/s and
    per-thread counts."""
    counts = [0] * threads
    inside = [0]
    violations = [0]
    stop = threading.Event()
    start = threading.Barrier(threads + 1)
    guard = threading.Lock()

    def worker(i):
        section = make_section()
        start.wait()
        while not stop.is_set():
            with section():
                with guard:
                    inside[0] += 1
                    if inside[0] > 1:
                        violations[0] += 1
                with guard:
                    inside[0] -= 1
                counts[i] += 1
            if outside:
                time.sleep(outside)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    done_at = sum(counts)
    elapsed = time.perf_counter() - t0
    stop.set()
    for t in ts:
        t.join(60)
    return name, done_at / elapsed, counts, violations[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cycles", type=int, default=3000)
    ap.add_argument("--outside", type=float, default=1.0, help="ms of work outside the lock in the second run")
    a = ap.parse_args()

    server = Server()
    try:
        r = redis.Redis(port=server.port)
        locker = dlock.Locker(r)
        info = r.info("server")
        version = info.get("valkey_version") or info.get("redis_version")
        print(
            f"# dlock-redis {dlock.__version__} vs redis-py {redis.__version__} Lock"
            + (f" and python-redis-lock {redis_lock.__version__}" if redis_lock else "")
        )
        print(
            f"\nserver {os.path.basename(server.args()[0])} {version} on 127.0.0.1, "
            f"Python {platform.python_version()}, {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f} at the start\n"
        )

        rows = []
        rows.append(
            cycles(
                "dlock `acquire()` + `release()`",
                lambda: (lambda lk=locker.lock("c1", ttl=30, blocking=False): lk.acquire().release()),
                a.cycles,
            )
        )
        rows.append(
            cycles(
                "dlock `with lock:` (watchdog on)",
                lambda: (lambda lk=locker.lock("c2", ttl=30): lk.__enter__() and lk.__exit__(None, None, None)),
                a.cycles,
            )
        )

        def rp_cycle():
            lk = r.lock("c3", timeout=30)

            def c():
                lk.acquire()
                lk.release()

            return c

        rows.append(cycles("redis-py `Lock`", rp_cycle, a.cycles))

        def bare_cycle():
            b = Bare(server.port, "c5", wait=False)

            def c():
                b.__enter__()
                b.__exit__()

            return c

        rows.append(cycles("bare socket, dlock's commands (the machine's cycle)", bare_cycle, a.cycles))
        machine_us = rows[-1][1]
        if redis_lock:

            def prl_cycle():
                lk = redis_lock.Lock(r, "c4", expire=30)

                def c():
                    lk.acquire()
                    lk.release()

                return c

            rows.append(cycles("python-redis-lock", prl_cycle, a.cycles))
        print("## Uncontended lock/unlock cycle\n")
        print("| client | µs per cycle | cycles/s |")
        print("| --- | --- | --- |")
        for name, us in rows:
            print(f"| {name} | {us:.0f} | {1e6 / us:,.0f} |")

        n = a.threads
        clients = []

        def dl():
            lk = locker.lock("hot", ttl=10, watchdog=False)
            return lambda: lk

        clients.append(("dlock (server-side FIFO `WAIT`)", dl))

        def rp(sleep):
            return lambda: (lambda: r.lock("hot2", timeout=10, sleep=sleep))

        clients.append(("redis-py `Lock` (default: polls every 100 ms)", rp(0.1)))
        clients.append(("redis-py `Lock`, `sleep=0.001` (polls every 1 ms)", rp(0.001)))
        if redis_lock:
            clients.append(("python-redis-lock (BLPOP signal)", lambda: (lambda: redis_lock.Lock(r, "hot3", expire=10))))

        def bare():
            b = Bare(server.port, "hot4")
            return lambda: b

        clients.append(("bare sockets, dlock's commands, no client logic (the machine's ceiling)", bare))

        for title, outside in (
            ("back to back: a thread that releases asks again at once", 0.0),
            (f"{a.outside:g} ms of work outside the lock between critical sections", a.outside / 1000),
        ):
            results = [contend(name, make, n, a.seconds, outside) for name, make in clients]
            print(f"\n## {n} threads contending for one lock, {title} ({a.seconds:g} s each)\n")
            print(f"This machine's uncontended bare-socket cycle: {machine_us:.0f} µs.\n")
            print(
                "| client | critical sections/s | vs redis-py `Lock` | per thread: min / median / max "
                "| spread (max-min)/median | served to every thread, /s | vs redis-py `Lock` | vs bare sockets "
                "| fairness (Jain) | overlaps |"
            )
            print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            base = results[1][1]
            # What every thread got: the slowest thread's rate, times the
            # threads. A lock that starves some threads serves all of them
            # only at its slowest thread's pace.
            served = [min(counts) * len(counts) * rate / max(sum(counts), 1) for _, rate, counts, _ in results]
            base_served = max(served[1], 1e-9)
            bare_rate = max(results[-1][1], 1e-9)
            for (name, rate, counts, viol), all_served in zip(results, served):
                c = sorted(counts)
                jain = sum(c) ** 2 / (len(c) * sum(x * x for x in c)) if sum(c) else 0.0
                med = statistics.median(c)
                spread = (c[-1] - c[0]) / med * 100 if med else float("inf")
                print(
                    f"| {name} | {rate:,.0f} | {rate / base:.1f}x | {c[0]} / {med:.0f} / {c[-1]} | {spread:.1f} % "
                    f"| {all_served:,.0f} | {all_served / base_served:.1f}x | {rate / bare_rate:.2f}x "
                    f"| {jain:.2f} | {viol} |"
                )
    finally:
        server.kill()


if __name__ == "__main__":
    main()
