"""TLS: a redis-py client set up for TLS (``ssl=True``, its CA and client
certificate, or a ``rediss://`` URL) passed to ``dlock.Locker``; the
locker's own connections keep those settings. Against servers listening
with TLS on certificates made per test by the ``openssl`` command.

The servers are ``$DLOCK_TLS_SERVER``, else ``redis-server`` from the PATH
(Debian's is built with TLS; other builds under test may not be). Each
also listens without TLS, for the harness and for reading what the tests
did; the locker uses only the TLS port.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import redis

import dlock
from harness import Server, free_port, holder, wait_until


def _openssl(d, *args):
    p = subprocess.run(["openssl", *args], cwd=d, capture_output=True, timeout=60)
    assert p.returncode == 0, f"openssl {args}: {p.stderr.decode()}"


def _ca(d, name):
    _openssl(
        d, "req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN=dlock test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
    )


def _leaf(d, name, ca, extensions, serial):
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(f"basicConstraints=CA:FALSE\n{extensions}\n")
    _openssl(
        d, "req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
    )
    _openssl(
        d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-set_serial", str(serial), "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
    )


@pytest.fixture
def certs(tmp_path):
    """A CA, a server certificate for localhost and 127.0.0.1, one for
    another name, a client certificate, and a CA that vouches for none."""
    d = str(tmp_path)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(d, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth", 1001)
    _leaf(d, "misnamed", "ca", "subjectAltName=DNS:db.example\nextendedKeyUsage=serverAuth", 1002)
    _leaf(d, "client", "ca", "extendedKeyUsage=clientAuth", 1003)
    return lambda f: os.path.join(d, f)


@pytest.fixture
def tls_server(certs):
    """``tls_server(cert="server", client_certs=False)``: a server that also
    listens with TLS (``.tls_port``) on certificate ``cert``."""
    made = []

    def make(cert="server", client_certs=False, extra=()):
        binary = os.environ.get("DLOCK_TLS_SERVER") or "redis-server"
        for attempt in range(5):
            port = free_port()
            try:
                s = Server(
                    "--tls-port", str(port),
                    "--tls-cert-file", certs(f"{cert}.crt"),
                    "--tls-key-file", certs(f"{cert}.key"),
                    "--tls-ca-cert-file", certs("ca.crt"),
                    "--tls-auth-clients", "yes" if client_certs else "no",
                    *extra,
                    binary=binary,
                )
            except RuntimeError as e:
                # The port was free when asked for; another process may
                # have taken it since.
                if attempt < 4 and "Address already in use" in str(e):
                    continue
                raise
            s.tls_port = port
            made.append(s)
            return s

    yield make
    for s in made:
        s.kill()


def tls_client(s, certs, host="127.0.0.1", ca="ca.crt", client=False):
    kw = dict(ssl=True, ssl_ca_certs=certs(ca), ssl_check_hostname=True)
    if client:
        kw.update(ssl_certfile=certs("client.crt"), ssl_keyfile=certs("client.key"))
    return redis.Redis(host=host, port=s.tls_port, socket_timeout=5, **kw)


def test_a_lock_over_tls_from_a_client_or_a_url(tls_server, certs):
    s = tls_server()
    plain = s.conn()
    for client in (
        tls_client(s, certs),
        tls_client(s, certs, host="localhost"),
        f"rediss://127.0.0.1:{s.tls_port}/0?ssl_ca_certs={certs('ca.crt')}&ssl_check_hostname=True",
    ):
        locker = dlock.Locker(client)
        with locker.lock("res", ttl=10, blocking=False) as lease:
            assert holder(plain, "res") == (lease.token, lease.fence)
            assert locker.lock("res", ttl=1).acquire(blocking=False) is None
        assert holder(plain, "res") is None


def test_mutual_tls(tls_server, certs):
    s = tls_server(client_certs=True)
    locker = dlock.Locker(tls_client(s, certs, client=True))
    with locker.lock("res", ttl=10, blocking=False):
        pass
    without = dlock.Locker(tls_client(s, certs), retry_for=0.2)
    with pytest.raises(dlock.Unavailable):
        without.lock("res", ttl=10).acquire(blocking=False)
    assert holder(s.conn(), "res") is None


@pytest.mark.parametrize("cert,ca,why", [
    ("server", "other-ca.crt", "certificate verify failed"),
    ("misnamed", "ca.crt", "address mismatch"),
])
def test_an_unknown_ca_or_a_wrong_name_is_refused(tls_server, certs, cert, ca, why):
    s = tls_server(cert=cert)
    locker = dlock.Locker(tls_client(s, certs, ca=ca), retry_for=0.2)
    with pytest.raises(dlock.Unavailable) as e:
        locker.lock("res", ttl=10).acquire(blocking=False)
    assert why in str(e.value) and f"127.0.0.1:{s.tls_port}" in str(e.value)
    assert holder(s.conn(), "res") is None


def test_asyncio_over_tls(tls_server, certs):
    import asyncio

    import dlock.asyncio
    import redis.asyncio

    s = tls_server(client_certs=True)
    plain = s.conn()

    async def main():
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=s.tls_port, ssl=True, ssl_ca_certs=certs("ca.crt"),
            ssl_check_hostname=True, ssl_certfile=certs("client.crt"), ssl_keyfile=certs("client.key"),
        )
        locker = dlock.asyncio.Locker(client)
        async with locker.lock("res", ttl=10, blocking=False) as lease:
            assert holder(plain, "res") == (lease.token, lease.fence)
        await client.aclose()

    asyncio.run(main())
    assert holder(plain, "res") is None


def test_a_cluster_over_tls(tls_server, certs):
    """One node holding every slot, its bus on TLS: the nodes dlock finds
    through the slot map (by their TLS port, which ``CLUSTER SLOTS`` names
    to a TLS client) are reached with the client's TLS settings."""
    s = tls_server(client_certs=True, extra=("--cluster-enabled", "yes", "--tls-cluster", "yes"))
    plain = s.conn()
    plain.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    wait_until(10, "cluster state ok", lambda: b"cluster_state:ok" in plain.execute_command("CLUSTER", "INFO"))
    client = redis.cluster.RedisCluster(
        host="127.0.0.1", port=s.tls_port, ssl=True, ssl_ca_certs=certs("ca.crt"), ssl_check_hostname=True,
        ssl_certfile=certs("client.crt"), ssl_keyfile=certs("client.key"), socket_timeout=5,
    )
    locker = dlock.Locker(client)
    with locker.lock("{job}:a", ttl=10, blocking=False) as lease:
        assert holder(plain, "{job}:a") == (lease.token, lease.fence)
    assert holder(plain, "{job}:a") is None
    client.close()
