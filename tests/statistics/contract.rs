//! The reply in RESP2 and RESP3, RESET, `dlock.stats`, a replica, a
//! transaction that grants and releases in one turn, and bad input refused
//! with nothing changed.
use super::*;
use std::time::Duration;

const KINDS: [&str; 4] = ["total", "lock", "shared", "semaphore"];
const COUNTERS: [&str; 8] = [
    "grants",
    "waited",
    "handovers",
    "contended",
    "wait_timeouts",
    "releases",
    "expired",
    "revoked",
];

fn shape_holds(st: &Fields) {
    for top in ["since", "enabled", "memory"] {
        assert!(as_int(&st[top]) >= 0, "{top}");
    }
    for kind in KINDS {
        let f = fields(&st[kind]);
        assert_eq!(f.len(), COUNTERS.len() + 2, "{kind}: {f:?}");
        for name in COUNTERS {
            as_int(&f[name]);
        }
        for which in ["wait", "hold"] {
            let d = fields(&f[which]);
            assert_eq!(d.len(), 6);
            for name in ["count", "sum", "p50", "p90", "p99", "max"] {
                as_int(&d[name]);
            }
        }
    }
}

#[test]
fn the_reply_in_resp2_and_resp3() {
    let s = Server::start();
    let mut c2 = s.conn();
    acquire(&mut c2, "a", "t", 60_000).expect("free");
    let st = stats(&mut c2);
    shape_holds(&st);
    assert_eq!(as_int(&st["enabled"]), 1);
    let mut c3 = s.conn();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut c3).unwrap();
    let v: Value = redis::cmd("DLOCK.STATS").query(&mut c3).unwrap();
    assert!(matches!(v, Value::Map(_)), "{v:?}");
    shape_holds(&fields(&v));
    assert_eq!(figure(&fields(&v), "lock", "grants"), 1);
    let h: Value = redis::cmd("DLOCK.STATS").arg("HOT").query(&mut c3).unwrap();
    assert_eq!(h, Value::Array(vec![]), "nothing contended yet");
}

#[test]
fn reset_starts_again_and_the_config_stops_counting() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "a", "t", 60_000).expect("free");
    assert!(acq(&mut c, "a", "u", 60_000, &[]).is_none());
    let before = stats(&mut c);
    std::thread::sleep(Duration::from_millis(5));
    let ok: String = redis::cmd("DLOCK.STATS")
        .arg("RESET")
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let after = stats(&mut c);
    assert!(as_int(&after["since"]) > as_int(&before["since"]));
    for kind in KINDS {
        for name in COUNTERS {
            assert_eq!(figure(&after, kind, name), 0, "{kind} {name}");
        }
    }
    assert!(hot(&mut c, "contended", 32).is_empty());
    assert_eq!(as_int(&after["memory"]), as_int(&before["memory"]));
    // The gauges are not statistics.
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_locks").as_deref(),
        Some("1")
    );

    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.stats")
        .arg("no")
        .query(&mut c)
        .unwrap();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dlock.stats")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["dlock.stats", "no"]);
    release(&mut c, "a", "t");
    acquire(&mut c, "b", "t", 60_000).expect("free");
    assert!(acq(&mut c, "b", "u", 60_000, &[]).is_none());
    let off = stats(&mut c);
    assert_eq!(as_int(&off["enabled"]), 0);
    assert_eq!(figure(&off, "total", "grants"), 0);
    assert_eq!(figure(&off, "total", "releases"), 0);
    assert!(hot(&mut c, "contended", 32).is_empty());
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.stats")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    release(&mut c, "b", "t");
    assert_eq!(figure(&stats(&mut c), "total", "releases"), 1);
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_stats_enabled").as_deref(),
        Some("1")
    );
}

#[test]
fn a_replica_counts_nothing_of_what_its_master_does() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(Duration::from_secs(30));
    let mut c = m.conn();
    acquire(&mut c, "a", "t", 60_000).expect("free");
    assert!(acq(&mut c, "a", "u", 60_000, &[]).is_none());
    release(&mut c, "a", "t");
    acquire(&mut c, "e", "t", 20).expect("free");
    let mut rc = r.conn();
    wait_until(
        Duration::from_secs(10),
        "the replica has the expiry",
        || figure(&stats(&mut c), "total", "expired") == 1 && !exists(&mut rc, "e"),
    );
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    let st = stats(&mut rc);
    for name in COUNTERS {
        assert_eq!(figure(&st, "total", name), 0, "{name}");
    }
    assert!(hot(&mut rc, "expired", 32).is_empty());
    assert_eq!(figure(&stats(&mut c), "total", "grants"), 2);
}

/// A grant, a refused request, a release and a reset in one event-loop
/// turn: each counted once, in order.
#[test]
fn one_transaction_counts_each_change_once() {
    let s = Server::start();
    let mut c = s.conn();
    let v: Value = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("x")
        .arg("t")
        .arg(60_000)
        .cmd("DLOCK.ACQUIRE")
        .arg("x")
        .arg("u")
        .arg(60_000)
        .cmd("DLOCK.RELEASE")
        .arg("x")
        .arg("t")
        .cmd("DLOCK.STATS")
        .cmd("DLOCK.STATS")
        .arg("RESET")
        .cmd("DLOCK.ACQUIRE")
        .arg("x")
        .arg("u")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    let Value::Array(replies) = v else {
        panic!("{v:?}")
    };
    let inside = fields(&replies[3]);
    assert_eq!(figure(&inside, "lock", "grants"), 1);
    assert_eq!(figure(&inside, "lock", "contended"), 1);
    assert_eq!(figure(&inside, "lock", "releases"), 1);
    let st = stats(&mut c);
    assert_eq!(figure(&st, "lock", "grants"), 1);
    assert_eq!(figure(&st, "lock", "releases"), 0);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "a", "t", 60_000).expect("free");
    assert!(acq(&mut c, "a", "u", 60_000, &[]).is_none());
    let before = stats(&mut c);
    let hot_before = hot(&mut c, "contended", 32);
    for (args, want) in [
        (
            &["HOT", "BY", "waits"][..],
            "ERR BY must be contended, wait or expired",
        ),
        (
            &["HOT", "COUNT", "0"],
            "ERR COUNT must be an integer from 1 to 32",
        ),
        (
            &["HOT", "COUNT", "33"],
            "ERR COUNT must be an integer from 1 to 32",
        ),
        (&["HOT", "BY"], "ERR syntax error"),
        (&["HOT", "BY", "wait", "BY", "wait"], "ERR syntax error"),
        (&["RESET", "now"], "ERR syntax error"),
        (&["TOP"], "ERR syntax error"),
    ] {
        let r: redis::RedisResult<Value> = redis::cmd("DLOCK.STATS").arg(args).query(&mut c);
        assert_eq!(err_of(r), want, "{args:?}");
    }
    assert_eq!(stats(&mut c), before);
    assert_eq!(hot(&mut c, "contended", 32), hot_before);
}

/// Reading is `@read`; a reset takes what the server's own reset takes
/// (`CONFIG RESETSTAT`, `SLOWLOG RESET`), so a monitoring user cannot wipe
/// the figures.
#[test]
fn a_reset_needs_the_servers_own_reset_permission() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "a", "t", 60_000).expect("free");
    for (user, extra) in [("mon", ""), ("admin", "+config|resetstat +slowlog|reset")] {
        let rules = format!("on >pw +dlock.stats +dlock.slowlog +info {extra}");
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg(rules.split_whitespace().collect::<Vec<_>>())
            .query(&mut c)
            .unwrap();
    }
    let mut mon = s.conn();
    let () = redis::cmd("AUTH")
        .arg("mon")
        .arg("pw")
        .query(&mut mon)
        .unwrap();
    assert_eq!(figure(&stats(&mut mon), "total", "grants"), 1);
    for (cmd, want) in [
        (
            "DLOCK.STATS",
            "NOPERM DLOCK.STATS RESET needs the permission to run CONFIG RESETSTAT",
        ),
        (
            "DLOCK.SLOWLOG",
            "NOPERM DLOCK.SLOWLOG RESET needs the permission to run SLOWLOG RESET",
        ),
    ] {
        let r: redis::RedisResult<Value> = redis::cmd(cmd).arg("RESET").query(&mut mon);
        assert_eq!(err_of(r), want);
    }
    assert_eq!(
        figure(&stats(&mut c), "total", "grants"),
        1,
        "nothing reset"
    );
    let mut admin = s.conn();
    let () = redis::cmd("AUTH")
        .arg("admin")
        .arg("pw")
        .query(&mut admin)
        .unwrap();
    for cmd in ["DLOCK.STATS", "DLOCK.SLOWLOG"] {
        let ok: String = redis::cmd(cmd).arg("RESET").query(&mut admin).unwrap();
        assert_eq!(ok, "OK");
    }
    assert_eq!(figure(&stats(&mut c), "total", "grants"), 0);
}
