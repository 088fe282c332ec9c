//! A Redis Cluster over TLS (one node holding every slot, its bus and its
//! slot map on TLS too): the nodes the client and `dlock list` find from
//! the seed (by `CLUSTER SLOTS` and `CLUSTER SHARDS`, which name the TLS
//! port to a TLS client) are reached with the seed's TLS settings.

use crate::common::server::wait_until;
use crate::common::{holder, SEC};
use crate::tls::certs::Certs;
use crate::tls::{settings, TlsServer};
use dlock_client::Locker;

/// A cluster of one node, its slots all assigned and its state `ok`.
fn one_node_cluster(certs: &Certs) -> TlsServer {
    let s = TlsServer::start_with(
        certs,
        "server",
        true,
        &[
            "--cluster-enabled",
            "yes",
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
        ],
    );
    let mut c = s.server.conn();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut c)
        .unwrap();
    wait_until(10 * SEC, "cluster state ok", || {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
        info.contains("cluster_state:ok")
    });
    s
}

#[test]
fn a_cluster_over_tls() {
    let certs = Certs::new();
    let s = one_node_cluster(&certs);
    let locker = Locker::cluster_tls(&[s.url("127.0.0.1")], &settings(&certs, true)).unwrap();
    let g = locker.try_lock("{job}:a", 10 * SEC).unwrap().expect("free");
    assert_eq!(
        holder(&mut s.server.conn(), "{job}:a"),
        Some((g.token().to_string(), g.fence()))
    );

    let url = s.url("localhost");
    let (code, out, err) = crate::tls::tool::dlock(
        &certs,
        &crate::tls::tool::with_mutual_tls(&certs, &["list", "--url", &url]),
        &[],
        10 * SEC,
    );
    assert_eq!(code, 0, "{out}{err}");
    // Listed from the master `CLUSTER SHARDS` names, by its TLS port with
    // the seed's TLS settings (its plain port would not answer TLS).
    assert!(out.contains("{job}:a"), "{out}");
    g.release().unwrap();
}
