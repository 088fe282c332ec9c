//! `dlock metrics`: its output read by a real Prometheus text parser
//! (Python's prometheus_client, in clients/python/.venv, which `make test`
//! builds before these suites), printed once and served over HTTP, after
//! grants, contention, a wait that timed out, a handoff and an expiry; a
//! resource name that needs escaping; a server that cannot be reached;
//! every master of a cluster.

use crate::cli::{dead_url, dlock, run, wait_until, Dir, Dlock, SEC};
use crate::common::server::cluster::Cluster;
use crate::common::server::workspace_root;
use crate::common::{waiters, Server};
use dlock_client::Locker;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Parses stdin with prometheus_client and checks what argv[1] (JSON) asks:
/// `families` {name: type}, `equal` [[sample, labels, value]], `positive`
/// [[sample, labels]].
const CHECK: &str = r##"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
text = sys.stdin.read()
want = json.loads(sys.argv[1])
families = {f.name: f for f in text_string_to_metric_families(text)}
# The parser names a counter's family without _total and adds _total to a
# sample that lacks it: the text itself is checked for that.
for line in text.splitlines():
    if line.startswith("# TYPE ") and line.endswith(" counter"):
        name = line.split(" ")[2]
        assert name.endswith("_total"), "counter without _total: " + line
samples = [s for f in families.values() for s in f.samples]
def value(name, labels):
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, "%s%s: %d samples in\n%s" % (name, labels, len(found), text)
    return found[0]
for name, kind in want["families"].items():
    assert name in families, "no family %s in\n%s" % (name, text)
    assert families[name].type == kind, "%s is a %s" % (name, families[name].type)
for name, labels, v in want["equal"]:
    got = value(name, labels)
    assert got == v, "%s%s = %r, not %r" % (name, labels, got, v)
for name, labels in want["positive"]:
    assert value(name, labels) > 0, "%s%s is not above 0" % (name, labels)
print("parsed %d families" % len(families))
"##;

/// A JSON string.
fn js(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Labels as a JSON object.
fn labels(pairs: &[(&str, &str)]) -> String {
    let fields: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}:{}", js(k), js(v)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// Runs [`CHECK`] on `text`; panics with what it said unless it passed.
fn check_with_prometheus_client(text: &str, want: &str) {
    let python = workspace_root().join("clients/python/.venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: build it with `make clients/python/.venv/.installed` \
         (`make test` does before these suites)",
        python.display()
    );
    let mut child = Command::new(&python)
        .args(["-c", CHECK, want])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let end = Instant::now() + 60 * SEC;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("python still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        status.success(),
        "prometheus_client refused it: {err}\n{out}\nthe text:\n{text}"
    );
}

fn acquire(
    c: &mut redis::Connection,
    res: &[u8],
    token: &str,
    ttl: u64,
    extra: &[&str],
) -> Option<u64> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(token)
        .arg(ttl)
        .arg(extra)
        .query(c)
        .unwrap()
}

fn release(c: &mut redis::Connection, res: &[u8], token: &str) {
    let n: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(res)
        .arg(token)
        .query(c)
        .unwrap();
    assert_eq!(n, 1);
}

/// The name that needs every escape of a label value, and a byte that is
/// not UTF-8; and its label value.
const ODD: &[u8] = b"q\"uo\\te\nx\xff";
const ODD_LABEL: &str = "q\"uo\\te\nx\u{fffd}";

#[test]
fn printed_once_and_parsed_by_prometheus_client() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let node = format!("127.0.0.1:{}", server.port());
    let mut c = server.conn();
    // job:a: held, tried twice, a waiter handed it after a second WAIT
    // timed out behind it: the waiter's wait lasts at least those 50 ms
    // (the server's timeout, no sleep here), and so does tok-a's hold.
    acquire(&mut c, b"job:a", "tok-a", 30_000, &[]).unwrap();
    for _ in 0..2 {
        assert_eq!(acquire(&mut c, b"job:a", "tok-b", 30_000, &[]), None);
    }
    let mut c2 = server.conn();
    let waiter =
        std::thread::spawn(move || acquire(&mut c2, b"job:a", "tok-w", 30_000, &["WAIT", "30000"]));
    wait_until(20 * SEC, "the waiter queued", || {
        waiters(&mut c, "job:a") == 1
    });
    assert_eq!(
        acquire(&mut c, b"job:a", "tok-c", 30_000, &["WAIT", "50"]),
        None
    );
    release(&mut c, b"job:a", "tok-a");
    assert!(waiter.join().unwrap().is_some());
    release(&mut c, b"job:a", "tok-w");
    // The odd name: the most contended.
    acquire(&mut c, ODD, "tok-o", 30_000, &[]).unwrap();
    for _ in 0..5 {
        assert_eq!(acquire(&mut c, ODD, "tok-p", 30_000, &[]), None);
    }
    release(&mut c, ODD, "tok-o");
    // A lease that runs out, counted once the server removed its key.
    acquire(&mut c, b"job:exp", "tok-e", 50, &[]).unwrap();
    wait_until(20 * SEC, "job:exp expired", || {
        redis::cmd("EXISTS")
            .arg("job:exp")
            .query::<i64>(&mut c)
            .unwrap()
            == 0
    });
    acquire(&mut c, b"job:rw", "r1", 30_000, &["SHARED"]).unwrap();
    release(&mut c, b"job:rw", "r1");
    acquire(&mut c, b"pool", "p1", 30_000, &["LIMIT", "3"]).unwrap();
    release(&mut c, b"pool", "p1");

    let (code, text, err) = run(dlock(&url).arg("metrics"), &dir, 30 * SEC);
    assert_eq!((code, err.as_str()), (0, ""), "{text}");
    // Most grants were at once: the wait's p50 is 0, its p99 the waiter's;
    // two of four holds lasted 50 ms or more, the others maybe less than
    // the server's resolution.
    let n = labels(&[("node", &node)]);
    let lock = labels(&[("node", &node), ("kind", "lock")]);
    let kind = |k: &str| labels(&[("node", &node), ("kind", k)]);
    let q = |x: &str| labels(&[("node", &node), ("kind", "lock"), ("quantile", x)]);
    let hot = |r: &str| labels(&[("node", &node), ("resource", r), ("db", "0")]);
    let want = format!(
        r#"{{"families": {{"dlock_up": "gauge", "dlock_stats_enabled": "gauge",
            "dlock_grants": "counter", "dlock_expired": "counter",
            "dlock_wait_seconds": "summary", "dlock_hold_seconds": "summary",
            "dlock_wait_max_seconds": "gauge", "dlock_locks": "gauge",
            "dlock_waiters": "gauge", "dlock_quarantine_active": "gauge",
            "dlock_eviction_can_free_locks": "gauge", "dlock_evicted_locks": "counter",
            "dlock_hot_contended": "gauge", "dlock_hot_wait_seconds": "counter",
            "dlock_hot_expired": "gauge"}},
          "equal": [
            ["dlock_up", {n}, 1], ["dlock_stats_enabled", {n}, 1],
            ["dlock_grants_total", {lock}, 4], ["dlock_waited_total", {lock}, 1],
            ["dlock_handovers_total", {lock}, 0],
            ["dlock_contended_total", {lock}, 9], ["dlock_wait_timeouts_total", {lock}, 1],
            ["dlock_releases_total", {lock}, 3], ["dlock_expired_total", {lock}, 1],
            ["dlock_revoked_total", {lock}, 0],
            ["dlock_grants_total", {shared}, 1], ["dlock_releases_total", {shared}, 1],
            ["dlock_grants_total", {sem}, 1], ["dlock_releases_total", {sem}, 1],
            ["dlock_wait_seconds_count", {lock}, 4], ["dlock_hold_seconds_count", {lock}, 4],
            ["dlock_locks", {n}, 0], ["dlock_waiters", {n}, 0],
            ["dlock_quarantine_active", {n}, 0], ["dlock_evicted_locks_total", {n}, 0],
            ["dlock_hot_contended", {odd}, 5], ["dlock_hot_contended", {a}, 4],
            ["dlock_hot_expired", {exp}, 1]],
          "positive": [
            ["dlock_wait_seconds", {q99}],
            ["dlock_wait_seconds_sum", {lock}], ["dlock_wait_max_seconds", {lock}],
            ["dlock_hold_seconds", {q99}], ["dlock_hold_max_seconds", {lock}],
            ["dlock_hot_wait_seconds_total", {a}]]}}"#,
        shared = kind("shared"),
        sem = kind("semaphore"),
        odd = hot(ODD_LABEL),
        a = hot("job:a"),
        exp = hot("job:exp"),
        q99 = q("0.99"),
    );
    check_with_prometheus_client(&text, &want);

    // A server nobody answers on: dlock_up 0, named on stderr, exit 69.
    let dead = dead_url();
    let (code, text, err) = run(dlock(&dead).arg("metrics"), &dir, 30 * SEC);
    assert_eq!(code, 69, "{err}");
    let dead_node = dead.trim_start_matches("redis://").trim_end_matches('/');
    assert!(err.contains(dead_node), "{err}");
    let want = format!(
        r#"{{"families": {{"dlock_up": "gauge"}}, "equal": [["dlock_up", {}, 0]], "positive": []}}"#,
        labels(&[("node", dead_node)])
    );
    check_with_prometheus_client(&text, &want);
}

/// One request on a new connection: the whole response (the server
/// closes it).
fn http(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(30 * SEC)).unwrap();
    s.set_write_timeout(Some(30 * SEC)).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn served_over_http_until_sigterm() {
    let server = Server::start();
    let dir = Dir::new();
    let node = format!("127.0.0.1:{}", server.port());
    let dead = dead_url();
    let dead_node = dead.trim_start_matches("redis://").trim_end_matches('/');
    let mut c = server.conn();
    acquire(&mut c, b"job:h", "t", 30_000, &[]).unwrap();
    let mut d = Dlock::spawn(
        dlock(&server.url()).args([
            "metrics",
            "--listen",
            "127.0.0.1:0",
            "--url",
            &server.url(),
            "--url",
            &dead,
        ]),
        &dir,
        "serve",
    );
    let mut addr = String::new();
    wait_until(20 * SEC, "dlock listening", || {
        let err = d.stderr();
        match err
            .lines()
            .find_map(|l| l.strip_prefix("dlock: metrics: listening on "))
        {
            Some(a) => {
                addr = a.trim().to_string();
                true
            }
            None => false,
        }
    });

    // A client that leaves without asking holds nothing up; nor do three
    // that start a request and go silent: the scrape is answered while
    // they are still open (served one at a time, it would come only after
    // their timeouts had closed them).
    drop(TcpStream::connect(&addr).unwrap());
    let mut silent: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"G").unwrap();
            s
        })
        .collect();
    let r = http(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    for s in &mut silent {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let still_open =
            matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        assert!(
            still_open,
            "a silent connection was closed before the scrape was answered"
        );
    }
    drop(silent);
    let (head, body) = r.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())),
        "{head}"
    );
    let want = format!(
        r#"{{"families": {{"dlock_up": "gauge", "dlock_grants": "counter"}},
          "equal": [["dlock_up", {up}, 1], ["dlock_up", {down}, 0],
                    ["dlock_grants_total", {lock}, 1], ["dlock_locks", {up}, 1]],
          "positive": []}}"#,
        up = labels(&[("node", &node)]),
        down = labels(&[("node", dead_node)]),
        lock = labels(&[("node", &node), ("kind", "lock")]),
    );
    check_with_prometheus_client(body, &want);
    // Each scrape reads the servers again.
    release(&mut c, b"job:h", "t");
    let r = http(&addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    let body = r.split_once("\r\n\r\n").unwrap().1;
    assert!(
        body.contains(&format!(
            "dlock_releases_total{{node=\"{node}\",kind=\"lock\"}} 1\n"
        )),
        "{body}"
    );

    let r = http(&addr, b"GET /other HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
    let r = http(&addr, b"POST /metrics HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    let r = http(&addr, b"garbage\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    // A head past the bound is refused, not read on.
    let mut big = b"GET /metrics HTTP/1.1\r\n".to_vec();
    big.extend(b"X-Pad: 0123456789\r\n".repeat(600));
    let r = http(&addr, &big);
    assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
    assert!(d.stderr().contains(dead_node), "{}", d.stderr());

    assert!(crate::cli::kill(d.pid(), libc::SIGTERM));
    assert_eq!(d.wait(20 * SEC), 0, "{}", d.stderr());
}

/// Given a replica of a cluster: every master, each its own `node`, and
/// no replica.
#[test]
fn every_master_of_a_cluster() {
    let cluster = Cluster::start(3, 1);
    let dir = Dir::new();
    let masters = cluster.masters();
    let name = |i: usize| format!("127.0.0.1:{}", cluster.node(i).port());
    let locker = Locker::cluster(&[cluster.node(masters[0]).url()]).unwrap();
    let mut held: BTreeMap<String, u64> = masters.iter().map(|m| (name(*m), 0)).collect();
    let mut guards = Vec::new();
    for i in 0..30 {
        let res = format!("res:{i}");
        guards.push(locker.try_lock(&res, 60 * SEC).unwrap().expect("free"));
        *held
            .get_mut(&name(cluster.node_for_slot(cluster.key_slot(&res))))
            .unwrap() += 1;
    }
    let replica = (0..cluster.nodes().len())
        .find(|i| !masters.contains(i))
        .unwrap();
    let (code, text, err) = run(
        dlock(&cluster.node(replica).url()).arg("metrics"),
        &dir,
        30 * SEC,
    );
    assert_eq!((code, err.as_str()), (0, ""), "{text}");
    assert_eq!(text.matches("\ndlock_up{").count(), 3, "{text}");
    assert!(!text.contains(&format!("\"{}\"", name(replica))), "{text}");
    let equal: Vec<String> = held
        .iter()
        .flat_map(|(node, n)| {
            let l = labels(&[("node", node)]);
            let lock = labels(&[("node", node), ("kind", "lock")]);
            [
                format!(r#"["dlock_up", {l}, 1]"#),
                format!(r#"["dlock_grants_total", {lock}, {n}]"#),
                format!(r#"["dlock_locks", {l}, {n}]"#),
            ]
        })
        .collect();
    let want = format!(
        r#"{{"families": {{"dlock_up": "gauge"}}, "equal": [{}], "positive": []}}"#,
        equal.join(", ")
    );
    check_with_prometheus_client(&text, &want);
}
