"""Where a resource's commands go: one server, or the masters of a Redis
Cluster's slots (a :class:`~dlock._node.Node` each).

Cluster routing is done here rather than by ``RedisCluster``, because a lock
needs what that client does not give: ``WAIT n`` on the very connection that
made the write, and a blocking ``ACQUIRE ... WAIT`` on a connection of its
own. ``MOVED`` refreshes the slot map and retries; ``ASK`` sends ``ASKING``
and the command to the importing node in one pipeline.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from redis.crc import key_slot

from .errors import ASK, MOVED, RETRY, Failure, Unavailable
from ._node import Conn, Node, check, parse_slots, run_pipeline, split_addr

T = TypeVar("T")

#: Redirects followed for one command before giving up (a slot map in flux
#: answers again on the caller's next retry).
MAX_REDIRECTS = 5


class Topology:
    """Where a resource's commands go: one server (``single``), or in Redis
    Cluster the master of the resource's slot."""

    def __init__(self, single: Optional[Node] = None, cluster: Optional["ClusterMap"] = None):
        self.single = single
        self.cluster = cluster

    def run(
        self,
        key: bytes,
        io_timeout: float,
        extra: float,
        op: Callable[[Conn, bool], T],
        on_node: Optional[Callable[[Node], None]] = None,
        waits: Optional[float] = None,
    ) -> T:
        """Runs ``op(conn, asking)`` on the server that owns ``key``; its
        replies are awaited for ``io_timeout + extra`` (``extra``: a
        blocking command's own wait, and a ``WAIT n`` for replicas); a slot
        map refresh gets ``io_timeout`` only. ``waits``: how long the
        command waits on the server (default: ``extra``), see
        :meth:`Node.get`; a waiting ``op`` computes its wait when it runs,
        from its own deadline. Raises :class:`Failure`."""
        t = io_timeout + extra
        if waits is None:
            waits = extra
        if self.single is not None:
            node = self.single
            if on_node:
                on_node(node)
            return node.with_conn(t, op, False, waits=waits)
        m = self.cluster
        assert m is not None
        node = m.master_for(key, io_timeout)
        asking = False
        for _ in range(MAX_REDIRECTS):
            if on_node:
                on_node(node)
            try:
                return node.with_conn(t, op, asking, waits=waits)
            except Failure as f:
                if f.kind == MOVED:
                    # The map is stale: learn the new one, and go where the
                    # server said meanwhile.
                    try:
                        m.refresh(io_timeout)
                    except Failure:
                        pass
                    node = m.node(f.addr)
                    asking = False
                elif f.kind == ASK:
                    node = m.node(f.addr)
                    asking = True
                elif f.kind == RETRY:
                    # A failover or a dead master: ask again next time.
                    try:
                        m.refresh(io_timeout)
                    except Failure:
                        pass
                    raise
                else:
                    raise
        raise Failure(RETRY, Unavailable(f"more than {MAX_REDIRECTS} redirects for {key!r}"))

    def nodes(self) -> List[Node]:
        if self.single is not None:
            return [self.single]
        assert self.cluster is not None
        return self.cluster.all_nodes()

    def close(self) -> None:
        for n in self.nodes():
            n.close()


class ClusterMap:
    """The slot map of a Redis Cluster, from ``CLUSTER SLOTS``, and a
    :class:`Node` per master."""

    def __init__(self, seeds: List[Node], io_timeout: float) -> None:
        self.seeds = seeds
        self._slots: List[Tuple[int, int, str]] = []
        self._nodes: Dict[str, Node] = {}
        self._lock = threading.Lock()
        self.refresh(io_timeout)

    def node(self, addr: str) -> Node:
        with self._lock:
            n = self._nodes.get(addr)
            if n is None:
                host, port = split_addr(addr)
                n = self.seeds[0].sibling(host, port)
                self._nodes[addr] = n
            return n

    def all_nodes(self) -> List[Node]:
        with self._lock:
            return list(self._nodes.values()) + list(self.seeds)

    def lookup(self, slot: int) -> Optional[str]:
        for lo, hi, addr in self._slots:
            if lo <= slot <= hi:
                return addr
        return None

    def master_for(self, key: bytes, io_timeout: float) -> Node:
        slot = key_slot(key)
        addr = self.lookup(slot)
        if addr is None:
            self.refresh(io_timeout)
            addr = self.lookup(slot)
        if addr is None:
            raise Failure(RETRY, Unavailable(f"no master serves slot {slot}"))
        return self.node(addr)

    def refresh(self, io_timeout: float) -> None:
        """Reads ``CLUSTER SLOTS`` from the first known node that answers."""
        last: Optional[Failure] = None
        for node in self.all_nodes():
            try:
                reply = node.with_conn(
                    io_timeout, lambda c: check(run_pipeline(c, [("CLUSTER", "SLOTS")]))[0]
                )
            except Failure as f:
                last = f
                continue
            slots = parse_slots(reply, node.addr)
            if slots:
                self._slots = slots
                return
        raise last or Failure(RETRY, Unavailable("no cluster node returned a slot map"))
