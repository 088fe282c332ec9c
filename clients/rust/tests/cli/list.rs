//! `dlock list`: every lock of a server, or of every master of a cluster,
//! found by `SCAN ... TYPE dlocklock` and `DLOCK.QUEUED` (the resources
//! clients wait for, with a key or without), with its holders and waiters, in
//! text and JSON, sorted, filtered by a pattern; and what it says when a
//! server, a command or a key is out of its reach.

use crate::cli::{dead_url, dlock, run, wait_until, Dir, Paused, SEC};
use crate::common::server::cluster::Cluster;
use crate::common::{waiters, Server};
use dlock_client::Locker;
use std::collections::BTreeMap;
use std::time::Instant;

/// `dlock list ARGS` on `url`: stdout, once it exited 0 saying nothing on
/// stderr.
fn list(url: &str, dir: &Dir, args: &[&str]) -> String {
    let (code, out, err) = run(dlock(url).arg("list").args(args), dir, 30 * SEC);
    assert_eq!(code, 0, "{args:?}: {err}");
    assert_eq!(err, "", "{args:?}");
    out
}

/// The table's lines after the header, as words.
fn rows(table: &str) -> Vec<Vec<String>> {
    let mut lines = table.lines();
    let header = lines.next().expect("a header");
    assert!(header.contains("RESOURCE"), "{table}");
    lines
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// The value of `"key":` in one object of the JSON array: a string
/// without escaped quotes, or a number.
fn field<'a>(object: &'a str, key: &str) -> &'a str {
    let at = object
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {object}"))
        + key.len()
        + 3;
    let rest = &object[at..];
    match rest.strip_prefix('"') {
        Some(s) => &s[..s.find('"').unwrap()],
        None => &rest[..rest.find([',', '}']).unwrap()],
    }
}

/// The objects of the JSON array (one per line between `[` and `]`).
fn objects(json: &str) -> Vec<&str> {
    if json == "[]\n" {
        return vec![];
    }
    assert!(json.starts_with("[\n") && json.ends_with("\n]\n"), "{json}");
    let body: Vec<&str> = json[2..json.len() - 3].lines().collect();
    for (i, o) in body.iter().enumerate() {
        let last = i + 1 == body.len();
        assert!(
            o.starts_with("{\"server\":") && o.ends_with(if last { "}" } else { "}," }),
            "{json}"
        );
    }
    body.into_iter()
        .map(|o| o.strip_suffix(',').unwrap_or(o))
        .collect()
}

fn acquire(
    c: &mut redis::Connection,
    res: &[u8],
    token: &[u8],
    ttl_ms: u64,
    extra: &[&str],
) -> u64 {
    crate::cli::acquire(c, res, token, ttl_ms, extra).expect("granted")
}

/// Every kind with its holders, a waiter, a name and a token that are not
/// UTF-8; keys of other types and released locks left out; the pattern,
/// every sort order, text and JSON.
#[test]
fn every_lock_with_its_holders_and_waiters_sorted_and_filtered() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    // No lock: the header alone, an empty array.
    assert_eq!(list(&url, &dir, &[]).lines().count(), 1);
    assert_eq!(list(&url, &dir, &["--json"]), "[]\n");

    let plain_fence = acquire(&mut c, b"job:plain", b"tok-plain", 30_000, &[]);
    let locker = Locker::new(&url).unwrap();
    let l2 = locker.clone();
    let waiter = std::thread::spawn(move || {
        l2.request("job:plain")
            .token("next-1")
            .ttl(SEC)
            .wait(30 * SEC)
            .acquire()
            .unwrap()
            .map(|g| g.fence())
    });
    wait_until(20 * SEC, "the waiter queued", || {
        waiters(&mut c, "job:plain") == 1
    });
    acquire(&mut c, b"job:rw", b"r1", 20_000, &["SHARED"]);
    acquire(
        &mut c,
        b"job:rw",
        b"r2",
        20_000,
        &["SHARED", "OWNER", "svc-2"],
    );
    acquire(&mut c, b"pool", b"p1", 5_000, &["LIMIT", "3"]);
    acquire(&mut c, b"reentrant", b"outer", 60_000, &["OWNER", "w-1"]);
    acquire(&mut c, b"reentrant", b"inner", 60_000, &["OWNER", "w-1"]);
    acquire(&mut c, &[b'b', 0xff], &[b't', 0x80], 30_000, &[]);
    let _: () = redis::cmd("SET")
        .arg("job:string")
        .arg("x")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, b"job:gone", b"g", 30_000, &[]);
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("job:gone")
        .arg("g")
        .query(&mut c)
        .unwrap();

    let table = list(&url, &dir, &[]);
    let r = rows(&table);
    let names: Vec<&str> = r.iter().map(|w| w[0].as_str()).collect();
    assert_eq!(
        names,
        [
            "b\\xff",
            "job:plain",
            "job:rw",
            "job:rw",
            "pool",
            "reentrant",
            "reentrant"
        ],
        "{table}"
    );
    assert!(!table.starts_with("SERVER"), "one server: {table}");
    let plain_ttl = r[1][7].trim_end_matches('s').parse::<f64>().unwrap();
    assert!(plain_ttl > 20.0 && plain_ttl <= 30.0, "{table}");
    let fence = plain_fence.to_string();
    assert_eq!(
        r[1],
        [
            "job:plain",
            "lock",
            "held",
            "1",
            "1",
            "exclusive",
            &fence,
            &r[1][7],
            "tok-plain",
            "-",
            "0",
            "next-1"
        ],
        "{table}"
    );
    // The head of the queue: only where someone waits.
    assert!(r
        .iter()
        .all(|w| (w[11] == "next-1") == (w[0] == "job:plain")));
    // Its priority (none named: 0) beside it, `-` where nobody waits.
    assert!(r.iter().all(
        |w| (w[10] == "0") == (w[0] == "job:plain") && (w[10] == "-") != (w[0] == "job:plain")
    ));
    assert_eq!(r[0][8], "t\\x80", "{table}");
    assert_eq!(
        r[2][..6],
        ["job:rw", "read-write", "held", "2", "0", "shared"]
    );
    assert_eq!((r[2][8].as_str(), r[2][9].as_str()), ("r1", "r1"));
    assert_eq!((r[3][8].as_str(), r[3][9].as_str()), ("r2", "svc-2"));
    assert_eq!(
        r[4][..6],
        ["pool", "semaphore", "held", "1/3", "0", "permit"]
    );
    // One owner's holds: reentrant, each with its token.
    assert_eq!(
        r[5][..6],
        ["reentrant", "reentrant", "held", "2", "0", "exclusive"]
    );
    assert_eq!((r[5][8].as_str(), r[5][9].as_str()), ("outer", "w-1"));
    assert_eq!((r[6][8].as_str(), r[6][9].as_str()), ("inner", "w-1"));

    let json = list(&url, &dir, &["--json"]);
    let o = objects(&json);
    assert_eq!(o.len(), 5, "{json}");
    let server_name = format!("127.0.0.1:{}", server.port());
    assert!(
        o.iter().all(|o| field(o, "server") == server_name),
        "{json}"
    );
    assert!(
        o[0].contains(r#""resource":"b\u00ff","resource_hex":"62ff""#)
            && o[0].contains(r#""token":"t\u0080","token_hex":"7480""#),
        "{json}"
    );
    assert_eq!(field(o[1], "resource"), "job:plain");
    assert_eq!(field(o[1], "waiters"), "1");
    assert_eq!(field(o[1], "fence"), plain_fence.to_string());
    assert_eq!(field(o[1], "next"), "next-1");
    assert_eq!(field(o[2], "next"), "null");
    assert_eq!(field(o[1], "next_priority"), "0");
    assert_eq!(field(o[2], "next_priority"), "null");
    assert!(o[1].contains(r#""owner":null"#), "{json}");
    assert_eq!(field(o[2], "kind"), "rwlock");
    assert_eq!(o[2].matches(r#""mode":"shared""#).count(), 2, "{json}");
    assert_eq!(field(o[3], "kind"), "semaphore");
    assert_eq!(field(o[3], "limit"), "3");
    // The JSON keeps what DLOCK.INFO says.
    assert_eq!(field(o[4], "kind"), "rwlock");

    // A pattern; one that matches nothing; one that starts with `-`.
    let first = |t: &str| {
        rows(t)
            .into_iter()
            .map(|w| w[0].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        first(&list(&url, &dir, &["job:*"])),
        ["job:plain", "job:rw", "job:rw"]
    );
    assert_eq!(list(&url, &dir, &["--json", "nothing*"]), "[]\n");
    assert_eq!(list(&url, &dir, &["--json", "--", "-*"]), "[]\n");
    assert_eq!(first(&list(&url, &dir, &["[a-c]*"])), ["b\\xff"]);

    // Each order: most waiters, soonest deadline, oldest grant first.
    let order = |by: &str| {
        let t = list(&url, &dir, &["--sort", by]);
        let mut names = first(&t);
        names.dedup();
        names
    };
    assert_eq!(order("waiters")[0], "job:plain");
    assert_eq!(order("ttl")[..2], ["pool", "job:rw"]);
    assert_eq!(order("fence")[0], "job:plain");
    assert_eq!(
        order("resource"),
        ["b\\xff", "job:plain", "job:rw", "pool", "reentrant"]
    );

    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("job:plain")
        .arg("tok-plain")
        .query(&mut c)
        .unwrap();
    assert!(waiter.join().unwrap().is_some());
}

/// More locks than one `SCAN` call returns, among more keys of other
/// types: each listed once.
#[test]
fn thousands_of_locks_are_listed_once_each() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    let n = 2500;
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("DLOCK.ACQUIRE")
            .arg(format!("many:{i}"))
            .arg(format!("t{i}"))
            .arg(60_000)
            .ignore();
        pipe.cmd("SET").arg(format!("many:str:{i}")).arg(i).ignore();
    }
    let _: () = pipe.query(&mut c).unwrap();
    let t = std::time::Instant::now();
    let json = list(&url, &dir, &["--json", "many:*"]);
    let took = t.elapsed();
    let mut seen = std::collections::BTreeSet::new();
    for o in objects(&json) {
        assert!(seen.insert(field(o, "resource").to_string()), "twice: {o}");
    }
    assert_eq!(seen.len(), n);
    assert!(took < 10 * SEC, "{took:?}");
    // Sorted by name, as text too.
    let table = list(&url, &dir, &[]);
    assert_eq!(table.lines().count(), n + 1);
    let names: Vec<String> = rows(&table).into_iter().map(|w| w[0].clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

/// A resource nobody holds while a client waits for it is reserved for its
/// queue: here a shared hold whose key an admin made persistent ran out
/// while writes are paused, so the handoff waits and the key stays.
#[test]
fn a_resource_reserved_for_its_queue_is_listed_as_reserved() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    acquire(&mut c, b"rq", b"s1", 300, &["SHARED"]);
    let _: i64 = redis::cmd("PERSIST").arg("rq").query(&mut c).unwrap();
    let locker = Locker::new(&url).unwrap();
    let waiter = std::thread::spawn(move || {
        locker
            .request("rq")
            .token("w-rq")
            .ttl(30 * SEC)
            .wait(30 * SEC)
            .acquire()
            .unwrap()
            .map(|g| g.fence())
    });
    wait_until(20 * SEC, "the waiter queued", || waiters(&mut c, "rq") == 1);
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "20000", "WRITE"][..])
        .query(&mut c)
        .unwrap();
    let mut table = String::new();
    wait_until(20 * SEC, "rq reserved", || {
        table = list(&url, &dir, &["rq"]);
        table.contains("reserved")
    });
    assert_eq!(
        rows(&table),
        [["rq", "lock", "reserved", "0", "1", "-", "-", "-", "-", "-", "0", "w-rq"]],
        "{table}"
    );
    let json = list(&url, &dir, &["--json", "rq"]);
    let o = objects(&json);
    assert_eq!(o.len(), 1, "{json}");
    assert_eq!(field(o[0], "state"), "reserved");
    assert!(
        o[0].ends_with(r#""waiters":1,"holds":[],"next":"w-rq","next_priority":0}"#),
        "{json}"
    );
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut c).unwrap();
    assert!(
        waiter.join().unwrap().is_some(),
        "granted once writes resumed"
    );
}

/// A set's member kept free for a queued set has no key, so `SCAN` cannot
/// find it: `DLOCK.QUEUED` names it, and it is listed as reserved with its
/// waiter, next to the held member the set waits for; the pattern selects
/// it as it selects keys.
#[test]
fn a_reserved_member_without_a_key_is_listed_with_its_waiter() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    let fence = acquire(&mut c, b"{j}:a", b"holder", 30_000, &[]);
    let mut w = server.conn();
    let set = std::thread::spawn(move || {
        redis::cmd("DLOCK.MACQUIRE")
            .arg(&["2", "{j}:a", "{j}:b", "setter", "30000", "WAIT", "0"][..])
            .query::<Option<u64>>(&mut w)
            .unwrap()
    });
    wait_until(20 * SEC, "the set queued", || waiters(&mut c, "{j}:b") == 1);
    let exists: i64 = redis::cmd("EXISTS").arg("{j}:b").query(&mut c).unwrap();
    assert_eq!(exists, 0, "the reserved member has no key");

    let table = list(&url, &dir, &[]);
    let r = rows(&table);
    assert_eq!(r.len(), 2, "{table}");
    assert_eq!(
        r[0][..7],
        [
            "{j}:a",
            "lock",
            "held",
            "1",
            "1",
            "exclusive",
            &fence.to_string()
        ],
        "{table}"
    );
    assert_eq!(r[0][11], "setter", "the set is next on both members");
    assert_eq!(
        r[1],
        ["{j}:b", "lock", "reserved", "0", "1", "-", "-", "-", "-", "-", "0", "setter"],
        "{table}"
    );
    let table = list(&url, &dir, &["*:b"]);
    assert_eq!(rows(&table).len(), 1, "{table}");
    assert_eq!(rows(&table)[0][..3], ["{j}:b", "lock", "reserved"]);
    assert_eq!(list(&url, &dir, &["--json", "other:*"]), "[]\n");
    let json = list(&url, &dir, &["--json", "--sort", "waiters"]);
    let o = objects(&json);
    assert_eq!(o.len(), 2, "{json}");
    let b = o.iter().find(|o| field(o, "resource") == "{j}:b").unwrap();
    assert_eq!(field(b, "state"), "reserved");
    assert!(
        b.ends_with(r#""waiters":1,"holds":[],"next":"setter","next_priority":0}"#),
        "{json}"
    );

    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("{j}:a")
        .arg("holder")
        .query(&mut c)
        .unwrap();
    assert!(set.join().unwrap().is_some_and(|f| f > fence));
    let table = list(&url, &dir, &[]);
    let r = rows(&table);
    let held: Vec<[&str; 3]> = r.iter().map(|w| [&*w[0], &*w[2], &*w[4]]).collect();
    assert_eq!(
        held,
        [["{j}:a", "held", "0"], ["{j}:b", "held", "0"]],
        "{table}"
    );
}

/// A cluster: from any node (a replica too), every master's locks, each
/// once and named by the master that holds it; several nodes of one
/// cluster named: still once.
#[test]
fn a_cluster_is_listed_from_any_node_master_by_master() {
    let cluster = Cluster::start(3, 1);
    let dir = Dir::new();
    let masters = cluster.masters();
    let locker = Locker::cluster(&[cluster.node(masters[0]).url()]).unwrap();
    let mut guards = Vec::new();
    let mut expected = BTreeMap::new();
    for i in 0..40 {
        let res = format!("res:{i}");
        guards.push(locker.try_lock(&res, 60 * SEC).unwrap().expect("free"));
        let owner = cluster.node_for_slot(cluster.key_slot(&res));
        expected.insert(res, format!("127.0.0.1:{}", cluster.node(owner).port()));
    }
    let on_every_master: std::collections::BTreeSet<&String> = expected.values().collect();
    assert_eq!(on_every_master.len(), 3, "resources on every master");
    let replica = cluster.replicas_of(masters[1])[0];
    let found = |args: &[&str]| {
        let (code, out, err) = run(dlock(&dead_url()).arg("list").args(args), &dir, 30 * SEC);
        assert_eq!(code, 0, "{args:?}: {err}");
        let mut found = BTreeMap::new();
        for o in objects(&out) {
            let res = field(o, "resource").to_string();
            assert!(
                found.insert(res, field(o, "server").to_string()).is_none(),
                "twice: {o}"
            );
        }
        found
    };
    let replica_url = cluster.node(replica).url();
    let master_url = cluster.node(masters[2]).url();
    assert_eq!(found(&["--url", &replica_url, "--json"]), expected);
    assert_eq!(
        found(&["--url", &replica_url, "--url", &master_url, "--json"]),
        expected
    );
    let tens: BTreeMap<String, String> = expected
        .iter()
        .filter(|(r, _)| r.starts_with("res:1"))
        .map(|(r, s)| (r.clone(), s.clone()))
        .collect();
    assert_eq!(found(&["--url", &master_url, "--json", "res:1*"]), tens);
    // The table names each lock's master.
    let (code, table, err) = run(
        dlock(&replica_url).args(["list", "--sort", "fence"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    assert!(table.starts_with("SERVER  "), "{table}");
    let r = rows(&table);
    assert_eq!(r.len(), 40, "{table}");
    for w in &r {
        assert_eq!(expected[&w[1]], w[0], "{table}");
    }
    // The lowest fence first (column FENCE, after SERVER).
    let fences: Vec<u64> = r.iter().map(|w| w[7].parse().unwrap()).collect();
    assert!(fences.windows(2).all(|p| p[0] <= p[1]), "{table}");

    // A set's member reserved without a key is found on its master too.
    guards.push(locker.try_lock("{q}:a", 60 * SEC).unwrap().expect("free"));
    let owner = cluster.node_for_slot(cluster.key_slot("{q}:a"));
    let owner_url = cluster.node(owner).url();
    let set = std::thread::spawn({
        let url = owner_url.clone();
        move || {
            let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
            redis::cmd("DLOCK.MACQUIRE")
                .arg(&["2", "{q}:a", "{q}:b", "setter", "30000", "WAIT", "0"][..])
                .query::<Option<u64>>(&mut w)
        }
    });
    let mut o = redis::Client::open(owner_url)
        .unwrap()
        .get_connection()
        .unwrap();
    wait_until(20 * SEC, "the set queued", || waiters(&mut o, "{q}:b") == 1);
    let at = format!("127.0.0.1:{}", cluster.node(owner).port());
    assert_eq!(
        found(&["--url", &replica_url, "--json", "{q}*"]),
        BTreeMap::from([("{q}:a".to_string(), at.clone()), ("{q}:b".to_string(), at)])
    );
    drop(guards);
    assert!(
        set.join().unwrap().unwrap().is_some(),
        "granted once released"
    );
}

/// Usage errors are 64 with the hint; an unreachable or paused server 69
/// naming it; a server without the module 69; several servers, one down: the other's
/// locks printed (with a SERVER column), then 69.
#[test]
fn errors_and_partial_listings() {
    let dir = Dir::new();
    for args in [
        &["--sort", "size"][..],
        &["--sort"],
        &["a*", "b*"],
        &["a*", "--", "b*"],
        &["--json=yes"],
        &["--limit", "3"],
        &["-x"],
    ] {
        let (code, out, err) = run(dlock(&dead_url()).arg("list").args(args), &dir, 20 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains("dlock list --help"), "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}");
    }
    let (code, out, _) = run(dlock(&dead_url()).args(["list", "--help"]), &dir, 20 * SEC);
    assert_eq!(code, 0);
    for s in ["--sort", "--json", "PATTERN", "dlocklock", "reserved"] {
        assert!(out.contains(s), "dlock list --help lacks {s}");
    }

    let dead = dead_url();
    let port = dead.trim_end_matches('/').rsplit(':').next().unwrap();
    let (code, out, err) = run(dlock(&dead).arg("list"), &dir, 20 * SEC);
    assert_eq!(code, 69, "{err}");
    assert_eq!(out, "");
    assert!(
        err.contains(&format!("server 127.0.0.1:{port} unavailable")),
        "{err}"
    );

    // A server that takes connections but never answers: 69 within the
    // connect and reply timeouts (2 s, 5 s).
    let paused = Server::start();
    {
        let _stopped = Paused::new(&paused);
        let t = Instant::now();
        let (code, _, err) = run(dlock(&paused.url()).arg("list"), &dir, 30 * SEC);
        assert_eq!(code, 69, "{err}");
        assert!(t.elapsed() < 10 * SEC, "{:?}", t.elapsed());
        assert!(
            err.contains(&format!("127.0.0.1:{}", paused.port())),
            "{err}"
        );
    }

    let bare = Server::builder().without_module().start();
    let (code, _, err) = run(dlock(&bare.url()).arg("list"), &dir, 20 * SEC);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("module is not loaded"), "{err}");

    let server = Server::start();
    acquire(&mut server.conn(), b"r", b"t", 30_000, &[]);
    let (code, out, err) = run(
        dlock(&server.url()).args(["list", "--url", &server.url(), "--url", &dead]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 69, "{err}");
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{out}");
    assert_eq!(
        r[0][..2],
        [format!("127.0.0.1:{}", server.port()), "r".into()]
    );
    assert!(out.starts_with("SERVER"), "{out}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

/// ACLs: a user whose key patterns leave some locks out sees the others,
/// and exit 77 says how many it missed; a user without `CLUSTER` (which
/// tells a cluster node from a server) gets 77 too.
#[test]
fn permissions_refused_are_77() {
    let server = Server::start();
    let dir = Dir::new();
    let mut c = server.conn();
    let addr = format!("127.0.0.1:{}", server.port());
    for res in ["job:1", "job:2", "other:1", "other:2"] {
        acquire(&mut c, res.as_bytes(), b"t", 30_000, &[]);
    }
    for (user, rules) in [
        ("jobs", &["~job:*", "+@all"][..]),
        ("nocluster", &["~*", "+@all", "-cluster"]),
        ("noqueued", &["~*", "+@all", "-dlock.queued"]),
    ] {
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", user, "on", ">pw"][..])
            .arg(rules)
            .query(&mut c)
            .unwrap();
    }
    let (code, out, err) = run(
        dlock(&format!("redis://jobs:pw@{addr}/")).arg("list"),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 77, "{err}");
    let names: Vec<String> = rows(&out).into_iter().map(|w| w[0].clone()).collect();
    assert_eq!(names, ["job:1", "job:2"], "{out}");
    assert!(err.contains("2 locks not shown: NOPERM"), "{err}");
    assert!(err.contains(&addr), "{err}");
    let (code, _, err) = run(
        dlock(&format!("redis://nocluster:pw@{addr}/")).arg("list"),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 77, "{err}");
    assert!(err.to_lowercase().contains("cluster"), "{err}");
    // Without DLOCK.QUEUED: every lock with a key, and 77 for the rest.
    let (code, out, err) = run(
        dlock(&format!("redis://noqueued:pw@{addr}/")).arg("list"),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 77, "{err}");
    assert_eq!(rows(&out).len(), 4, "{out}");
    assert!(
        err.contains("resources clients wait for that have no key not shown: NOPERM"),
        "{err}"
    );
}

/// The bytes a JSON field stands for: `KEY_hex` when present (bytes that
/// are not UTF-8), else the string's UTF-8 (docs/cli.md).
fn json_bytes(o: &serde_json::Value, key: &str) -> Vec<u8> {
    match o.get(format!("{key}_hex")) {
        Some(h) => {
            let h = h.as_str().expect("hex is a string");
            assert_eq!(h.len() % 2, 0, "{h}");
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex digits"))
                .collect()
        }
        None => o[key].as_str().expect("a string").as_bytes().to_vec(),
    }
}

/// `--json` is JSON a parser takes, and gives every name, token and owner
/// back byte for byte: the byte 0xff, the character ÿ (U+00FF) and the four
/// characters `\xff` are three names, not one.
#[test]
fn json_gives_names_tokens_and_owners_back_byte_for_byte() {
    let server = Server::start();
    let dir = Dir::new();
    let mut c = server.conn();
    let names: [&[u8]; 4] = [b"b\xff", "b\u{ff}".as_bytes(), b"b\\xff", b"b\"\n\x01"];
    for (i, name) in names.iter().enumerate() {
        let token = [b"t\x80".as_slice(), &[b'0' + i as u8]].concat();
        let owner = [b"o\xc3(".as_slice(), &[b'0' + i as u8]].concat();
        let owner_arg: &[u8] = &owner;
        let _: u64 = redis::cmd("DLOCK.ACQUIRE")
            .arg(*name)
            .arg(&token)
            .arg(30_000)
            .arg("SHARED")
            .arg("OWNER")
            .arg(owner_arg)
            .query(&mut c)
            .unwrap();
    }
    let json = list(&server.url(), &dir, &["--json"]);
    let doc: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let locks = doc.as_array().expect("an array");
    let mut got: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = locks
        .iter()
        .map(|l| {
            let holds = l["holds"].as_array().expect("holds");
            assert_eq!(holds.len(), 1, "{json}");
            (
                json_bytes(l, "resource"),
                json_bytes(&holds[0], "token"),
                json_bytes(&holds[0], "owner"),
            )
        })
        .collect();
    got.sort();
    let mut want: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.to_vec(),
                [b"t\x80".as_slice(), &[b'0' + i as u8]].concat(),
                [b"o\xc3(".as_slice(), &[b'0' + i as u8]].concat(),
            )
        })
        .collect();
    want.sort();
    assert_eq!(got, want, "{json}");
    // Valid UTF-8 is a plain string, without `_hex`.
    assert!(
        json.contains("\"resource\":\"b\u{ff}\",\"state\""),
        "{json}"
    );
}
