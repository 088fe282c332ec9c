"""Throwaway servers for the tests: ``redis-server`` (``DLOCK_SERVER``) with
the dlock module loaded (``DLOCK_MODULE``, else the repository's
``target/release/libdlock.so`` from ``cargo build --release``).

- Every server listens on 127.0.0.1 only, on a port the OS chose (at most
  55535, so that a cluster's bus port, port + 10000, is valid), in a
  private temporary directory.
- Startup is bounded (10 s); a server that does not come up fails the test
  with its own log.
- Every wait has a deadline; every process started here is killed when its
  test ends (the fixtures call ``kill``), and at exit as a last resort.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
START_DEADLINE = 10.0
POLL = 0.02

_live: "set[subprocess.Popen]" = set()


@atexit.register
def _kill_leftovers() -> None:
    for p in list(_live):
        try:
            p.kill()
            p.wait(5)
        except Exception:
            pass


def server_binary() -> str:
    return os.environ.get("DLOCK_SERVER") or "redis-server"


def cli_binary() -> str:
    cli = os.environ.get("DLOCK_CLI")
    if cli:
        return cli
    srv = server_binary()
    if srv.endswith("valkey-server"):
        return srv[: -len("valkey-server")] + "valkey-cli"
    if srv.endswith("redis-server"):
        return srv[: -len("redis-server")] + "redis-cli"
    return "redis-cli"


def module_path() -> str:
    p = os.environ.get("DLOCK_MODULE") or os.path.join(ROOT, "target", "release", "libdlock.so")
    if not os.path.exists(p):
        raise RuntimeError(f"module {p} not found: run `cargo build --release` first (`make test` does it)")
    return p


def free_port() -> int:
    """A free port from the OS, at most 55535 (cluster bus = port + 10000)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= 55535:
            return port


def wait_until(deadline: float, what: str, f: Callable[[], bool]) -> None:
    end = time.monotonic() + deadline
    while not f():
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline} s waiting for {what}")
        time.sleep(POLL)


def info_field(c: redis.Redis, section: str, field: str) -> Optional[str]:
    try:
        info = c.execute_command("INFO", section)
    except redis.RedisError:
        return None
    if isinstance(info, bytes):
        info = info.decode()
    if isinstance(info, dict):
        v = info.get(field)
        return None if v is None else str(v)
    for line in info.splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


class Server:
    """One redis-server with the module loaded (unless ``module=False``)."""

    def __init__(self, *extra: str, module: bool = True, binary: Optional[str] = None) -> None:
        self.extra = list(extra)
        self.module = module
        #: Another server binary than ``server_binary()`` (one built with
        #: TLS, for test_tls.py).
        self.binary = binary or server_binary()
        self.dir = tempfile.mkdtemp(prefix="dlock-py-")
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.stopped = False
        for attempt in range(5):
            self.port = free_port()
            err = self._spawn_and_wait()
            if err is None:
                return
            if attempt < 4 and "Address already in use" in err:
                continue
            self.kill()
            raise RuntimeError(err)

    def args(self) -> List[str]:
        a = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--save", "",
            "--appendonly", "no",
            "--logfile", os.path.join(self.dir, "redis.log"),
            "--daemonize", "no",
            "--enable-debug-command", "yes",
            "--repl-diskless-sync-delay", "0",
        ]
        if self.module:
            a += ["--loadmodule", module_path()]
        return a + self.extra

    def _spawn_and_wait(self) -> Optional[str]:
        out = open(os.path.join(self.dir, "stdout.log"), "wb")
        try:
            self.proc = subprocess.Popen(
                self.args(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        except OSError as e:
            return f"cannot spawn {self.binary}: {e}"
        finally:
            out.close()
        _live.add(self.proc)
        end = time.monotonic() + START_DEADLINE
        while True:
            rc = self.proc.poll()
            if rc is not None:
                _live.discard(self.proc)
                self.proc = None
                return self.failure(f"{self.binary} exited ({rc})")
            if self._ready():
                return None
            if time.monotonic() >= end:
                self.kill9()
                return self.failure(f"{self.binary} not ready after {START_DEADLINE} s")
            time.sleep(POLL)

    def _ready(self) -> bool:
        try:
            c = redis.Redis(
                port=self.port, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
            )
            ok = c.ping() and info_field(c, "persistence", "loading") == "0"
            c.close()
            return bool(ok)
        except redis.RedisError:
            return False

    def failure(self, what: str) -> str:
        return (
            f"{what}; port {self.port}, dir {self.dir}\n--- redis.log ---\n{self.log()}\n"
            f"--- stdout/stderr ---\n{_read(os.path.join(self.dir, 'stdout.log'))}"
        )

    def log(self) -> str:
        return _read(os.path.join(self.dir, "redis.log"))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def conn(self, timeout: float = 10.0, **kw) -> redis.Redis:
        """A plain client with timeouts, so a wedged server fails the test,
        and without redis-py's retries, so that what a test counts on the
        server is what it sent."""
        return redis.Redis(
            port=self.port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            **kw,
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server is not running"
        return self.proc.pid

    def stop(self) -> None:
        """SIGSTOP: a paused server (a GC-like pause, a stalled VM)."""
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True

    def cont(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.stopped = False

    def kill9(self) -> None:
        """A crash: SIGKILL, keeping the directory for ``restart``."""
        p = self.proc
        if p is None:
            return
        try:
            p.kill()
            p.wait(10)
        except Exception:
            pass
        _live.discard(p)
        self.proc = None

    def restart(self) -> None:
        """Starts again on the same port and directory."""
        self.kill9()
        err = self._spawn_and_wait()
        if err is not None:
            raise RuntimeError(f"restart failed: {err}")

    def kill(self) -> None:
        """Kills the server and removes its directory."""
        self.kill9()
        if not os.environ.get("DLOCK_KEEP_TMP"):
            shutil.rmtree(self.dir, ignore_errors=True)


SENTINEL_NAME = "m"
#: How long a failover may take on a loaded machine.
FAILOVER_DEADLINE = 30.0


class Sentinel:
    """One sentinel (``redis-server sentinel.conf --sentinel``) watching the
    master on ``master_port`` as ``m`` (quorum 2, down after 1 s)."""

    def __init__(self, master_port: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="dlock-py-sentinel-")
        self.proc: Optional[subprocess.Popen] = None
        for attempt in range(5):
            self.port = free_port()
            conf = os.path.join(self.dir, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(
                    f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                    f"logfile {self.dir}/sentinel.log\n"
                    f"sentinel monitor {SENTINEL_NAME} 127.0.0.1 {master_port} 2\n"
                    f"sentinel down-after-milliseconds {SENTINEL_NAME} 1000\n"
                    f"sentinel failover-timeout {SENTINEL_NAME} 10000\n"
                )
            out = open(os.path.join(self.dir, "stdout.log"), "wb")
            try:
                self.proc = subprocess.Popen(
                    [server_binary(), conf, "--sentinel"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                )
            finally:
                out.close()
            _live.add(self.proc)
            end = time.monotonic() + START_DEADLINE
            while self.proc.poll() is None and time.monotonic() < end and not self._ready():
                time.sleep(POLL)
            if self.proc.poll() is None and self._ready():
                return
            log = _read(os.path.join(self.dir, "sentinel.log")) + _read(os.path.join(self.dir, "stdout.log"))
            self.kill()
            if attempt < 4 and "Address already in use" in log:
                self.dir = tempfile.mkdtemp(prefix="dlock-py-sentinel-")
                continue
            raise RuntimeError(f"the sentinel on port {self.port} did not start:\n{log}")

    @property
    def addr(self) -> Tuple[str, int]:
        return ("127.0.0.1", self.port)

    def conn(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0))

    def _ready(self) -> bool:
        try:
            return bool(self.conn().ping())
        except redis.RedisError:
            return False

    def master_port(self) -> Optional[int]:
        try:
            a = self.conn().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_NAME)
        except redis.RedisError:
            return None
        return int(a[1]) if a else None

    def known(self, kind: str) -> int:
        try:
            return len(self.conn().execute_command("SENTINEL", kind, SENTINEL_NAME))
        except redis.RedisError:
            return 0

    def kill(self) -> None:
        p = self.proc
        if p is not None:
            try:
                p.kill()
                p.wait(10)
            except Exception:
                pass
            _live.discard(p)
            self.proc = None
        if not os.environ.get("DLOCK_KEEP_TMP"):
            shutil.rmtree(self.dir, ignore_errors=True)


class SentinelGroup:
    """A master (the module loaded), ``replicas`` replicas and three
    sentinels that know every replica and each other."""

    def __init__(self, replicas: int = 1) -> None:
        self.servers: List[Server] = []
        self.sentinels: List[Sentinel] = []
        try:
            self.servers.append(Server())
            for _ in range(replicas):
                r = Server("--replicaof", "127.0.0.1", str(self.servers[0].port))
                self.servers.append(r)
                wait_until(10, "replica sync", lambda: info_field(r.conn(), "replication", "master_link_status") == "up")
            self.sentinels = [Sentinel(self.servers[0].port) for _ in range(3)]
            for s in self.sentinels:
                wait_until(
                    FAILOVER_DEADLINE,
                    "the sentinels to know each other",
                    lambda: s.known("replicas") == replicas and s.known("sentinels") == 2,
                )
        except BaseException:
            self.kill()
            raise

    def addrs(self) -> List[Tuple[str, int]]:
        return [s.addr for s in self.sentinels]

    def index_of(self, port: int) -> int:
        return next(i for i, s in enumerate(self.servers) if s.port == port)

    def wait_new_master(self, old: int) -> int:
        """Waits until every sentinel names a master other than
        ``servers[old]`` and that server says it is a master; its index."""
        found: List[int] = []

        def switched() -> bool:
            ports = {s.master_port() for s in self.sentinels}
            if len(ports) != 1 or None in ports or self.servers[old].port in ports:
                return False
            i = self.index_of(ports.pop())
            try:
                role = self.servers[i].conn().execute_command("ROLE")
            except redis.RedisError:
                return False
            found[:] = [i]
            return role[0] == b"master"

        wait_until(FAILOVER_DEADLINE, "the sentinels to name a new master", switched)
        return found[0]

    def kill(self) -> None:
        for s in self.sentinels:
            s.kill()
        for s in self.servers:
            s.kill()


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def holder(c: redis.Redis, resource: str) -> Optional[Tuple[str, int]]:
    """``DLOCK.INFO``'s token and fence of a plain lock (None when free)."""
    v = c.execute_command("DLOCK.INFO", resource)
    if v is None:
        return None
    d = _pairs(v)
    tok = d.get("token")
    if tok is None:
        return None
    return tok.decode() if isinstance(tok, bytes) else tok, d["fence"]


def waiters(c: redis.Redis, resource: str) -> int:
    v = c.execute_command("DLOCK.INFO", resource)
    if v is None:
        return 0
    return int(_pairs(v).get("waiters", 0))


def holds(c: redis.Redis, resource: str) -> int:
    """How many holds a resource has (a plain lock: 1)."""
    v = c.execute_command("DLOCK.INFO", resource)
    if v is None:
        return 0
    d = _pairs(v)
    if "holds" in d:
        return len(d["holds"])
    return 1 if d.get("token") is not None else 0


def _pairs(v) -> Dict[str, object]:
    if isinstance(v, dict):
        return {k.decode() if isinstance(k, bytes) else k: x for k, x in v.items()}
    return {(v[i].decode() if isinstance(v[i], bytes) else v[i]): v[i + 1] for i in range(0, len(v), 2)}


def calls(c: redis.Redis, command: str) -> int:
    """How often the server ran ``command`` (``INFO commandstats``)."""
    stats = c.info("commandstats")
    return int(stats.get(f"cmdstat_{command.lower()}", {}).get("calls", 0))


def dead_url() -> str:
    """A URL where nothing listens."""
    return f"redis://127.0.0.1:{free_port()}/0"


# --- a Redis Cluster of Servers -------------------------------------------------

CLUSTER_DEADLINE = 30.0


def parse_cluster_nodes(text: str) -> List[dict]:
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 8:
            continue
        addr = f[1].split("@")[0]
        flags = f[2].split(",")
        slots = []
        for s in f[8:]:
            if s.startswith("["):
                continue
            a, _, b = s.partition("-")
            slots.append((int(a), int(b or a)))
        out.append(
            {
                "id": f[0],
                "port": int(addr.rsplit(":", 1)[1] or 0),
                "master": "master" in flags,
                "failing": "fail" in flags or "fail?" in flags,
                "master_id": None if f[3] == "-" else f[3],
                "slots": slots,
            }
        )
    return out


class Cluster:
    """``masters * (1 + replicas)`` nodes, created with ``redis-cli
    --cluster create``; stable (every node agrees) when returned."""

    def __init__(self, masters: int = 3, replicas: int = 0) -> None:
        n = masters * (1 + replicas)
        self.nodes: List[Server] = []
        try:
            for _ in range(n):
                self.nodes.append(
                    Server(
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "2000",
                    )
                )
            self.ids = [s.conn().execute_command("CLUSTER", "MYID").decode() for s in self.nodes]
            self._create(replicas)
            self.wait_stable()
        except BaseException:
            if os.environ.get("DLOCK_TEST_VERBOSE"):
                print(self.logs())
            self.kill()
            raise

    def _create(self, replicas: int) -> None:
        args = [cli_binary(), "--cluster", "create"]
        args += [s.addr for s in self.nodes]
        args += ["--cluster-replicas", str(replicas), "--cluster-yes"]
        try:
            p = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, timeout=CLUSTER_DEADLINE)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{' '.join(args)} hung for {CLUSTER_DEADLINE} s: {e.stdout!r}") from None
        out = (p.stdout + p.stderr).decode(errors="replace")
        if p.returncode != 0 or "[OK] All 16384 slots covered" not in out:
            raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}):\n{out}")

    def kill(self) -> None:
        for s in self.nodes:
            s.kill()

    def node(self, i: int) -> Server:
        return self.nodes[i]

    def view(self, i: int = 0) -> List[dict]:
        text = self.nodes[i].conn().execute_command("CLUSTER", "NODES")
        return parse_cluster_nodes(text.decode() if isinstance(text, bytes) else text)

    def key_slot(self, key: str) -> int:
        return int(self.nodes[0].conn().execute_command("CLUSTER", "KEYSLOT", key))

    def node_for_slot(self, slot: int) -> int:
        for line in self.view():
            if line["master"] and any(a <= slot <= b for a, b in line["slots"]):
                return self.ids.index(line["id"])
        raise AssertionError(f"no owner for slot {slot}")

    def masters(self) -> List[int]:
        return sorted(self.ids.index(l["id"]) for l in self.view() if l["master"] and l["slots"])

    def replicas_of(self, master: int) -> List[int]:
        mid = self.ids[master]
        return sorted(self.ids.index(l["id"]) for l in self.view() if not l["master"] and l["master_id"] == mid)

    def setslot(self, i: int, slot: int, state: str, node_id: str = "") -> None:
        args = ["CLUSTER", "SETSLOT", slot, state] + ([node_id] if node_id else [])
        self.nodes[i].conn().execute_command(*args)

    def migrate_slot(self, slot: int, src: int, dst: int) -> None:
        """Moves ``slot`` from master ``src`` to master ``dst`` with the
        manual resharding protocol, keys included."""
        sc, dport = self.nodes[src].conn(), self.nodes[dst].port
        self.setslot(dst, slot, "IMPORTING", self.ids[src])
        self.setslot(src, slot, "MIGRATING", self.ids[dst])
        end = time.monotonic() + CLUSTER_DEADLINE
        while True:
            keys = sc.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            assert time.monotonic() < end, f"slot {slot} never drained"
            sc.execute_command("MIGRATE", "127.0.0.1", dport, "", 0, 5000, "KEYS", *keys)
        self.setslot(dst, slot, "NODE", self.ids[dst])
        self.setslot(src, slot, "NODE", self.ids[dst])
        for m in self.masters():
            if m not in (src, dst):
                self.setslot(m, slot, "NODE", self.ids[dst])
        self.wait_stable()
        assert self.node_for_slot(slot) == dst, f"slot {slot} not moved"

    def wait_stable(self) -> None:
        end = time.monotonic() + CLUSTER_DEADLINE
        last = ""
        while True:
            last = self._unstable()
            if not last:
                return
            if time.monotonic() >= end:
                raise AssertionError(f"cluster not stable after {CLUSTER_DEADLINE} s: {last}")
            time.sleep(0.05)

    def _unstable(self) -> str:
        first = None
        for i, s in enumerate(self.nodes):
            try:
                c = s.conn(timeout=2)
                info = c.execute_command("CLUSTER", "INFO")
                info = info.decode() if isinstance(info, bytes) else info
                if "cluster_state:ok" not in info or "cluster_slots_assigned:16384" not in info:
                    return f"node {s.port}: {info}"
                view = sorted(
                    (l["id"], l["master"], tuple(l["slots"]), l["failing"]) for l in self.view(i)
                )
            except redis.RedisError as e:
                return f"node {s.port}: {e}"
            if any(v[3] for v in view) or len(view) != len(self.nodes):
                return f"node {s.port} sees {view}"
            if first is None:
                first = view
            elif first != view:
                return f"views differ: {first} vs {view}"
            me = [v for v in view if v[0] == self.ids[i]][0]
            if not me[1]:
                if info_field(c, "replication", "master_link_status") != "up":
                    return f"replica {s.port} not linked"
        return ""

    def logs(self) -> str:
        return "\n".join(
            f"--- node {i} port {s.port} ---\n" + "\n".join(s.log().splitlines()[-100:])
            for i, s in enumerate(self.nodes)
        )


# --- a reply-dropping proxy -------------------------------------------------------


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        d = self.sock.recv(65536)
        if not d:
            raise EOFError
        self.buf += d

    def line(self, raw: bytearray) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n")
        ln, self.buf = self.buf[:i], self.buf[i + 2 :]
        raw += ln + b"\r\n"
        return ln

    def exact(self, n: int, raw: bytearray) -> bytes:
        while len(self.buf) < n:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        raw += d
        return d

    def frame(self, raw: bytearray):
        """One RESP value (RESP2, and RESP3's simple types), its exact
        bytes appended to ``raw``."""
        ln = self.line(raw)
        t, rest = ln[:1], ln[1:]
        if t in (b"+", b"-", b":", b"_", b",", b"#", b"("):
            return (t, rest)
        if t in (b"$", b"=", b"!"):
            n = int(rest)
            if n < 0:
                return (t, None)
            d = self.exact(n + 2, raw)[:-2]
            return (t, d)
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return (t, [self.frame(raw) for _ in range(max(n, 0))])
        if t in (b"%", b"|"):
            n = int(rest)
            return (t, [self.frame(raw) for _ in range(2 * n)])
        raise ValueError(f"unsupported RESP line {ln!r}")


class Dropped:
    def __init__(self, args: List[bytes], reply) -> None:
        self.args = args
        self.reply = reply

    @property
    def name(self) -> str:
        return self.args[0].decode().upper() if self.args else ""


class Proxy:
    """A loopback TCP proxy for fault injection: for a seeded random subset
    of the commands ``filter`` selects, it forwards the command, waits for
    the server's reply, then drops the client connection instead of
    forwarding it. The command took effect; the client never hears: a lost
    reply. Lockstep (one command, one reply), as a blocking client talks.
    Every dropped reply is recorded."""

    IO_TIMEOUT = 30.0

    def __init__(self, upstream: int, seed: int, per_mille: int, filter: Callable[[List[bytes]], bool]) -> None:
        import random

        self.upstream = upstream
        self.per_mille = per_mille
        self.filter = filter
        self.seed = seed
        self._random = random
        self.dropped: List[Dropped] = []
        self.forwarded = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True, name="proxy")
        self.thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self.stopping:
                client.close()
                return
            with self._lock:
                n = self.connections
                self.connections += 1
                self._socks.append(client)
            rng = self._random.Random(self.seed * 1_000_003 + n)
            threading.Thread(target=self._serve, args=(client, rng), daemon=True).start()

    def _serve(self, client: socket.socket, rng) -> None:
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream), timeout=self.IO_TIMEOUT)
        except OSError:
            client.close()
            return
        with self._lock:
            self._socks.append(up)
        for s in (client, up):
            s.settimeout(self.IO_TIMEOUT)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rc, ru = _Reader(client), _Reader(up)
        try:
            while True:
                craw = bytearray()
                cmd = rc.frame(craw)
                up.sendall(bytes(craw))
                rraw = bytearray()
                reply = ru.frame(rraw)
                args = [a[1] or b"" for a in cmd[1]] if cmd[0] == b"*" else []
                if self.filter(args) and rng.randrange(1000) < self.per_mille:
                    with self._lock:
                        self.dropped.append(Dropped(args, reply))
                    break
                client.sendall(bytes(rraw))
                with self._lock:
                    self.forwarded += 1
        except (OSError, EOFError, ValueError):
            pass
        for s in (client, up):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def dropped_named(self, name: str) -> List[Dropped]:
        with self._lock:
            return [d for d in self.dropped if d.name == name.upper()]

    def close(self) -> None:
        self.stopping = True
        try:
            self.listener.close()
        except OSError:
            pass
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
