//! `dlock top`: the hottest resources by `DLOCK.STATS HOT`, with their
//! holders, against real servers: `--once --json` after real contention,
//! expiries and waits, in every ordering; a cluster's masters merged, one
//! of them down; usage and unreachable servers; and the live view end to
//! end in tmux (keys change the ordering, `q` and Ctrl-C give the terminal
//! back).

use crate::cli::{dead_url, dlock, run, wait_until, Dir, SEC};
use crate::common::server::cluster::Cluster;
use crate::common::{waiters, Server};
use serde_json::Value;

fn acquire(
    c: &mut redis::Connection,
    res: &str,
    token: &str,
    ttl_ms: u64,
    extra: &[&str],
) -> Option<u64> {
    crate::cli::acquire(c, res.as_bytes(), token.as_bytes(), ttl_ms, extra)
}

/// `res` held by `holder`, then tried `tries` times by others (each
/// answered nil: contended), and once with a `WAIT` that runs out.
fn contend(c: &mut redis::Connection, res: &str, holder: &str, tries: usize) {
    assert!(acquire(c, res, holder, 60_000, &[]).is_some(), "{res} free");
    for i in 0..tries {
        assert_eq!(acquire(c, res, &format!("try-{i}"), 1_000, &[]), None);
    }
    assert_eq!(acquire(c, res, "waits", 1_000, &["WAIT", "50"]), None);
}

/// `dlock top --once --json ARGS` on `url`: the document, once it exited 0.
fn top_json(url: &str, dir: &Dir, args: &[&str]) -> Value {
    let (code, out, err) = run(
        dlock(url).args(["top", "--once", "--json"]).args(args),
        dir,
        30 * SEC,
    );
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn names(doc: &Value) -> Vec<String> {
    doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resource"].as_str().unwrap().to_string())
        .collect()
}

fn find<'a>(doc: &'a Value, res: &str) -> &'a Value {
    doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == res)
        .unwrap_or_else(|| panic!("no {res} in {doc}"))
}

/// A contended lock, a long wait and expired leases: each on top of its
/// own ordering, with its figures and its holder now; the totals; the
/// table.
#[test]
fn the_hottest_resources_in_every_ordering() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    contend(&mut c, "hot:contended", "holder-token-1", 5);

    // A wait of at least a second, granted.
    assert!(acquire(&mut c, "hot:wait", "first", 60_000, &[]).is_some());
    let waiter = std::thread::spawn({
        let mut w = server.conn();
        move || acquire(&mut w, "hot:wait", "second", 60_000, &["WAIT", "30000"])
    });
    wait_until(20 * SEC, "the waiter queued", || {
        waiters(&mut c, "hot:wait") == 1
    });
    std::thread::sleep(SEC);
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("hot:wait")
        .arg("first")
        .query(&mut c)
        .unwrap();
    assert!(waiter.join().unwrap().is_some(), "granted once released");

    // Two leases that run out.
    for token in ["e1", "e2"] {
        wait_until(20 * SEC, "hot:expired free", || {
            acquire(&mut c, "hot:expired", token, 30, &[]).is_some()
        });
    }
    let mut doc = Value::Null;
    wait_until(20 * SEC, "both leases counted expired", || {
        doc = top_json(&url, &dir, &["--by", "expired"]);
        doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resource"] == "hot:expired" && r["expired"] == 2)
    });
    assert_eq!(names(&doc)[0], "hot:expired", "{doc}");
    assert_eq!(doc["by"], "expired");

    let doc = top_json(&url, &dir, &[]);
    assert_eq!(doc["by"], "contended");
    assert_eq!(names(&doc)[0], "hot:contended", "{doc}");
    let r = find(&doc, "hot:contended");
    let node = format!("127.0.0.1:{}", server.port());
    assert_eq!(r["node"], node.as_str());
    assert_eq!(r["db"], 0);
    // 5 tries and the wait that ran out.
    assert_eq!(
        (r["contended"].as_i64(), r["score"].as_i64()),
        (Some(6), Some(6)),
        "{r}"
    );
    assert_eq!(r["wait_timeouts"], 1, "{r}");
    assert_eq!(
        (r["holders"].as_i64(), r["waiters"].as_i64()),
        (Some(1), Some(0)),
        "{r}"
    );
    assert_eq!(r["holder"], "holder-t", "{r}");
    assert!(r["held_ms"].as_i64().is_some_and(|ms| ms >= 0), "{r}");
    let t = &doc["totals"];
    assert_eq!(
        (t["nodes"].as_i64(), t["up"].as_i64()),
        (Some(1), Some(1)),
        "{t}"
    );
    assert!(t["grants"].as_i64().unwrap() >= 5, "{t}");
    assert!(t["expired"].as_i64().unwrap() >= 2, "{t}");
    assert!(t["wait_timeouts"].as_i64().unwrap() >= 1, "{t}");
    assert_eq!(t["grants_per_s"], Value::Null, "one reading has no rate");
    assert_eq!(doc["nodes"][0]["node"], node.as_str());
    assert_eq!(doc["nodes"][0]["up"], true);
    assert_eq!(doc["nodes"][0]["enabled"], true);

    let doc = top_json(&url, &dir, &["--by", "wait", "--count", "1"]);
    assert_eq!(names(&doc), ["hot:wait"], "{doc}");
    let r = find(&doc, "hot:wait");
    assert_eq!(
        (r["waited"].as_i64(), r["holders"].as_i64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(r["holder"], "second", "{r}");
    // Within 1/16 of the second waited, at least.
    assert!(r["wait_max_us"].as_i64().unwrap() >= 937_000, "{r}");
    assert!(r["score"].as_i64().unwrap() >= 937_000, "{r}");

    let (code, table, err) = run(dlock(&url).args(["top", "--once"]), &dir, 30 * SEC);
    assert_eq!(code, 0, "{err}");
    assert!(table.starts_with("by contended"), "{table}");
    let header = table
        .lines()
        .position(|l| l.starts_with("RESOURCE"))
        .expect(&table);
    let first: Vec<&str> = table
        .lines()
        .nth(header + 1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(first[..2], ["hot:contended", "holder-t"], "{table}");
}

/// Usage errors 64 (the live view without a terminal among them), an
/// unreachable server or one without `DLOCK.STATS` 69.
#[test]
fn usage_and_unreachable_servers() {
    let dir = Dir::new();
    for args in [
        &["--by", "size"][..],
        &["--count", "0"],
        &["--count", "33"],
        &["--interval", "2"],
        &["--json"],
        &["extra"],
        // stdout is a file here: the live view is refused.
        &[],
    ] {
        let (code, out, err) = run(dlock(&dead_url()).arg("top").args(args), &dir, 20 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains("dlock top --help"), "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}");
    }
    let (_, _, err) = run(dlock(&dead_url()).arg("top"), &dir, 20 * SEC);
    assert!(err.contains("--once"), "{err}");
    let (code, out, _) = run(dlock(&dead_url()).args(["top", "--help"]), &dir, 20 * SEC);
    assert_eq!(code, 0);
    for s in ["--by", "--interval", "--count", "--once", "--json", "q "] {
        assert!(out.contains(s), "dlock top --help lacks {s}");
    }

    let dead = dead_url();
    let port = dead.trim_end_matches('/').rsplit(':').next().unwrap();
    let (code, out, err) = run(
        dlock(&dead).args(["top", "--once", "--json"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 69, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(doc["nodes"][0]["up"], false, "{doc}");
    assert!(
        err.contains(&format!("server 127.0.0.1:{port} unavailable")),
        "{err}"
    );

    let bare = Server::builder().without_module().start();
    let (code, _, err) = run(dlock(&bare.url()).args(["top", "--once"]), &dir, 20 * SEC);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("DLOCK.STATS"), "{err}");
}

/// A cluster from any node: every master's hot resources, each named by
/// its master, merged by score; a master down is reported (69) and the
/// others' resources still shown.
#[test]
fn a_cluster_merged_master_by_master() {
    let mut cluster = Cluster::start(3, 0);
    let dir = Dir::new();
    let masters = cluster.masters();
    // One resource per master, contended 2, 4 and 6 times.
    let mut expected = Vec::new();
    for (k, m) in masters.iter().enumerate() {
        let res = (0..)
            .map(|i| format!("c{k}:{i}"))
            .find(|r| cluster.node_for_slot(cluster.key_slot(r)) == *m)
            .unwrap();
        contend(&mut cluster.node(*m).conn(), &res, "h", 2 * k + 1);
        expected.push((res, format!("127.0.0.1:{}", cluster.node(*m).port())));
    }
    expected.reverse();
    let url = cluster.node(masters[0]).url();
    let doc = top_json(&url, &dir, &[]);
    let found: Vec<(String, String)> = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("resource"), s("node"))
        })
        .collect();
    assert_eq!(found, expected, "{doc}");
    assert_eq!(doc["totals"]["nodes"], 3, "{doc}");

    // The top one's master down: the other two shown, it reported.
    let down = masters[2];
    let down_name = format!("127.0.0.1:{}", cluster.node(down).port());
    cluster.kill9(down);
    let (code, out, err) = run(
        dlock(&url).args(["top", "--once", "--json"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 69, "{err}");
    assert!(err.contains(&down_name), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        names(&doc),
        [expected[1].0.clone(), expected[2].0.clone()],
        "{doc}"
    );
    let node = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == down_name.as_str())
        .unwrap_or_else(|| panic!("{down_name} not in {doc}"));
    assert_eq!(node["up"], false, "{node}");
    assert_eq!(doc["totals"]["up"], 2, "{doc}");
}
