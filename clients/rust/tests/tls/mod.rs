//! TLS (`rediss://`) against real servers listening with TLS, on
//! certificates made per test by `openssl` (`certs.rs`): grants over TLS,
//! mutual TLS, and the refusals (an unknown CA, a wrong name, a missing
//! client certificate, bad files) in the library and the `dlock` tool.
//!
//! The servers are `$DLOCK_TLS_SERVER`, else `redis-server` from the PATH
//! (Debian's is built with TLS; the builds under test-matrix may not be:
//! TLS is the server's own transport, the module is the same). Each also
//! listens without TLS, for the harness and for reading what the tests
//! did; the client under test uses only the TLS port.

mod certs;
mod cluster;
use crate::common;
mod library;
mod tool;

use certs::Certs;
use common::Server;
use dlock_client::TlsSettings;

/// A server listening with TLS on `tls_port` too.
pub struct TlsServer {
    pub server: Server,
    pub tls_port: u16,
}

impl TlsServer {
    /// With the server certificate `cert` (`server`: for localhost and
    /// 127.0.0.1; `misnamed`: for db.example), client certificates
    /// required or not (`tls-auth-clients yes|no`).
    pub fn start(certs: &Certs, cert: &str, client_certs_required: bool) -> TlsServer {
        TlsServer::start_with(certs, cert, client_certs_required, &[])
    }

    /// [`TlsServer::start`] with more server arguments.
    pub fn start_with(
        certs: &Certs,
        cert: &str,
        client_certs_required: bool,
        extra: &[&str],
    ) -> TlsServer {
        let binary = std::env::var_os("DLOCK_TLS_SERVER").unwrap_or_else(|| "redis-server".into());
        let mut last = String::new();
        // The port is free when asked for and taken by the server a moment
        // later: another process may take it in between.
        for _ in 0..5 {
            let tls_port = free_port();
            let mut builder = Server::builder();
            for a in extra {
                builder = builder.arg(*a);
            }
            let started = builder
                .binary(binary.clone())
                .arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(certs.path(&format!("{cert}.crt")).display().to_string())
                .arg("--tls-key-file")
                .arg(certs.path(&format!("{cert}.key")).display().to_string())
                .arg("--tls-ca-cert-file")
                .arg(certs.path("ca.crt").display().to_string())
                .arg("--tls-auth-clients")
                .arg(if client_certs_required { "yes" } else { "no" })
                .try_start();
            match started {
                Ok(server) => return TlsServer { server, tls_port },
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{last}")
    }

    /// `rediss://HOST:PORT/` of the TLS port.
    pub fn url(&self, host: &str) -> String {
        format!("rediss://{host}:{}/", self.tls_port)
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The CA of `certs`, and its client certificate when `client`.
pub fn settings(certs: &Certs, client: bool) -> TlsSettings {
    let tls = TlsSettings::new().ca_file(certs.path("ca.crt")).unwrap();
    if client {
        tls.client_cert_files(certs.path("client.crt"), certs.path("client.key"))
            .unwrap()
    } else {
        tls
    }
}
