"""Fixtures: servers, clusters and proxies that every test cleans up."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from harness import Cluster, Proxy, Server  # noqa: E402


@pytest.fixture
def make_server():
    """``make_server(*extra_args, module=True)``: a started server, killed
    (and its directory removed) when the test ends."""
    made = []

    def make(*extra: str, module: bool = True) -> Server:
        s = Server(*extra, module=module)
        made.append(s)
        return s

    yield make
    for s in made:
        s.kill()


@pytest.fixture
def server(make_server) -> Server:
    return make_server()


@pytest.fixture
def make_proxy():
    made = []

    def make(upstream: int, seed: int, per_mille: int, filter) -> Proxy:
        p = Proxy(upstream, seed, per_mille, filter)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture(scope="module")
def cluster3():
    """A 3-master cluster with one replica each, shared by a module's tests."""
    c = Cluster(3, 1)
    yield c
    c.kill()
