//! Smoke tests of the test harness itself; they use no dlock commands.
//! By default the servers load the module (so this also proves it loads next
//! to RDB save/restore and replication); set DLOCK_HARNESS_NO_MODULE=1 to
//! check the harness alone with a plain redis-server.
use crate::common;

use common::{connect_within, info_field, wait_until, Server, ServerBuilder};
use redis::Commands;
use std::time::Duration;

fn builder() -> ServerBuilder {
    if std::env::var_os("DLOCK_HARNESS_NO_MODULE").is_some() {
        Server::builder().without_module()
    } else {
        Server::builder()
    }
}

#[test]
fn ping_set_and_survive_restart() {
    let mut s = builder().start();
    let mut c = s.conn();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    let _: () = c.set("k", "v").unwrap();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let old_pid = s.pid();

    s.kill9();
    s.restart();
    assert_ne!(s.pid(), old_pid);
    let v: Option<String> = s.conn().get("k").unwrap();
    assert_eq!(v.as_deref(), Some("v"));
}

#[test]
fn plain_server_without_module() {
    let s = Server::builder().without_module().start();
    let mut c = s.conn_resp3();
    assert_eq!(
        info_field(&mut c, "server", "tcp_port"),
        Some(s.port().to_string())
    );
    assert!(
        !s.log().contains("Module '"),
        "no module expected:\n{}",
        s.log()
    );
}

#[test]
fn later_args_override_defaults() {
    let mut s = builder().arg("--appendonly").arg("yes").start();
    let mut c = s.conn();
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg, ["appendonly", "yes"]);
    // With AOF on, a graceful restart keeps writes even without SAVE.
    let _: () = c.set("k", "aof").unwrap();
    s.restart();
    let v: Option<String> = s.conn().get("k").unwrap();
    assert_eq!(v.as_deref(), Some("aof"));
}

#[test]
fn replica_receives_writes() {
    let master = builder().start();
    let replica = builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(10));
    let _: () = master.conn().set("rk", "rv").unwrap();
    let mut rc = replica.conn();
    wait_until(Duration::from_secs(5), "key to replicate", || {
        rc.get::<_, Option<String>>("rk").unwrap().as_deref() == Some("rv")
    });

    // The runtime variant: REPLICAOF on an already running server.
    let other = builder().start();
    other.replica_of(&master);
    other.wait_for_sync(Duration::from_secs(10));
    let v: Option<String> = other.conn().get("rk").unwrap();
    assert_eq!(v.as_deref(), Some("rv"));
}

#[test]
fn stop_and_cont() {
    let s = builder().start();
    let mut conn = s.conn();
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.stop();
    let frozen: redis::RedisResult<String> = redis::cmd("PING").query(&mut conn);
    assert!(frozen.is_err(), "a stopped server must not answer");
    // New connections must time out too rather than hang in the handshake.
    assert!(connect_within(&s.url(), Duration::from_millis(300)).is_err());
    s.cont();
    let pong: String = redis::cmd("PING").query(&mut s.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn failed_start_panics_with_log() {
    let err = std::panic::catch_unwind(|| {
        builder().arg("--loadmodule").arg("/nonexistent.so").start();
    })
    .expect_err("start must fail");
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("redis-server exited"), "{msg}");
    assert!(
        msg.contains("Can't load module from /nonexistent.so"),
        "{msg}"
    );
}

#[test]
fn shutdown_is_graceful_and_restartable() {
    let mut s = builder().start();
    s.stop(); // shutdown() must also cope with a frozen server
    s.shutdown();
    s.restart();
    let pong: String = redis::cmd("PING").query(&mut s.conn()).unwrap();
    assert_eq!(pong, "PONG");
}
