//! A resource with very many holds stays whole through everything that
//! persists or moves a lock value: RDB (`SAVE` + restart, `DEBUG RELOAD`),
//! AOF rewrites with and without the RDB preamble, the replay of the
//! per-hold effects, a replica attached before the holds were granted (the
//! effects stream) and one attached after (full sync), `DUMP`/`RESTORE`,
//! `MIGRATE`, the largest `LIMIT`, and a value longer than the server's
//! `proto-max-bulk-len`. And many resources with holds: a load costs the
//! same per resource at any count (`many.rs`).
//!
//! `DLOCK_BIG_HOLDS` (default 100,000) is N: a semaphore `LIMIT N` holds N
//! permits and an rwlock holds N `SHARED` readers, each granted by its own
//! `DLOCK.ACQUIRE`, pipelined in batches of 1,000.
//!
//! Every hold is compared, not a count: the stored value decoded from its
//! `DUMP` (token, owner, fence, mode and absolute deadline of each hold,
//! `holds/durable/value.rs`), against what the fill granted and against the
//! value before the move; its `DEBUG DIGEST-VALUE`; the key's expiry (the
//! latest hold deadline); and `DLOCK.INFO`, which lists every live hold.
//! Afterwards each resource must still decide against the whole set: a full
//! semaphore refuses a newcomer until one permit is released, readers keep
//! a writer out. Deadlines of waits grow with N (`budget`), since a command
//! on a resource may cost time linear in its holds.
//! Every test takes `quiet()` (`tests/main.rs`): a fill of N holds is a
//! load, and `many.rs` compares costs.
use crate::common;
// The test-side decoder of the stored layout.
use crate::holds::durable::value;

mod behave;
mod limits;
mod many;
mod moves;
mod persist;
mod replicas;

use common::dump::*;
use common::lock::*;
use common::*;
use redis::{Connection, ConnectionLike};
use std::time::{Duration, Instant};
use value::{Hold, Stored};

const DEFAULT_HOLDS: usize = 100_000;
/// Commands per pipeline round trip while filling.
const BATCH: usize = 1000;
/// A day: no hold may end during a run, however slow the fill.
const BASE_TTL_MS: u64 = 24 * 3600 * 1000;

/// N, from `DLOCK_BIG_HOLDS`: at least 2, since a semaphore of one permit
/// (`LIMIT 1`) is a plain lock.
fn holds_n() -> usize {
    match std::env::var("DLOCK_BIG_HOLDS") {
        Err(_) => DEFAULT_HOLDS,
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n >= 2 => n,
            _ => panic!("DLOCK_BIG_HOLDS must be an integer from 2, not {v:?}"),
        },
    }
}

/// The deadline of any wait on N holds (a sync, a load, a `WAIT`).
fn budget(n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(2 * n as u64)
}

/// A connection whose reads may take as long as `budget(n)`: a pipeline
/// batch, a `SAVE` or a `DEBUG RELOAD` of N holds.
fn big_conn(s: &Server, n: usize) -> Connection {
    let c = s.conn();
    c.set_read_timeout(Some(budget(n))).unwrap();
    c.set_write_timeout(Some(budget(n))).unwrap();
    c
}

/// Each hold's own ttl: holds granted in one batch end seconds apart, so a
/// deadline given to the wrong hold shows.
fn ttl_of(i: usize) -> u64 {
    BASE_TTL_MS + (i % BATCH) as u64 * 1000
}

/// A hold as the fill granted it: its deadline lies in `lo..=hi` (the
/// batch's send and reply times plus its ttl).
#[derive(Debug, Clone)]
struct Granted {
    token: Vec<u8>,
    fence: i64,
    lo: i64,
    hi: i64,
}

/// One filled resource: its key, limit, mode and what was granted, in
/// token order.
#[derive(Debug, Clone)]
struct Resource {
    key: String,
    limit: u32,
    shared: bool,
    granted: Vec<Granted>,
}

impl Resource {
    /// The `ACQUIRE` options of this resource's holds.
    fn opts(&self) -> Vec<String> {
        if self.shared {
            vec!["SHARED".into()]
        } else {
            vec!["LIMIT".into(), self.limit.to_string()]
        }
    }

    /// Grants `tokens` on `key` (all must be granted), pipelined.
    fn fill(c: &mut Connection, key: &str, limit: u32, shared: bool, tokens: &[Vec<u8>]) -> Self {
        let mut r = Resource {
            key: key.to_string(),
            limit,
            shared,
            granted: Vec::with_capacity(tokens.len()),
        };
        let opts = r.opts();
        for (b, batch) in tokens.chunks(BATCH).enumerate() {
            let mut p = redis::pipe();
            for (j, tok) in batch.iter().enumerate() {
                let ttl = ttl_of(b * BATCH + j);
                p.cmd("DLOCK.ACQUIRE").arg(key).arg(tok).arg(ttl).arg(&opts);
            }
            let t0 = now_ms();
            let fences: Vec<Option<i64>> = p
                .query(c)
                .unwrap_or_else(|e| panic!("{key}: batch {b}: {e}"));
            let t1 = now_ms();
            for (j, (tok, f)) in batch.iter().zip(fences).enumerate() {
                let ttl = ttl_of(b * BATCH + j) as i64;
                let fence =
                    f.unwrap_or_else(|| panic!("{key}: {} refused", String::from_utf8_lossy(tok)));
                r.granted.push(Granted {
                    token: tok.clone(),
                    fence,
                    lo: t0 + ttl,
                    hi: t1 + ttl,
                });
            }
        }
        let rising = r.granted.windows(2).all(|w| w[0].fence < w[1].fence);
        assert!(rising, "{key}: every hold its own, later fence");
        r.granted.sort_by(|a, b| a.token.cmp(&b.token));
        r
    }

    /// The stored value holds exactly what the fill granted: every token
    /// once, as its own owner, with its fence, mode and a deadline inside
    /// its grant window; the key ends with the latest hold (or up to
    /// `slack` ms later, after `MIGRATE`).
    fn check(&self, c: &mut Connection, what: &str, slack: i64) {
        let (limit, holds) = multi(c, &self.key);
        assert_eq!(limit, self.limit, "{what}: {} limit", self.key);
        let holds = by_token(&holds);
        assert_eq!(
            holds.len(),
            self.granted.len(),
            "{what}: {} holds",
            self.key
        );
        for (i, (h, g)) in holds.iter().zip(&self.granted).enumerate() {
            let ok = h.token == g.token
                && h.owner == g.token
                && h.fence == g.fence
                && h.shared == self.shared
                && (g.lo..=g.hi).contains(&h.deadline_ms);
            let g = (text(&g.token), g.fence, g.lo..=g.hi);
            assert!(
                ok,
                "{what}: {} hold {i} is {}, granted {g:?}",
                self.key,
                show(h)
            );
        }
        let latest = holds.iter().map(|h| h.deadline_ms).max().unwrap();
        let expires = pexpiretime(c, &self.key);
        assert!(
            (latest..=latest + slack).contains(&expires),
            "{what}: {} expires at {expires}, its latest hold at {latest}",
            self.key
        );
        info_matches(c, &self.key, what);
    }
}

/// The semaphore and the readers of one test, `<prefix>:sem` and
/// `<prefix>:readers`.
#[derive(Debug, Clone)]
struct Big {
    sem: Resource,
    readers: Resource,
}

fn tokens(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}-{i:07}").into_bytes())
        .collect()
}

impl Big {
    /// A full semaphore of N permits and N readers, on `c` (the master).
    fn fill(c: &mut Connection, n: usize, prefix: &str) -> Big {
        let t = Instant::now();
        let sem = Resource::fill(
            c,
            &format!("{prefix}:sem"),
            n as u32,
            false,
            &tokens("tok", n),
        );
        let readers = Resource::fill(
            c,
            &format!("{prefix}:readers"),
            1,
            true,
            &tokens("reader", n),
        );
        eprintln!("filled 2 x {n} holds in {:?}", t.elapsed());
        Big { sem, readers }
    }

    fn keys(&self) -> Vec<String> {
        vec![self.sem.key.clone(), self.readers.key.clone()]
    }

    /// The same holds under other key names (`<key><suffix>`).
    fn renamed(&self, suffix: &str) -> Big {
        let mut b = self.clone();
        b.sem.key.push_str(suffix);
        b.readers.key.push_str(suffix);
        b
    }

    fn check(&self, c: &mut Connection, what: &str) {
        self.sem.check(c, what, 0);
        self.readers.check(c, what, 0);
    }

    fn snaps(&self, c: &mut Connection) -> Vec<Snap> {
        self.keys().iter().map(|k| snap(c, k)).collect()
    }
}

// ---------------------------------------------------------------- reading

/// The limit and every stored hold of a multi-hold key.
fn multi(c: &mut Connection, key: &str) -> (u32, Vec<Hold>) {
    match value::must_store(c, key) {
        Stored::Multi { limit, holds } => (limit, holds),
        Stored::Plain { .. } => panic!("{key}: a plain lock"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A hold for a failure message: token, owner, fence, mode, deadline.
fn show(h: &Hold) -> String {
    let mode = if h.shared { "shared" } else { "exclusive" };
    let (t, o) = (text(&h.token), text(&h.owner));
    format!(
        "{t} (owner {o}, fence {}, {mode}, deadline {})",
        h.fence, h.deadline_ms
    )
}

fn by_token(holds: &[Hold]) -> Vec<Hold> {
    let mut v = holds.to_vec();
    v.sort_by(|a, b| a.token.cmp(&b.token));
    v
}

fn pexpiretime(c: &mut impl ConnectionLike, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

fn last_fence(c: &mut Connection) -> i64 {
    info_field(c, "dlock", "dlock_last_fence")
        .expect("INFO dlock has dlock_last_fence")
        .parse()
        .unwrap()
}

/// `DLOCK.INFO` lists exactly the stored holds (all live): token, owner,
/// fence and mode, each ttl its deadline less the time of the reply.
fn info_matches(c: &mut Connection, key: &str, what: &str) {
    let (limit, stored) = multi(c, key);
    let t0 = now_ms();
    let info = value::list_info(c, key).unwrap_or_else(|| panic!("{what}: {key}: INFO nil"));
    let t1 = now_ms();
    let kind = if limit > 1 { "semaphore" } else { "rwlock" };
    assert_eq!(
        (info.kind.as_str(), info.limit, info.waiters),
        (kind, i64::from(limit), 0),
        "{what}: {key}"
    );
    let stored = by_token(&stored);
    let mut shown = info.holds;
    shown.sort_by(|a, b| a.token.cmp(&b.token));
    assert_eq!(shown.len(), stored.len(), "{what}: {key}: INFO's holds");
    for (i, (s, h)) in shown.iter().zip(&stored).enumerate() {
        let ttl = h.deadline_ms - t1..=h.deadline_ms - t0;
        let ok = (&s.token, &s.owner, s.fence, s.shared) == (&h.token, &h.owner, h.fence, h.shared)
            && ttl.contains(&s.ttl);
        let s = (text(&s.token), text(&s.owner), s.fence, s.shared, s.ttl);
        assert!(
            ok,
            "{what}: {key}: INFO hold {i} is {s:?}, stored {}",
            show(h)
        );
    }
}

/// What a key is, exactly: its holds, digest and expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snap {
    key: String,
    limit: u32,
    holds: Vec<Hold>,
    digest: String,
    expires_at: i64,
}

fn snap(c: &mut Connection, key: &str) -> Snap {
    let (limit, holds) = multi(c, key);
    Snap {
        key: key.to_string(),
        limit,
        holds,
        digest: common::dump::digest(c, key),
        expires_at: pexpiretime(c, key),
    }
}

/// `b` holds what `a` held (names aside; the expiry up to `slack` ms
/// later), reported by the first hold that differs.
fn same(what: &str, a: &[Snap], b: &[Snap], slack: i64) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        let k = &x.key;
        assert_eq!(x.limit, y.limit, "{what}: {k} limit");
        assert_eq!(x.holds.len(), y.holds.len(), "{what}: {k} holds");
        if let Some(i) = (0..x.holds.len()).find(|&i| x.holds[i] != y.holds[i]) {
            panic!(
                "{what}: {k} hold {i} was {}, is {}",
                show(&x.holds[i]),
                show(&y.holds[i])
            );
        }
        assert_eq!(x.digest, y.digest, "{what}: {k} digest");
        let late = y.expires_at - x.expires_at;
        assert!(
            (0..=slack).contains(&late),
            "{what}: {k} expires at {} instead of {}",
            y.expires_at,
            x.expires_at
        );
    }
}
