//! Rollbacks and mixed versions: what this build writes loads in the
//! previous release, and back (docs/operations.md#compatibility). The
//! previous release is the commit named in `.ci/previous-release`, built
//! with `.ci/baseline-module.sh`; `make test` passes its module in
//! `DLOCK_PREVIOUS_MODULE`.
//!
//! Every kind the previous release knows (a plain lock, `SHARED` holds, a
//! `LIMIT` semaphore, `OWNER` reentrant holds, a set's members) goes
//! through an RDB, an AOF (its effects, and a rewrite without the RDB
//! preamble), `DUMP`/`RESTORE`, `MIGRATE`, and replication in both
//! directions, each way between this build and the previous release. Each
//! key is compared exactly: its stored value decoded from `DUMP` (token,
//! fence, and every hold's absolute deadline) and the key's `PEXPIRETIME`
//! (a plain lock's absolute deadline). Leases last 10 minutes: nothing ends
//! during a test.
use crate::common;
// The test-side decoder of the stored layout.
use crate::holds::durable::value;

mod files;
mod payloads;
mod replicas;

use common::dump::*;
use common::lock::*;
use common::*;
use redis::{Connection, ConnectionLike};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const TTL_MS: u64 = 600_000;
const SYNC: Duration = Duration::from_secs(20);

/// The previous release's module. `DLOCK_PREVIOUS_MODULE` (what `make test`
/// sets) must name a file. Without it the module is built here from the
/// commit in `.ci/previous-release`, except under CI (`CI` set), where a
/// missing module is a failure: a skipped rollback test would pass.
fn previous_module() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("DLOCK_PREVIOUS_MODULE") {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "DLOCK_PREVIOUS_MODULE={} is not a file",
                p.display()
            );
            return p;
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "DLOCK_PREVIOUS_MODULE is not set: CI runs this suite through `make test`, \
             which builds the previous release's module"
        );
        let root = workspace_root();
        let commit = std::fs::read_to_string(root.join(".ci/previous-release"))
            .expect(".ci/previous-release");
        let commit = commit
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .expect("a commit in .ci/previous-release")
            .trim()
            .to_string();
        let out = Command::new(root.join(".ci/baseline-module.sh"))
            .arg(&commit)
            .current_dir(&root)
            .output()
            .expect("run .ci/baseline-module.sh");
        assert!(
            out.status.success(),
            "building the previous release ({commit}) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

/// A server of the previous release.
fn previous() -> ServerBuilder {
    Server::builder().module(previous_module())
}

/// A server of this build.
fn current() -> ServerBuilder {
    Server::builder()
}

// ---------------------------------------------------------------- kinds

/// The resources every test makes: one of each kind the previous release
/// knows. `ACQUIRE`'s own options only: both releases parse them the same.
fn keys() -> Vec<String> {
    ["plain", "shared", "sem", "owner", "{set}:a", "{set}:b"]
        .map(String::from)
        .to_vec()
}

fn take(c: &mut impl ConnectionLike, key: &str, tok: &str, ttl: u64, opts: &[&str]) -> i64 {
    let r: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg(tok)
        .arg(ttl)
        .arg(opts)
        .query(c)
        .unwrap_or_else(|e| panic!("ACQUIRE {key} {tok} {opts:?}: {e}"));
    r.unwrap_or_else(|| panic!("ACQUIRE {key} {tok} {opts:?}: busy"))
}

/// Grants every kind on `c` (a master), each hold with its own TTL so that
/// deadlines differ; `tag` makes the tokens of one call unique.
fn make_kinds(c: &mut Connection, tag: &str) {
    let t = |s: &str| format!("{s}-{tag}");
    take(c, "plain", &t("p"), TTL_MS, &[]);
    take(c, "shared", &t("r1"), TTL_MS, &["SHARED"]);
    take(c, "shared", &t("r2"), TTL_MS - 1000, &["SHARED"]);
    take(c, "sem", &t("s1"), TTL_MS, &["LIMIT", "3"]);
    take(c, "sem", &t("s2"), TTL_MS - 2000, &["LIMIT", "3"]);
    take(c, "owner", &t("o1"), TTL_MS, &["OWNER", "worker"]);
    take(c, "owner", &t("o2"), TTL_MS - 3000, &["OWNER", "worker"]);
    let set: Option<i64> = redis::cmd("DLOCK.MACQUIRE")
        .arg(2)
        .arg("{set}:a")
        .arg("{set}:b")
        .arg(t("m"))
        .arg(TTL_MS - 4000)
        .query(c)
        .expect("MACQUIRE");
    assert!(set.is_some(), "MACQUIRE: busy");
}

/// One key exactly: its stored value (holds sorted by token, so that a
/// release storing them in another order compares equal) and the key's
/// absolute deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    key: String,
    value: value::Stored,
    expires_at: i64,
}

fn snapshot(c: &mut Connection, key: &str) -> Snapshot {
    let mut value = value::must_store(c, key);
    if let value::Stored::Multi { holds, .. } = &mut value {
        holds.sort_by(|a, b| a.token.cmp(&b.token));
    }
    let expires_at: i64 = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    assert!(expires_at > now_ms(), "{key}: expires at {expires_at}");
    Snapshot {
        key: key.to_string(),
        value,
        expires_at,
    }
}

fn snapshots(c: &mut Connection) -> Vec<Snapshot> {
    keys().iter().map(|k| snapshot(c, k)).collect()
}

/// The same keys, tokens, fences and absolute deadlines.
fn assert_same(what: &str, want: &[Snapshot], got: &[Snapshot]) {
    assert_eq!(want.len(), got.len(), "{what}");
    for (x, y) in want.iter().zip(got) {
        assert_eq!(x, y, "{what}: {} differs", x.key);
    }
}

/// The kinds still behave on `c` after the move, as `DLOCK.INFO` shows
/// them: a plain lock keeps others out, every hold is there with its fence.
/// Changes nothing (a retry would move a deadline).
fn still_held(c: &mut Connection, snaps: &[Snapshot]) {
    for s in snaps {
        match &s.value {
            value::Stored::Plain { token, fence } => {
                assert_eq!(acquire(c, &s.key, "intruder", 10_000), None, "{}", s.key);
                let i = held(c, &s.key);
                assert_eq!((&i.token, i.fence), (token, *fence), "{}", s.key);
            }
            value::Stored::Multi { holds, .. } => {
                let i = value::list_info(c, &s.key).unwrap_or_else(|| panic!("{}", s.key));
                let mut shown: Vec<(Vec<u8>, i64)> =
                    i.holds.iter().map(|h| (h.token.clone(), h.fence)).collect();
                let mut want: Vec<(Vec<u8>, i64)> =
                    holds.iter().map(|h| (h.token.clone(), h.fence)).collect();
                shown.sort();
                want.sort();
                assert_eq!(shown, want, "{}: DLOCK.INFO", s.key);
            }
        }
    }
}

/// The restart quarantine's facts a node holds: the longest TTL granted
/// (`INFO dlock`, in both releases).
fn longest_ttl(c: &mut Connection) -> i64 {
    info_field(c, "dlock", "dlock_longest_ttl")
        .expect("INFO dlock has dlock_longest_ttl")
        .parse()
        .unwrap()
}

/// A grant on a new resource: above every fence `snaps` hold (the fence
/// clock's mark came along, or the clock is past them anyway).
fn fresh_grant_above(c: &mut Connection, snaps: &[Snapshot], what: &str) {
    let top = snaps
        .iter()
        .flat_map(|s| match &s.value {
            value::Stored::Plain { fence, .. } => vec![*fence],
            value::Stored::Multi { holds, .. } => holds.iter().map(|h| h.fence).collect(),
        })
        .max()
        .unwrap();
    let f = take(c, "fresh", "newcomer", 10_000, &[]);
    assert!(f > top, "{what}: fence {f} not above {top}");
    assert_eq!(release(c, "fresh", "newcomer"), 1);
}
