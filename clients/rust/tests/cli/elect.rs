//! `dlock elect` (run a command while leading) and `dlock observe` (who
//! leads, one line per change).

use crate::cli::{alive, dlock, run, wait_until, Dir, Dlock, Server, SEC};

#[test]
fn the_leader_runs_its_command_and_the_standby_takes_over_with_a_higher_term() {
    let server = Server::start();
    let dir = Dir::new();
    let job = |n: &str| {
        format!(
            "echo $DLOCK_TERM > {term}; touch {started}; sleep 1",
            term = dir.sh(&format!("term{n}")),
            started = dir.sh(&format!("started{n}")),
        )
    };
    let mut one = Dlock::spawn(
        dlock(&server.url())
            .args(["elect", "--id", "one", "--ttl", "3s", "sched", "--"])
            .args(["sh", "-c", &job("1")]),
        &dir,
        "one",
    );
    wait_until(20 * SEC, "one leads", || dir.exists("started1"));
    let mut watch = Dlock::spawn(
        dlock(&server.url()).args(["observe", "--count", "3", "sched"]),
        &dir,
        "watch",
    );
    let mut two = Dlock::spawn(
        dlock(&server.url())
            .args(["elect", "--id", "two", "--ttl", "3s", "sched", "--"])
            .args(["sh", "-c", &job("2")]),
        &dir,
        "two",
    );
    assert_eq!(one.wait(20 * SEC), 0, "{}", one.stderr());
    assert_eq!(two.wait(20 * SEC), 0, "{}", two.stderr());
    let (t1, t2) = (dir.read("term1"), dir.read("term2"));
    assert!(t2.parse::<u64>().unwrap() > t1.parse::<u64>().unwrap());
    assert_eq!(watch.wait(20 * SEC), 0, "{}", watch.stderr());
    assert_eq!(
        watch.stdout(),
        format!("leader one term {t1}\nleader two term {t2}\nnobody\n")
    );
}

#[test]
fn a_lost_leadership_ends_the_command_with_79() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "echo $$ > {group}; touch {started}; sleep 60",
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url())
            // --no-session: the DEL below is seen by the next renewal.
            .args(["elect", "--no-session", "--ttl", "3s", "--grace", "500ms"])
            .args(["sched", "--"])
            .args(["sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let group = dir.wait_number("group", 5 * SEC) as i32;
    let mut c = server.conn();
    let _: i64 = redis::cmd("DEL").arg("sched").query(&mut c).unwrap();
    assert_eq!(d.wait(10 * SEC), 79, "{}", d.stderr());
    wait_until(5 * SEC, "the group ended", || !alive(group));
}

#[test]
fn observe_prints_json_and_refuses_bad_usage() {
    let server = Server::start();
    let dir = Dir::new();
    let (code, out, err) = run(
        dlock(&server.url()).args(["observe", "--json", "--count", "1", "x"]),
        &dir,
        10 * SEC,
    );
    assert_eq!((code, out.as_str()), (0, "{\"leader\":null}\n"), "{err}");
    let mut c = server.conn();
    let fence: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("x")
        .arg("me/123")
        .arg(30_000)
        .query(&mut c)
        .unwrap();
    let (code, out, _) = run(
        dlock(&server.url()).args(["observe", "--json", "--count", "1", "x"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0);
    assert_eq!(
        out,
        format!("{{\"leader\":\"me\",\"term\":{fence},\"token\":\"me/123\"}}\n")
    );
    for args in [
        &["observe"][..],
        &["observe", "--count", "0", "x"],
        &["observe", "x", "y"],
        &["elect", "--shared", "x", "--", "true"],
        &["elect", "--id", "a/b", "x", "--", "true"],
        &["elect", "x"],
    ] {
        let (code, _, err) = run(dlock(&server.url()).args(args), &dir, 10 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
    }
    let two = ["--url", &server.url(), "--url", &crate::cli::dead_url()];
    let (code, _, err) = run(
        dlock(&server.url()).args(two).args(["observe", "x"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 64, "{err}");
}

#[test]
fn a_leadership_whose_server_is_killed_exits_79() {
    crate::cli::lease::renewals_stop_and_dlock_exits_79("elect", crate::cli::lease::Outage::Killed);
}

#[test]
fn a_leadership_whose_server_is_stopped_exits_79() {
    crate::cli::lease::renewals_stop_and_dlock_exits_79(
        "elect",
        crate::cli::lease::Outage::Stopped,
    );
}

/// `observe` follows one holder: on a semaphore held once it shows that
/// holder as the leader; on a shared lock two readers hold it names no
/// leader and exits 70 with one readable line (not the reply's dump).
#[test]
fn observe_on_a_shared_lock_and_a_semaphore() {
    let server = Server::start();
    let dir = Dir::new();
    let mut c = server.conn();
    for (token, extra) in [("r1", "SHARED"), ("r2", "SHARED")] {
        let _: i64 = redis::cmd("DLOCK.ACQUIRE")
            .arg("config")
            .arg(token)
            .arg(60_000)
            .arg(extra)
            .query(&mut c)
            .unwrap();
    }
    let fence: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("gpu")
        .arg("p1")
        .arg(60_000)
        .arg("LIMIT")
        .arg(3)
        .query(&mut c)
        .unwrap();
    let (code, out, err) = run(
        dlock(&server.url()).args(["observe", "--count", "1", "gpu"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(
        (code, out),
        (0, format!("leader p1 term {fence}\n")),
        "{err}"
    );
    for json in [false, true] {
        let mut cmd = dlock(&server.url());
        cmd.arg("observe");
        if json {
            cmd.arg("--json");
        }
        let (code, out, err) = run(cmd.args(["--count", "1", "config"]), &dir, 10 * SEC);
        assert_eq!((code, out.as_str()), (70, ""), "{err}");
        assert_eq!(
            err,
            "dlock: cannot observe config: server error: no leader: 2 holders share the \
             resource (a rwlock), an election's lock has one\n"
        );
    }
}

#[test]
fn a_leader_with_prefer_hands_the_lead_to_that_candidate_and_exits_0() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!("touch {started}; sleep 60", started = dir.sh("started1"));
    let mut one = Dlock::spawn(
        dlock(&server.url())
            .args(["elect", "--id", "one", "--prefer", "two", "--ttl", "3s"])
            .args(["--grace", "500ms", "sched", "--"])
            .args(["sh", "-c", &script]),
        &dir,
        "one",
    );
    wait_until(20 * SEC, "one leads", || dir.exists("started1"));
    let job = format!("echo $DLOCK_TERM > {term}", term = dir.sh("term2"));
    let mut two = Dlock::spawn(
        dlock(&server.url())
            .args([
                "elect", "--id", "two", "--prefer", "two", "--ttl", "3s", "sched",
            ])
            .args(["--", "sh", "-c", &job]),
        &dir,
        "two",
    );
    assert_eq!(one.wait(20 * SEC), 0, "{}", one.stderr());
    assert!(
        one.stderr()
            .contains("handed the lead on sched over to two"),
        "{}",
        one.stderr()
    );
    assert_eq!(two.wait(20 * SEC), 0, "{}", two.stderr());
    assert!(dir.read("term2").trim().parse::<u64>().unwrap() > 0);
    // A bad id is a usage error.
    let bad = ["elect", "--prefer", "a/b", "x", "true"];
    let (code, _, err) = run(dlock(&server.url()).args(bad), &dir, 20 * SEC);
    assert_eq!(code, 64, "{err}");
}
