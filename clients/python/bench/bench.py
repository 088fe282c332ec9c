"""Benchmarks of the Python client, side by side with redis-py's ``Lock`` and
python-redis-lock, on one server (``DLOCK_SERVER`` with the dlock module,
started here on a loopback port):

1. an uncontended lock/unlock cycle (latency per cycle);
2. critical sections per second with THREADS threads contending for one
   lock (default 32), with each thread's count, so that starvation shows.

Prints Markdown tables. Usage (``make bench-python`` does this):

    python clients/python/bench/bench.py [--threads 32] [--seconds 5] [--cycles 3000]
"""

from __future__ import annotations

import argparse
import os
import platform
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


def contend(name, make_section, threads, seconds):
    """``threads`` threads, each looping: acquire (blocking), a tiny
    critical section (checks mutual exclusion), release. Returns CS/s and
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
    a = ap.parse_args()

    server = Server()
    try:
        r = redis.Redis(port=server.port)
        locker = dlock.Locker(r)
        version = r.info("server").get("redis_version")
        print(
            f"# dlock-redis {dlock.__version__} vs redis-py {redis.__version__} Lock"
            + (f" and python-redis-lock {redis_lock.__version__}" if redis_lock else "")
        )
        print(
            f"\nserver {os.path.basename(server.args()[0])} {version} on 127.0.0.1, "
            f"Python {platform.python_version()}, {os.cpu_count()} cores\n"
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
                "dlock `with lock:` (watchdog thread on)",
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
        results = []

        def dl(**kw):
            def make():
                lk = locker.lock("hot", ttl=10, watchdog=False, **kw)
                return lambda: lk

            return make

        results.append(contend("dlock (server-side FIFO `WAIT`)", dl(), n, a.seconds))

        def rp(sleep):
            def make():
                return lambda: r.lock("hot2", timeout=10, sleep=sleep)

            return make

        results.append(contend("redis-py `Lock` (default: polls every 100 ms)", rp(0.1), n, a.seconds))
        results.append(contend("redis-py `Lock`, `sleep=0.001` (polls every 1 ms)", rp(0.001), n, a.seconds))
        if redis_lock:

            def prl():
                return lambda: redis_lock.Lock(r, "hot3", expire=10)

            results.append(contend("python-redis-lock (BLPOP signal)", prl, n, a.seconds))

        print(f"\n## {n} threads contending for one lock ({a.seconds:g} s each)\n")
        print("| client | critical sections/s | vs redis-py `Lock` | per thread: min / median / max | starved threads | overlaps |")
        print("| --- | --- | --- | --- | --- | --- |")
        base = results[1][1]
        for name, rate, counts, viol in results:
            s = sorted(counts)
            print(
                f"| {name} | {rate:,.0f} | {rate / base:.1f}x | {s[0]} / {statistics.median(s):.0f} / {s[-1]} "
                f"| {sum(1 for x in counts if x == 0)} | {viol} |"
            )
    finally:
        server.kill()


if __name__ == "__main__":
    main()
