//! `--permits K` with `--limit N`: `acquire` and `exec` hold K of the N
//! permits at once (`PERMITS K`, docs/lock-kinds.md#weighted-permits);
//! `--permits` without `--limit` above 1, above it, or on `elect` is a
//! usage error.
use crate::cli::{dlock, run, Dir, Server, SEC};

/// `DLOCK.INFO res`'s `used` (the permits its holds take), 0 when absent.
fn used(c: &mut redis::Connection, res: &str) -> i64 {
    let info: Vec<redis::Value> = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    info.chunks(2)
        .find(|kv| kv[0] == redis::Value::BulkString(b"used".to_vec()))
        .map_or(0, |kv| match kv[1] {
            redis::Value::Int(n) => n,
            ref other => panic!("used: {other:?}"),
        })
}

#[test]
fn acquire_and_exec_hold_k_permits_at_once() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    let acquire = |k: &str| {
        run(
            dlock(&url).args([
                "acquire",
                "--no-wait",
                "--limit",
                "4",
                "--permits",
                k,
                "pool",
            ]),
            &dir,
            20 * SEC,
        )
    };
    let (code, out, err) = acquire("3");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.split_whitespace().count(), 2, "TOKEN FENCE: {out}");
    assert_eq!(used(&mut c, "pool"), 3);
    // 2 more do not fit beside 3 of 4: the conflict exit, nothing held.
    let (code, _, err) = acquire("2");
    assert_eq!(code, 75, "{err}");
    assert_eq!(used(&mut c, "pool"), 3);
    // exec holds its 1 permit while the command runs, then releases it.
    let (code, out, err) = run(
        dlock(&url).args([
            "exec",
            "--no-wait",
            "--limit",
            "4",
            "--permits",
            "1",
            "pool",
            "--",
            "sh",
            "-c",
            "echo held",
        ]),
        &dir,
        20 * SEC,
    );
    assert_eq!((code, out.trim()), (0, "held"), "{err}");
    assert_eq!(used(&mut c, "pool"), 3);
}

#[test]
fn permits_without_a_limit_above_1_or_above_it_are_usage_errors() {
    let dir = Dir::new();
    let url = crate::cli::dead_url();
    for args in [
        &["acquire", "--permits", "2", "r"][..],
        &["acquire", "--limit", "1", "--permits", "1", "r"],
        &["acquire", "--limit", "3", "--permits", "4", "r"],
        &["acquire", "--limit", "3", "--permits", "0", "r"],
        &["acquire", "--limit", "3", "--permits", "x", "r"],
        &["exec", "--permits", "2", "r", "--", "true"],
        &["elect", "--limit", "3", "--permits", "2", "r", "--", "true"],
    ] {
        let (code, _, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(
            err.contains("--permits") || err.contains("--limit"),
            "{args:?}: {err}"
        );
    }
    // Within the limit: refused only for the server being unreachable.
    let (code, _, err) = run(
        dlock(&url).args([
            "acquire",
            "--no-wait",
            "--limit",
            "3",
            "--permits",
            "3",
            "r",
        ]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 69, "{err}");
}
