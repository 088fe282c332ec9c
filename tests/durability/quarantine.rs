//! Restart quarantine and the configs around it: after a restart or an
//! unplanned promotion that may have lost acknowledged grants, new grants
//! wait until every lost lease must have ended.
use crate::common;

use common::lock::*;
use common::*;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- helpers

fn dlock_info(c: &mut redis::Connection, field: &str) -> String {
    info_field(c, "dlock", &format!("dlock_{field}")).unwrap_or_default()
}

fn ms_left(c: &mut redis::Connection) -> u64 {
    dlock_info(c, "quarantine_ms_left").parse().unwrap()
}

/// The error text of a refused ACQUIRE.
fn refusal(c: &mut redis::Connection, res: &str) -> String {
    let e = try_acquire(c, res, "newcomer", 1000).expect_err("grant must be refused in quarantine");
    format!("{}: {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

fn everysec() -> ServerBuilder {
    Server::builder().aof("everysec")
}

/// Grants a lock with `ttl`, makes sure it reached the AOF (everysec fsyncs
/// within a second; BGREWRITEAOF is not needed: a kill -9 loses at most the
/// last second, and the quarantine is about exactly that loss).
fn crash_after_grant(s: &mut Server, ttl: u64) -> i64 {
    let mut c = s.conn();
    let f = grant(&mut c, "held", "owner", ttl);
    // Let everysec reach the disk so that the lock itself survives.
    std::thread::sleep(Duration::from_millis(1200));
    s.kill9();
    s.restart();
    f
}

/// Fills the dataset so that loading it takes a noticeable time.
fn populate(c: &mut redis::Connection) {
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(500_000)
        .arg("filler")
        .arg(32)
        .query(c)
        .unwrap();
}

// ------------------------------------------------------------------ tests

#[test]
fn auto_quarantines_after_kill9_under_everysec() {
    let mut s = everysec().start();
    let fence = crash_after_grant(&mut s, 4000);
    let mut c = s.conn();
    let t0 = Instant::now();
    assert_eq!(dlock_info(&mut c, "previous_run"), "crashed");
    assert_eq!(dlock_info(&mut c, "quarantine_reason"), "restart");
    let left = ms_left(&mut c);
    assert!((2000..=4000).contains(&left), "quarantine left {left} ms");

    // A plain grant is refused with its own error prefix (not TRYAGAIN).
    let e = refusal(&mut c, "fresh");
    assert!(
        e.starts_with("QUARANTINE: dlock: new grants are refused for"),
        "{e}"
    );
    // The owner of a lock loaded from disk may re-acquire and extend it.
    assert_eq!(grant(&mut c, "held", "owner", 4000), fence);
    assert_eq!(extend(&mut c, "held", "owner", 4000), 1);

    // A waiter on a free resource queues and is granted when it ends.
    let url = s.url();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut w = connect_within(&url, Duration::from_secs(5)).unwrap();
        let r = acquire_wait(&mut w, "queued", "waiter", 1000, 10_000).unwrap();
        tx.send((r, Instant::now())).unwrap();
    });
    let (r, at) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("waiter answered");
    let waited = at - t0;
    assert!(
        r.is_some(),
        "waiter must be granted when the quarantine ends"
    );
    assert!(
        waited + Duration::from_millis(200) >= Duration::from_millis(left),
        "granted after {waited:?}, before the quarantine ({left} ms) ended"
    );
    assert_eq!(ms_left(&mut c), 0);
    assert!(grant(&mut c, "fresh", "after", 1000) > fence);
}

#[test]
fn fixed_quarantine_after_kill9_under_everysec() {
    let mut s = everysec()
        .arg("--dlock.restart-quarantine")
        .arg("1500")
        .start();
    crash_after_grant(&mut s, 60_000);
    let mut c = s.conn();
    let left = ms_left(&mut c);
    assert!((500..=1500).contains(&left), "fixed 1500 ms, left {left}");
    let contended = dlock_info(&mut c, "contended");
    assert!(refusal(&mut c, "fresh").starts_with("QUARANTINE"));
    assert_eq!(
        dlock_info(&mut c, "contended"),
        contended,
        "a refused ACQUIRE counts nothing"
    );
    wait_until(Duration::from_secs(5), "quarantine end", || {
        ms_left(&mut c) == 0
    });
    grant(&mut c, "fresh", "after", 1000);

    // Only the startup load is judged: a later load decides nothing again.
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(ms_left(&mut c), 0, "DEBUG RELOAD must not quarantine again");
    grant(&mut c, "fresh2", "after", 1000);
}

#[test]
fn no_quarantine_after_clean_shutdown() {
    let mut s = everysec().start();
    let mut c = s.conn();
    grant(&mut c, "held", "owner", 60_000);
    s.shutdown();
    s.restart();
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "previous_run"), "clean");
    assert_eq!(ms_left(&mut c), 0);
    grant(&mut c, "fresh", "t", 1000);
}

/// A clean shutdown that saved nothing loses this run's grants as a crash
/// does: without AOF, `save ""` (nothing written at shutdown) and
/// `SHUTDOWN NOSAVE` after a change since the last `SAVE`.
#[test]
fn a_shutdown_that_saves_nothing_is_not_clean() {
    for (save, nosave) in [("", false), ("3600 1", true)] {
        let mut s = Server::builder()
            .arg("--save")
            .arg(save)
            .arg("--dlock.max-ttl")
            .arg("60000")
            .start();
        let mut c = s.conn();
        let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
        grant(&mut c, "held", "owner", 60_000);
        // Stop without persisting the grant, through the same Shutdown event.
        let mut shutdown = redis::cmd("SHUTDOWN");
        if nosave {
            shutdown.arg("NOSAVE");
        }
        let _ = shutdown.query::<redis::Value>(&mut c);
        s.restart();
        let mut c = s.conn();
        assert_eq!(
            dlock_info(&mut c, "previous_run"),
            "unsaved",
            "save {save:?}"
        );
        let left = ms_left(&mut c);
        assert!(
            left > 50_000,
            "save {save:?}: quarantined for max-ttl, left {left}"
        );
        assert!(refusal(&mut c, "held").starts_with("QUARANTINE"));
    }
    // The same shutdown with everything saved is clean.
    let mut s = Server::builder().arg("--save").arg("3600 1").start();
    let mut c = s.conn();
    grant(&mut c, "held", "owner", 60_000);
    let _ = redis::cmd("SHUTDOWN")
        .arg("SAVE")
        .query::<redis::Value>(&mut c);
    s.restart();
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "previous_run"), "clean");
    assert_eq!(ms_left(&mut c), 0);
}

#[test]
fn no_quarantine_with_appendfsync_always() {
    let mut s = Server::builder().aof("always").start();
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "persistence_lossless"), "1");
    grant(&mut c, "held", "owner", 60_000);
    let mut c = s.crash_and_restart();
    assert_eq!(dlock_info(&mut c, "previous_run"), "crashed");
    assert_eq!(ms_left(&mut c), 0, "a lossless run loses no grant");
    grant(&mut c, "fresh", "t", 1000);
}

#[test]
fn nothing_persisted_is_unbounded_unless_max_ttl_is_set() {
    // No persistence at all: every grant is lost in a crash, and nothing
    // says how long they were.
    let mut s = Server::start();
    grant(&mut s.conn(), "lost", "owner", 60_000);
    let mut c = s.crash_and_restart();
    assert_eq!(dlock_info(&mut c, "quarantine_unbounded"), "1");
    assert_eq!(ms_left(&mut c), 0);
    assert!(
        s.log().contains("restart quarantine cannot be bounded"),
        "{}",
        s.log()
    );

    // With dlock.max-ttl the loss is bounded by it.
    let mut s = Server::builder()
        .module_arg("max-ttl")
        .module_arg("1000")
        .start();
    grant(&mut s.conn(), "lost", "owner", 1000);
    let mut c = s.crash_and_restart();
    let left = ms_left(&mut c);
    assert!((1..=1000).contains(&left), "max-ttl 1000, left {left}");
}

#[test]
fn handoff_is_refused_during_quarantine() {
    let mut s = everysec().start();
    crash_after_grant(&mut s, 3000);
    let mut c = s.conn();
    assert!(ms_left(&mut c) > 1000);
    // A waiter queues behind the loaded lock.
    let url = s.url();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut w = connect_within(&url, Duration::from_secs(5)).unwrap();
        let r = acquire_wait(&mut w, "held", "waiter", 1000, 10_000).unwrap();
        tx.send(r).unwrap();
    });
    wait_until(Duration::from_secs(5), "waiter queued", || {
        let v: Vec<redis::Value> = redis::cmd("DLOCK.INFO").arg("held").query(&mut c).unwrap();
        v.last() == Some(&redis::Value::Int(1))
    });
    // The owner releases: no handoff while quarantined.
    let n: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("held")
        .arg("owner")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "handed off in quarantine"
    );
    // A newcomer does not barge into the freed resource either.
    assert_eq!(try_acquire(&mut c, "held", "barger", 1000).unwrap(), None);
    // When it ends, the waiter gets the lock.
    let r = rx
        .recv_timeout(Duration::from_secs(6))
        .expect("granted after quarantine");
    assert!(r.is_some());
    assert_eq!(ms_left(&mut c), 0);
}

/// A waiter whose `WAIT` ran out while the quarantine held its handoff is
/// answered nil by the ACQUIRE that finds it, before that ACQUIRE decides:
/// with nobody else waiting the lock is free, and a newcomer gets the
/// quarantine's error, not nil (CHANGELOG 0.4.0). The `WAIT` runs out inside
/// a MULTI (`DEBUG SLEEP` longer than it), where no timer can answer the
/// waiter first.
#[test]
fn a_given_up_waiter_leaves_a_quarantined_lock_to_the_quarantine_error() {
    let mut s = everysec().start();
    crash_after_grant(&mut s, 30_000);
    let mut c = s.conn();
    assert!(ms_left(&mut c) > 10_000, "the quarantine lasts the test");
    let url = s.url();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut w = connect_within(&url, Duration::from_secs(5)).unwrap();
        let r = acquire_wait(&mut w, "held", "waiter", 1000, 500);
        tx.send(r).unwrap();
    });
    wait_until(Duration::from_secs(5), "waiter queued", || {
        info(&mut c, "held").is_some_and(|i| i.waiters == 1)
    });
    let queued = |c: &mut redis::Connection, cmd: &mut redis::Cmd| {
        let q: String = cmd.query(c).unwrap();
        assert_eq!(q, "QUEUED");
    };
    let _: () = redis::cmd("MULTI").query(&mut c).unwrap();
    queued(&mut c, redis::cmd("DLOCK.RELEASE").arg("held").arg("owner"));
    queued(&mut c, redis::cmd("DEBUG").arg("SLEEP").arg("0.7"));
    queued(
        &mut c,
        redis::cmd("DLOCK.ACQUIRE")
            .arg("held")
            .arg("barger")
            .arg(1000),
    );
    let e = redis::cmd("EXEC")
        .query::<redis::Value>(&mut c)
        .expect_err("the barger must be refused by the quarantine, not answered nil");
    assert_eq!(e.code(), Some("QUARANTINE"), "{e:?}");
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("waiter reply");
    assert_eq!(r.unwrap(), None, "the given-up waiter is answered nil");
    assert_eq!(info(&mut c, "held"), None, "nobody holds it, nobody waits");
}

#[test]
fn unplanned_promotion_quarantines_coordinated_does_not() {
    let quiet = |b: ServerBuilder| b.arg("--shutdown-timeout").arg("0");
    // Coordinated: the link is up when the replica is promoted.
    let master = quiet(Server::builder()).start();
    let replica = quiet(Server::builder().replica_of(&master)).start();
    replica.wait_for_sync(Duration::from_secs(10));
    let mut m = master.conn();
    grant(&mut m, "held", "owner", 2000);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let mut r = replica.conn();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    assert_eq!(ms_left(&mut r), 0, "coordinated promotion");
    grant(&mut r, "fresh", "t", 1000);

    // Unplanned: the master dies, then the replica is promoted.
    let mut master = quiet(Server::builder()).start();
    let replica = quiet(Server::builder().replica_of(&master)).start();
    replica.wait_for_sync(Duration::from_secs(10));
    let mut m = master.conn();
    grant(&mut m, "held", "owner", 2000);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
    master.kill9();
    let mut r = replica.conn();
    wait_until(
        Duration::from_secs(10),
        "replica sees the link down",
        || info_field(&mut r, "replication", "master_link_status").as_deref() == Some("down"),
    );
    std::thread::sleep(Duration::from_millis(50));
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let left = ms_left(&mut r);
    assert!(
        (1000..=2000).contains(&left),
        "unplanned promotion, left {left}"
    );
    assert_eq!(dlock_info(&mut r, "quarantine_reason"), "promotion");
    assert!(refusal(&mut r, "fresh").starts_with("QUARANTINE"));
    // The replicated lock is still its owner's.
    assert!(grant(&mut r, "held", "owner", 2000) > 0);
}

#[test]
fn configs_are_validated_and_settable() {
    let s = Server::builder()
        .module_arg("max-ttl")
        .module_arg("5000")
        .start();
    let mut c = s.conn();
    let e = try_acquire(&mut c, "r", "t", 5001).unwrap_err();
    assert_eq!(e.detail(), Some("ttl_ms is above dlock.max-ttl (5000)"));
    assert!(try_acquire(&mut c, "r", "t", 5000).unwrap().is_some());
    let e: redis::RedisResult<i64> = redis::cmd("DLOCK.EXTEND")
        .arg("r")
        .arg("t")
        .arg(9000)
        .query(&mut c);
    assert!(e.is_err());

    let set = |c: &mut redis::Connection, k: &str, v: &str| -> redis::RedisResult<()> {
        redis::cmd("CONFIG").arg("SET").arg(k).arg(v).query(c)
    };
    set(&mut c, "dlock.max-ttl", "0").unwrap();
    assert!(try_acquire(&mut c, "r2", "t", 999_999).unwrap().is_some());
    assert!(set(&mut c, "dlock.max-ttl", "-1").is_err());
    assert!(set(&mut c, "dlock.restart-quarantine", "soon").is_err());
    // Read back in the one written form, whatever the case or zeros given.
    for (given, shown) in [
        ("OFF", "off"),
        ("Auto", "auto"),
        ("0250", "250"),
        ("250", "250"),
    ] {
        set(&mut c, "dlock.restart-quarantine", given).unwrap();
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("dlock.restart-quarantine")
            .query(&mut c)
            .unwrap();
        assert_eq!(got, ["dlock.restart-quarantine", shown], "{given}");
    }
    set(&mut c, "dlock.max-token-length", "4").unwrap();
    let e = try_acquire(&mut c, "r3", "12345", 100).unwrap_err();
    assert_eq!(e.detail(), Some("token is longer than 4 bytes"));
    assert!(set(&mut c, "dlock.max-token-length", "0").is_err());
    for bad in ["-1", "1000001", "fast"] {
        assert!(set(&mut c, "dlock.observe-rate", bad).is_err(), "{bad}");
    }
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_observe_rate").unwrap(),
        "2000"
    );
    set(&mut c, "dlock.observe-rate", "0").unwrap();
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_observe_rate").unwrap(),
        "0"
    );
}

#[test]
fn a_loadmodule_setting_reads_back_in_its_written_form() {
    let s = Server::builder()
        .module_arg("restart-quarantine")
        .module_arg("OFF")
        .start();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dlock.restart-quarantine")
        .query(&mut s.conn())
        .unwrap();
    assert_eq!(got, ["dlock.restart-quarantine", "off"]);
}

#[test]
fn bad_module_arguments_fail_the_load() {
    let r = std::panic::catch_unwind(|| {
        Server::builder()
            .module_arg("restart-quarantine")
            .module_arg("sometimes")
            .start()
    });
    assert!(r.is_err(), "a bad loadmodule argument must fail the load");
}

#[test]
fn module_arguments_are_range_checked_like_config_set() {
    // The ranges CONFIG SET enforces; the server does not check the default
    // a loadmodule argument becomes, so the module must.
    for (name, value, range) in [
        ("max-token-length", "2000000", "from 1 to 1048576"),
        ("max-token-length", "0", "from 1 to 1048576"),
        ("max-ttl", "140737488355329", "from 0 to 140737488355328"),
        ("observe-rate", "1000001", "from 0 to 1000000"),
        ("observe-rate", "-1", "from 0 to 1000000"),
    ] {
        let started = Server::builder()
            .module_arg(name)
            .module_arg(value)
            .try_start();
        let Err(log) = started else {
            panic!("loadmodule ... {name} {value} must fail the load");
        };
        let why = format!("{name} must be an integer {range}");
        assert!(log.contains(&why), "{name} {value}: {log}");
    }

    // The extremes load, and a token of the longest length survives a
    // restart from RDB: the server loads what the range lets it grant.
    let mut s = Server::builder()
        .module_arg("max-token-length")
        .module_arg("1048576")
        .module_arg("max-ttl")
        .module_arg("140737488355328")
        .start();
    let mut c = s.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dlock.max-t*")
        .query(&mut c)
        .unwrap();
    let mut got: Vec<_> = got.chunks(2).map(|p| p.join(" ")).collect();
    got.sort();
    assert_eq!(
        got,
        [
            "dlock.max-token-length 1048576",
            "dlock.max-ttl 140737488355328"
        ]
    );
    let token = vec![b'x'; 1 << 20];
    let fence = grant(&mut c, "big", &token, 60_000);
    let e = try_acquire(&mut c, "other", &vec![b'x'; (1 << 20) + 1], 1000).unwrap_err();
    assert_eq!(e.detail(), Some("token is longer than 1048576 bytes"));
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    s.restart();
    let mut c = s.conn();
    assert_eq!(grant(&mut c, "big", &token, 60_000), fence);

    let s = Server::builder()
        .module_arg("max-token-length")
        .module_arg("1")
        .start();
    assert!(try_acquire(&mut s.conn(), "r", "ab", 1000).is_err());
}

/// What the first `DLOCK.ACQUIRE` answered once the server stopped replying
/// `-LOADING`, and how many `-LOADING` replies came before it. Connects to
/// `port` over and over until the server listens, and retries through
/// `-LOADING` and dropped connections; gives up after `within`.
fn first_answer_after_loading(port: u16, token: &str, within: Duration) -> (String, u32) {
    let url = format!("redis://127.0.0.1:{port}/");
    let end = Instant::now() + within;
    let mut loading = 0;
    while Instant::now() < end {
        let Ok(mut c) = connect_within(&url, Duration::from_secs(1)) else {
            thread::sleep(Duration::from_millis(2));
            continue;
        };
        loop {
            match try_acquire(&mut c, &format!("fresh-{token}"), token, 1000) {
                Ok(Some(fence)) => return (format!("fence {fence}"), loading),
                Ok(None) => return ("busy".into(), loading),
                Err(e) if e.kind() == redis::ErrorKind::BusyLoadingError => loading += 1,
                Err(e) if e.is_io_error() || e.is_connection_dropped() => break,
                Err(e) => {
                    let code = e.code().unwrap_or("").to_string();
                    return (format!("{code}: {}", e.detail().unwrap_or("")), loading);
                }
            }
            if Instant::now() >= end {
                break;
            }
        }
    }
    (format!("no answer within {within:?}"), loading)
}

#[test]
fn no_grant_before_the_quarantine_is_decided() {
    // RDB only, a crash, and enough data that loading takes a while: clients
    // retrying through -LOADING send their next ACQUIRE the moment loading
    // ends, before the first timer of the new run could fire.
    let mut s = Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("5000")
        .start();
    let mut c = s.conn();
    grant(&mut c, "held", "owner", 60_000);
    populate(&mut c);
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    drop(c);
    s.kill9();

    // The hammers start before the server does.
    let port = s.port();
    let hammers: Vec<_> = (0..3)
        .map(|i| {
            thread::spawn(move || {
                first_answer_after_loading(port, &format!("t{i}"), Duration::from_secs(30))
            })
        })
        .collect();
    s.respawn();
    let answers: Vec<_> = hammers.into_iter().map(|h| h.join().unwrap()).collect();
    s.wait_ready();
    for (answer, _) in &answers {
        assert!(
            answer.starts_with("QUARANTINE: dlock: new grants are refused"),
            "first answer after loading: {answer} (all: {answers:?})"
        );
    }
    // The hammers did reach the server while it was loading (otherwise this
    // test proved nothing).
    assert!(
        answers.iter().any(|(_, loading)| *loading > 0),
        "no -LOADING seen: {answers:?}"
    );
    let mut c = s.conn();
    let left = ms_left(&mut c);
    assert!((1..=5000).contains(&left), "quarantine left {left} ms");
    assert_eq!(dlock_info(&mut c, "quarantine_reason"), "restart");
}

#[test]
fn info_during_loading_does_not_decide_early() {
    // The base of the AOF says the run was lossy; its incremental part,
    // loaded last, says it became lossless (appendfsync always) before the
    // crash. Only all of the data decides: an INFO answered while loading
    // must not judge the half that is in.
    let mut s = everysec().start();
    let mut c = s.conn();
    populate(&mut c);
    grant(&mut c, "held", "owner", 60_000);
    rewrite_aof(&mut c);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("always")
        .query(&mut c)
        .unwrap();
    grant(&mut c, "later", "owner", 1000);
    assert_eq!(dlock_info(&mut c, "persistence_lossless"), "1");
    drop(c);
    s.kill9();

    let url = s.url();
    let asker = thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(30);
        let mut answered_while_loading = 0;
        while Instant::now() < end {
            let Ok(mut c) = connect_within(&url, Duration::from_secs(1)) else {
                thread::sleep(Duration::from_millis(2));
                continue;
            };
            let mut ask = || {
                redis::cmd("INFO")
                    .arg("persistence")
                    .arg("dlock")
                    .query::<String>(&mut c)
            };
            while let Ok(info) = ask() {
                if !info.contains("loading:1") {
                    return answered_while_loading;
                }
                answered_while_loading += 1;
            }
        }
        answered_while_loading
    });
    s.respawn();
    let answered_while_loading = asker.join().unwrap();
    s.wait_ready();
    assert!(answered_while_loading > 0, "no INFO answered while loading");
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "previous_run"), "crashed");
    assert_eq!(ms_left(&mut c), 0, "the crashed run ended lossless");
    grant(&mut c, "fresh", "t", 1000);
}

/// The incremental AOF file the server appends to now (the last one in its
/// manifest).
fn current_incr_aof(s: &Server) -> Vec<u8> {
    std::fs::read(current_incr_aof_path(s)).unwrap()
}

fn current_incr_aof_path(s: &Server) -> std::path::PathBuf {
    let dir = s.dir().join("appendonlydir");
    let manifest = std::fs::read_dir(&dir)
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".manifest"))
        .expect("AOF manifest");
    let manifest = std::fs::read_to_string(manifest).unwrap();
    let name = manifest
        .lines()
        // `file <name> seq <n> type i`; Redis 8.6 appends more fields
        // (`startoffset`, `endoffset`) after the type.
        .filter(|l| {
            l.split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w == ["type", "i"])
        })
        .filter_map(|l| l.split_whitespace().nth(1))
        .next_back()
        .unwrap_or_else(|| panic!("no incremental file in {manifest}"));
    dir.join(name)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// AOF without the RDB preamble: a grant and its release, then a rewrite
/// (by `rewrite`) while no lock exists, so the new base holds no lock and no
/// quarantine metadata; then a grant with a shorter TTL (nothing new to say,
/// so no metadata goes with it) and a crash.
fn grant_rewrite_grant_crash(s: &mut Server, rewrite: impl FnOnce(&mut redis::Connection)) {
    let mut c = s.conn();
    grant(&mut c, "first", "owner", 5000);
    assert_eq!(release(&mut c, "first", "owner"), 1);
    rewrite(&mut c);
    // The rewrite's metadata is in the file that now follows the new base.
    wait_until(SOON, "DLOCK.META in the new incremental AOF", || {
        contains(&current_incr_aof(s), "DLOCK.META")
    });
    grant(&mut c, "second", "owner", 3000);
    // Written (not necessarily fsynced: kill -9 keeps the page cache).
    wait_until(SOON, "the grant in the AOF", || {
        contains(&current_incr_aof(s), "second")
    });
    assert_eq!(dlock_info(&mut c, "longest_ttl"), "5000");
    drop(c);
    s.kill9();
    s.restart();
}

fn no_preamble(fsync: &str) -> ServerBuilder {
    Server::builder()
        .aof(fsync)
        .arg("--aof-use-rdb-preamble")
        .arg("no")
}

#[test]
fn rewrite_without_preamble_keeps_the_metadata_under_always() {
    // dlock.max-ttl: without the metadata, "unknown durability" would
    // quarantine for it.
    let mut s = no_preamble("always")
        .arg("--dlock.max-ttl")
        .arg("60000")
        .start();
    grant_rewrite_grant_crash(&mut s, rewrite_aof);
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "previous_run"), "crashed");
    assert_eq!(dlock_info(&mut c, "longest_ttl"), "5000");
    assert_eq!(ms_left(&mut c), 0, "an always run loses no grant");
    assert_eq!(held(&mut c, "second").token, b"owner");
    grant(&mut c, "fresh", "t", 1000);
}

#[test]
fn rewrite_without_preamble_keeps_the_metadata_under_everysec() {
    let mut s = no_preamble("everysec").start();
    grant_rewrite_grant_crash(&mut s, rewrite_aof);
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "quarantine_unbounded"), "0");
    assert_eq!(dlock_info(&mut c, "longest_ttl"), "5000");
    assert_eq!(dlock_info(&mut c, "quarantine_reason"), "restart");
    let left = ms_left(&mut c);
    assert!(
        (1..=5000).contains(&left),
        "bounded by 5000 ms, left {left}"
    );
}

#[test]
fn automatic_rewrite_without_preamble_keeps_the_metadata() {
    let mut s = no_preamble("always")
        .arg("--dlock.max-ttl")
        .arg("60000")
        .start();
    grant_rewrite_grant_crash(&mut s, |c| {
        let before: u64 = info_field(c, "persistence", "aof_rewrites")
            .unwrap()
            .parse()
            .unwrap();
        let set = |c: &mut redis::Connection, k: &str, v: &str| {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(k)
                .arg(v)
                .query(c)
                .unwrap();
        };
        // Any growth over the (empty) base starts a rewrite from serverCron.
        set(c, "auto-aof-rewrite-min-size", "1");
        set(c, "auto-aof-rewrite-percentage", "1");
        wait_until(Duration::from_secs(10), "an automatic rewrite", || {
            info_field(c, "persistence", "aof_rewrites")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > before)
        });
        set(c, "auto-aof-rewrite-percentage", "0");
        wait_until(Duration::from_secs(20), "the rewrite to finish", || {
            info_field(c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
        });
    });
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "longest_ttl"), "5000");
    assert_eq!(ms_left(&mut c), 0, "an always run loses no grant");
}

#[test]
fn rewrite_during_paused_writes_gets_the_metadata_after_the_pause() {
    // Nothing may be propagated while writes are paused (Redis asserts on
    // it); the metadata follows when the pause ends.
    let s = no_preamble("always").start();
    let mut c = s.conn();
    grant(&mut c, "first", "owner", 5000);
    assert_eq!(release(&mut c, "first", "owner"), 1);
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    rewrite_aof(&mut c);
    ping(&mut c);
    assert!(!contains(&current_incr_aof(&s), "DLOCK.META"));
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut c).unwrap();
    wait_until(SOON, "DLOCK.META in the new incremental AOF", || {
        contains(&current_incr_aof(&s), "DLOCK.META")
    });
    ping(&mut c);
}

// ------------------------------------------- a running quarantine persists

/// The quarantine now left on `c`, as an absolute end on this clock.
fn quarantine_end(c: &mut redis::Connection) -> Instant {
    let asked = Instant::now();
    asked + Duration::from_millis(ms_left(c))
}

/// After a restart during a quarantine that ends at `end`: still refused
/// until then (within `slack`), with the reason `resumed`; granted after.
fn still_quarantined_until(c: &mut redis::Connection, end: Instant, slack: Duration) {
    let now_end = quarantine_end(c);
    assert!(
        now_end + slack >= end && now_end <= end + slack,
        "the quarantine must end within {:?} of the original end ({:?} late, {:?} early)",
        slack,
        now_end.saturating_duration_since(end),
        end.saturating_duration_since(now_end)
    );
    assert!(ms_left(c) > 0, "the running quarantine was forgotten");
    assert_eq!(dlock_info(c, "quarantine_reason"), "resumed");
    assert!(refusal(c, "fresh").starts_with("QUARANTINE"));
    wait_until(
        end.saturating_duration_since(Instant::now()) + Duration::from_secs(3),
        "quarantine end",
        || ms_left(c) == 0,
    );
    assert!(
        Instant::now() + slack >= end,
        "the quarantine ended {:?} before its end",
        end.saturating_duration_since(Instant::now())
    );
    assert!(grant(c, "fresh", "after", 1000) > 0);
}

/// The colleague's reproduction: a promoted replica's quarantine, then a
/// crash of the promoted node (lossless: appendfsync always, so no restart
/// quarantine of its own). The grants its quarantine protects against are
/// still out there: it must resume until its original end.
#[test]
fn a_promotion_quarantine_survives_a_crash_of_the_promoted_node() {
    let quiet = |b: ServerBuilder| b.aof("always").arg("--shutdown-timeout").arg("0");
    let mut master = quiet(Server::builder()).start();
    // REPLICAOF at run time: the restart below starts it without it.
    let mut replica = quiet(Server::builder()).start();
    replica.replica_of(&master);
    replica.wait_for_sync(Duration::from_secs(10));
    let mut m = master.conn();
    grant(&mut m, "held", "owner", 4000);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
    master.kill9();
    let mut r = replica.conn();
    wait_until(
        Duration::from_secs(10),
        "replica sees the link down",
        || info_field(&mut r, "replication", "master_link_status").as_deref() == Some("down"),
    );
    thread::sleep(Duration::from_millis(50));
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let left = ms_left(&mut r);
    assert!((3000..=4000).contains(&left), "promotion, left {left}");
    let end = quarantine_end(&mut r);
    assert_eq!(dlock_info(&mut r, "quarantine_reason"), "promotion");
    thread::sleep(Duration::from_millis(200));
    drop(r);
    replica.kill9();
    replica.restart();
    let mut r = replica.conn();
    assert_eq!(dlock_info(&mut r, "previous_run"), "crashed");
    assert_eq!(dlock_info(&mut r, "persistence_lossless"), "1");
    still_quarantined_until(&mut r, end, Duration::from_millis(300));
}

/// A clean shutdown and restart during a restart quarantine: the restart
/// decides "clean", but the lost grants of the crash before are still
/// believed until the quarantine's end.
#[test]
fn a_restart_quarantine_survives_a_clean_restart() {
    let mut s = everysec().start();
    crash_after_grant(&mut s, 4000);
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "quarantine_reason"), "restart");
    let left = ms_left(&mut c);
    assert!((2000..=4000).contains(&left), "restart, left {left}");
    let end = quarantine_end(&mut c);
    drop(c);
    s.shutdown();
    s.restart();
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "previous_run"), "clean");
    still_quarantined_until(&mut c, end, Duration::from_millis(300));
}

/// `CONFIG SET dlock.restart-quarantine off` lifts the quarantine, and the
/// persisted end with it: a restart (with `auto` again) does not bring it
/// back.
#[test]
fn a_lifted_quarantine_stays_lifted_after_a_restart() {
    let mut s = everysec().start();
    crash_after_grant(&mut s, 5000);
    let mut c = s.conn();
    assert!(ms_left(&mut c) > 2000);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.restart-quarantine")
        .arg("off")
        .query(&mut c)
        .unwrap();
    assert_eq!(ms_left(&mut c), 0);
    // The lifted end (0) is written from a timer, then fsynced.
    thread::sleep(Duration::from_millis(300));
    drop(c);
    s.shutdown();
    s.restart();
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "previous_run"), "clean");
    assert_eq!(dlock_info(&mut c, "restart_quarantine"), "auto");
    assert_eq!(ms_left(&mut c), 0, "a lifted quarantine came back");
    grant(&mut c, "fresh", "t", 1000);
}

/// The lift and a grant in one event-loop turn (`MULTI`/`EXEC`), then a
/// crash before the metadata timer can fire: the grant itself must carry
/// the lifted end (0) into the AOF ahead of it, or the restart would resume
/// the lifted quarantine (and the grant would stand inside it).
#[test]
fn a_lift_and_a_grant_in_one_turn_survive_a_crash() {
    let mut s = everysec().start();
    crash_after_grant(&mut s, 5000);
    let mut c = s.conn();
    assert!(ms_left(&mut c) > 2000);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("always")
        .query(&mut c)
        .unwrap();
    // The durability change is itself news for the metadata: an EXTEND of
    // the surviving lock writes it (with the running quarantine's end), so
    // only the lift can make the grant below carry metadata again (its TTL
    // is no longer than the longest, which would be news too).
    let extended: i64 = redis::cmd("DLOCK.EXTEND")
        .arg("held")
        .arg("owner")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(extended, 1);
    let (_, fence): (String, i64) = redis::pipe()
        .atomic()
        .cmd("CONFIG")
        .arg("SET")
        .arg("dlock.restart-quarantine")
        .arg("off")
        .cmd("DLOCK.ACQUIRE")
        .arg("fresh")
        .arg("t")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    drop(c);
    s.kill9();
    s.restart();
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "restart_quarantine"), "auto");
    assert_eq!(ms_left(&mut c), 0, "a lifted quarantine came back");
    assert_eq!(acquire(&mut c, "fresh", "t", 1000), Some(fence));
}

/// An AOF written by an older dlock has `DLOCK.META` with two arguments
/// (no quarantine end): it still loads and still says what it said.
#[test]
fn a_two_argument_meta_still_loads() {
    let mut s = no_preamble("always").start();
    grant(&mut s.conn(), "held", "owner", 1000);
    s.shutdown();
    // As an older build wrote it: a lossy run whose longest TTL was 7 s.
    let path = current_incr_aof_path(&s);
    let mut aof = std::fs::read(&path).unwrap();
    aof.extend_from_slice(b"*3\r\n$10\r\nDLOCK.META\r\n$4\r\n7000\r\n$1\r\n1\r\n");
    std::fs::write(&path, aof).unwrap();
    s.restart();
    let mut c = s.conn();
    assert_eq!(dlock_info(&mut c, "previous_run"), "clean");
    assert_eq!(dlock_info(&mut c, "longest_ttl"), "7000");
    assert_eq!(ms_left(&mut c), 0);
    // Judged by the loaded (lossy) durability after a crash.
    drop(c);
    let mut c = s.crash_and_restart();
    assert_eq!(dlock_info(&mut c, "quarantine_reason"), "restart");
    let left = ms_left(&mut c);
    assert!((5000..=7000).contains(&left), "old META, left {left}");
}

/// The replica sees its master's death while module timers of its own are
/// due (hold guards of resources with several holds, all due when it wakes
/// from a pause), and a fast operator promotes it at once. The loss must
/// still count: the module hears of the link going down before it reads
/// that `REPLICAOF NO ONE`, however its timers are scheduled.
#[test]
fn a_promotion_right_after_the_link_drops_is_unplanned_with_timers_due() {
    let quiet = |b: ServerBuilder| b.arg("--shutdown-timeout").arg("0");
    for round in 0..8 {
        let mut master = quiet(Server::builder()).start();
        let replica = quiet(Server::builder().replica_of(&master)).start();
        replica.wait_for_sync(Duration::from_secs(10));
        let mut m = master.conn();
        // Guards on the replica, due while it is stopped.
        for i in 0..20 {
            let key = format!("g{i}");
            for (token, ttl) in [("r1", 150), ("r2", 200)] {
                let fence: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
                    .arg(&key)
                    .arg(token)
                    .arg(ttl)
                    .arg("SHARED")
                    .query(&mut m)
                    .unwrap();
                assert!(fence.is_some());
            }
        }
        grant(&mut m, "held", "owner", 3000);
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
        assert_eq!(acked, 1);
        replica.stop();
        std::thread::sleep(Duration::from_millis(300));
        master.kill9();
        replica.cont();
        let mut r = replica.conn();
        wait_until(
            Duration::from_secs(10),
            "replica sees the link down",
            || info_field(&mut r, "replication", "master_link_status").as_deref() == Some("down"),
        );
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut r)
            .unwrap();
        assert_eq!(
            dlock_info(&mut r, "quarantine_reason"),
            "promotion",
            "round {round}: an unplanned promotion passed for a coordinated one\n{}",
            replica.log()
        );
    }
}
