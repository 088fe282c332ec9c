//! `dlock resize RESOURCE LIMIT`: a held semaphore's limit changed
//! (`DLOCK.RESIZE`), up granting a waiter at once; nothing held, not a
//! semaphore, a bad limit and several `--url` each with its exit code,
//! changing nothing.
use crate::cli::{dead_url, dlock, run, Dir, Server, SEC};
use crate::common::server::waiter::Waiter;

/// `DLOCK.INFO res`'s `limit`, None when nothing holds it.
fn limit(c: &mut redis::Connection, res: &str) -> Option<i64> {
    let info: redis::Value = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    let redis::Value::Array(fields) = info else {
        return None;
    };
    fields
        .chunks(2)
        .find(|kv| kv[0] == redis::Value::BulkString(b"limit".to_vec()))
        .map(|kv| match kv[1] {
            redis::Value::Int(n) => n,
            ref other => panic!("limit: {other:?}"),
        })
}

fn acquire(c: &mut redis::Connection, res: &str, token: &str, extra: &[&str]) -> Option<i64> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(token)
        .arg(60_000)
        .arg(extra)
        .query(c)
        .unwrap()
}

#[test]
fn resize_up_grants_a_waiter_and_prints_both_limits() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    for t in ["a", "b"] {
        assert!(acquire(&mut c, "pool", t, &["LIMIT", "2"]).is_some());
    }
    let mut wait = redis::cmd("DLOCK.ACQUIRE");
    wait.arg(&["pool", "c", "60000", "LIMIT", "2", "WAIT", "0"]);
    let waiter = Waiter::send(&server, wait);
    crate::cli::wait_until(10 * SEC, "c queued", || {
        crate::common::waiters(&mut c, "pool") == 1
    });

    let (code, out, err) = run(dlock(&url).args(["resize", "pool", "3"]), &dir, 20 * SEC);
    assert_eq!((code, out.as_str()), (0, "pool: limit 2 -> 3\n"), "{err}");
    assert_eq!(limit(&mut c, "pool"), Some(3));
    assert!(
        waiter.granted().0 > 0,
        "the third permit went to the waiter"
    );

    let (code, out, err) = run(
        dlock(&url).args(["resize", "--json", "pool", "5"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "{\"resource\":\"pool\",\"previous\":3,\"limit\":5}\n");
    assert_eq!(limit(&mut c, "pool"), Some(5));
}

/// A bad limit and several `--url` are usage errors before any server is
/// asked; nothing held is exit 1, a plain lock the server's refusal (70);
/// none of them changes anything.
#[test]
fn what_resize_refuses_changes_nothing() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    assert!(acquire(&mut c, "pool", "a", &["LIMIT", "2"]).is_some());
    assert!(acquire(&mut c, "lock", "a", &[]).is_some());
    for args in [
        &["resize", "pool", "0"][..],
        &["resize", "pool", "1"],
        &["resize", "pool", "x"],
        &["resize", "pool", "-3"],
        &["resize", "pool", "2.5"],
        &["resize", "pool", "1048577"],
        &["resize", "pool"],
        &["resize", "pool", "3", "4"],
        &["resize", "--limit", "3", "pool", "3"],
    ] {
        let (code, out, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!((code, out.as_str()), (64, ""), "{args:?}: {err}");
        assert!(err.contains("dlock resize --help"), "{args:?}: {err}");
        assert_eq!(limit(&mut c, "pool"), Some(2), "{args:?} changed the limit");
    }
    let (code, _, err) = run(
        dlock(&url).args(["--url", &url, "--url", &dead_url(), "resize", "pool", "3"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("one --url"), "{err}");
    assert_eq!(limit(&mut c, "pool"), Some(2));

    let (code, out, err) = run(dlock(&url).args(["resize", "free", "3"]), &dir, 20 * SEC);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("nothing holds free"), "{err}");
    let (code, out, _) = run(
        dlock(&url).args(["resize", "--json", "free", "3"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 1);
    assert_eq!(
        out,
        "{\"resource\":\"free\",\"previous\":null,\"limit\":null}\n"
    );
    assert_eq!(limit(&mut c, "free"), None);

    let (code, out, err) = run(dlock(&url).args(["resize", "lock", "3"]), &dir, 20 * SEC);
    assert_eq!((code, out.as_str()), (70, ""), "{err}");
    assert!(err.contains("applies to a semaphore"), "{err}");
    assert!(
        crate::cli::holder(&mut c, "lock").is_some(),
        "the lock stays held"
    );
    assert_eq!(limit(&mut c, "pool"), Some(2));
}

#[test]
fn resize_help_names_its_arguments_and_exit_codes() {
    let dir = Dir::new();
    let (code, out, _) = run(
        dlock(&dead_url()).args(["resize", "--help"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0);
    for s in ["RESOURCE LIMIT", "--json", "1048576", "Exit status"] {
        assert!(out.contains(s), "dlock resize --help lacks {s}");
    }
    let (_, main, _) = run(dlock(&dead_url()).args(["--help"]), &dir, 20 * SEC);
    assert!(main.contains("resize RESOURCE LIMIT"), "{main}");
    assert!(main.contains("dlock.resize"), "{main}");
}
