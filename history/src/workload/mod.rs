//! The workload: clients, the fenced sink and the fault schedule
//! (docs/history.md, "What runs").
//!
//! - `servers`: the two groups (`main`: master and replica; `lin`), their
//!   proxies and the current master clients connect to.
//! - `record`: the recorder (clock, op ids, the history file, the sinks).
//! - `conn`, `ops`: a client's RESP2 connection; commands and replies.
//! - `client`: sending, recording, retrying and probing one operation.
//! - `choose`: what a client does next and what it then believes.
//! - `election`: candidates and observers of an election (`e0`).
//! - `sessions`: pairs of clients with sessions (`s*`).
//! - `guard`: writers through `DLOCK.GUARD` to sinks in Redis (`g*`).
//! - `priority`: a stream of higher priorities and a waiter of priority 0
//!   (`p0`).
//! - `handover`: holders that hand the lock to a waiter (`h0`).
//! - `permits`: requests for several permits at once and resizes (`w0`).
//! - `faults`: the fault thread.
mod choose;
mod client;
mod conn;
mod election;
mod faults;
mod guard;
mod handover;
mod ops;
mod permits;
mod priority;
mod record;
mod servers;
mod sessions;

use crate::history::{Event, Kind, Meta, Resource};
use record::Recorder;
use servers::Group;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub struct Config {
    pub secs: u64,
    pub seed: u64,
    /// Clients of the locks workload.
    pub clients: u32,
    /// The history is written here as it happens.
    pub out: PathBuf,
    /// What runs: `locks`, `election` or both.
    pub workloads: Workloads,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workloads {
    /// Every kind of lock (`m*`, `l*`): the `clients` clients.
    pub locks: bool,
    /// Leader election on `e0`: `election::CANDIDATES` candidates and
    /// `election::OBSERVERS` observers, numbered after the locks' clients.
    pub election: bool,
    /// Sessions on `s*`: `sessions::PAIRS` threads of two clients each,
    /// numbered after the election's.
    pub sessions: bool,
    /// Guarded writes on `g*`: `guard::WRITERS` clients, numbered after
    /// the sessions'.
    pub guard: bool,
    /// Priorities on `p0`: `priority::STREAM` clients at a higher
    /// priority and `priority::WAITERS` at 0, numbered after the writers.
    pub priority: bool,
    /// Handovers on `h0`: `handover::CLIENTS` clients, numbered after the
    /// priority workload's.
    pub handover: bool,
    /// Weighted permits and resizes on `w0`: `permits::HOLDERS` holders,
    /// `permits::RESIZERS` resizer and `permits::ANCHORS` anchor, numbered
    /// after the handover's.
    pub permits: bool,
}

impl Workloads {
    pub fn names(self) -> Vec<String> {
        let mut v = Vec::new();
        if self.locks {
            v.push("locks".to_string());
        }
        if self.election {
            v.push("election".to_string());
        }
        if self.sessions {
            v.push("sessions".to_string());
        }
        if self.guard {
            v.push("guard".to_string());
        }
        if self.priority {
            v.push("priority".to_string());
        }
        if self.handover {
            v.push("handover".to_string());
        }
        if self.permits {
            v.push("permits".to_string());
        }
        v
    }
}

/// What clients and the fault thread share.
pub struct Ctx {
    pub rec: Recorder,
    pub groups: [Group; 2],
    /// When clients stop starting operations and faults stop.
    pub deadline: Instant,
    /// A fault could not be undone: everyone stops.
    pub abort: AtomicBool,
    /// Per client: the fault thread killed its connection (`CLIENT KILL`).
    pub killed: Vec<AtomicBool>,
    /// Per client and group: the `CLIENT ID` of its current connection.
    pub ids: Vec<[AtomicI64; 2]>,
    /// The TTL of every `lin` hold: longer than the run.
    pub lin_ttl: u64,
    /// Clients queued on or holding `m5` now (`choose::FIFO_RES`).
    pub fifo_users: AtomicUsize,
    /// The tokens the handover's clients wait on `h0` with now (or are
    /// about to): whom a holder may hand over to.
    pub handover_waiting: Mutex<Vec<String>>,
}

/// How long after the deadline client threads may take to finish.
const FINISH_FOR: Duration = Duration::from_secs(60);

pub fn run(cfg: &Config) -> Result<Vec<Event>, String> {
    let rec = Recorder::create(&cfg.out)?;
    rec.meta(Event::Meta(Meta {
        seed: cfg.seed,
        secs: cfg.secs,
        clients: cfg.clients,
        server: server_version(),
        broken: std::env::var("HISTORY_BROKEN")
            .ok()
            .filter(|b| !b.is_empty()),
        resources: resources(cfg.workloads),
        workloads: cfg.workloads.names(),
        priority_aging_ms: Some(servers::PRIORITY_AGING_MS),
        proxied: Some(proxied(cfg)),
    }));
    let (servers, groups) = servers::start(cfg.seed)?;
    // Every client, of either workload, has its slot in `killed` and `ids`.
    let sessions_from = cfg.clients + election::CANDIDATES + election::OBSERVERS;
    let guard_from = sessions_from + 2 * sessions::PAIRS;
    let priority_from = guard_from + guard::WRITERS;
    let handover_from = priority_from + priority::STREAM + priority::WAITERS;
    let permits_from = handover_from + handover::CLIENTS;
    let all = permits_from + permits::HOLDERS + permits::RESIZERS + permits::ANCHORS;
    let ctx = Arc::new(Ctx {
        rec,
        groups,
        deadline: Instant::now() + Duration::from_secs(cfg.secs),
        abort: AtomicBool::new(false),
        killed: (0..all).map(|_| AtomicBool::new(false)).collect(),
        ids: (0..all)
            .map(|_| [AtomicI64::new(0), AtomicI64::new(0)])
            .collect(),
        lin_ttl: (cfg.secs + 600) * 1000,
        fifo_users: AtomicUsize::new(0),
        handover_waiting: Mutex::new(Vec::new()),
    });
    let seed = cfg.seed;
    let fault_ctx = ctx.clone();
    let faults = thread::Builder::new()
        .name("faults".into())
        .spawn(move || faults::run(&fault_ctx, servers, seed))
        .map_err(|e| format!("spawning the fault thread: {e}"))?;
    let mut clients = Vec::new();
    let mut spawn = |c: u32, name: &str, body: fn(&Ctx, u32, u64) -> Result<(), String>| {
        let ctx = ctx.clone();
        thread::Builder::new()
            .name(format!("{name} {c}"))
            .spawn(move || body(&ctx, c, seed))
            .map(|h| clients.push((c, h)))
            .map_err(|e| format!("spawning {name} {c}: {e}"))
    };
    if cfg.workloads.locks {
        for c in 0..cfg.clients {
            spawn(c, "client", client_loop)?;
        }
    }
    if cfg.workloads.election {
        let first = cfg.clients;
        for c in first..first + election::CANDIDATES {
            spawn(c, "candidate", election::candidate_loop)?;
        }
        for c in first + election::CANDIDATES..sessions_from {
            spawn(c, "observer", election::observer_loop)?;
        }
    }
    if cfg.workloads.sessions {
        for pair in 0..sessions::PAIRS {
            spawn(sessions_from + 2 * pair, "sessions", sessions::pair_loop)?;
        }
    }
    if cfg.workloads.guard {
        for c in guard_from..priority_from {
            spawn(c, "writer", guard::writer_loop)?;
        }
    }
    if cfg.workloads.priority {
        for c in priority_from..priority_from + priority::STREAM {
            spawn(c, "priority stream", priority::stream_loop)?;
        }
        for c in priority_from + priority::STREAM..handover_from {
            spawn(c, "priority 0 waiter", priority::waiter_loop)?;
        }
    }
    if cfg.workloads.handover {
        for c in handover_from..permits_from {
            spawn(c, "handover", handover::client_loop)?;
        }
    }
    if cfg.workloads.permits {
        for c in permits_from..permits_from + permits::HOLDERS {
            spawn(c, "permits", permits::holder_loop)?;
        }
        let anchors_from = permits_from + permits::HOLDERS + permits::RESIZERS;
        for c in permits_from + permits::HOLDERS..anchors_from {
            spawn(c, "resizer", permits::resizer_loop)?;
        }
        for c in anchors_from..all {
            spawn(c, "anchor", permits::anchor_loop)?;
        }
    }
    let (servers, fault_result) = faults
        .join()
        .map_err(|_| "the fault thread panicked".to_string())?;
    if let Err(e) = &fault_result {
        ctx.abort.store(true, Ordering::SeqCst);
        eprintln!("check-history: {e}");
    }
    let mut errors = Vec::new();
    let finish_by = ctx.deadline.max(Instant::now()) + FINISH_FOR;
    for (c, h) in clients {
        while !h.is_finished() && Instant::now() < finish_by {
            thread::sleep(Duration::from_millis(20));
        }
        if !h.is_finished() {
            errors.push(format!(
                "client {c} did not finish within {FINISH_FOR:?} after the deadline"
            ));
            ctx.abort.store(true, Ordering::SeqCst);
            continue;
        }
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push(format!("client {c} panicked")),
        }
    }
    if cfg.workloads.guard && errors.is_empty() && fault_result.is_ok() {
        if let Err(e) = guard::read_sinks(&ctx, guard_from, seed) {
            errors.push(e);
        }
    }
    let logs = servers.logs();
    drop(servers);
    let events = ctx.rec.finish()?;
    // A fault that failed is most often a server that died (a crash shows
    // only in its log): the logs go with the error.
    fault_result.map_err(|e| format!("{e}\n{logs}"))?;
    if !errors.is_empty() {
        return Err(format!("{}\n{logs}", errors.join("\n")));
    }
    Ok(events)
}

/// The clients behind the lost-reply proxy: every fourth of the locks'
/// clients and of the election's (`Client::new`); the later workloads'
/// clients all connect directly.
fn proxied(cfg: &Config) -> Vec<u32> {
    let direct_from = cfg.clients + election::CANDIDATES + election::OBSERVERS;
    (0..direct_from).filter(|c| c % 4 == 3).collect()
}

fn client_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut client = client::Client::new(ctx, c, seed);
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        client.step()?;
        let think = client.rng.below(6);
        thread::sleep(Duration::from_millis(think));
    }
    client.forget_expired();
    client.release_all()
}

fn resources(workloads: Workloads) -> Vec<Resource> {
    let r = |name: &str, group: &str, kind: Kind| Resource {
        name: name.into(),
        group: group.into(),
        kind,
        election: false,
    };
    let mut v = vec![
        r("m0", "main", Kind::Plain),
        r("m1", "main", Kind::Plain),
        r("m2", "main", Kind::Rwlock),
        r("m3", "main", Kind::Rwlock),
        r("m4", "main", Kind::Semaphore { limit: 3 }),
        r("m5", "main", Kind::Plain),
        r("l0", "lin", Kind::Plain),
        r("l1", "lin", Kind::Rwlock),
        r("l2", "lin", Kind::Semaphore { limit: 2 }),
    ];
    if workloads.sessions {
        v.extend([
            r("s0", "main", Kind::Plain),
            r("s1", "main", Kind::Plain),
            r("s2", "main", Kind::Plain),
            r("s3", "main", Kind::Rwlock),
            r("s4", "main", Kind::Semaphore { limit: 2 }),
        ]);
    }
    if workloads.guard {
        v.extend([
            r("g0", "main", Kind::Plain),
            r("g1", "main", Kind::Rwlock),
            r(
                "g2",
                "main",
                Kind::Semaphore {
                    limit: guard::LIMIT,
                },
            ),
        ]);
    }
    if workloads.priority {
        v.push(r(priority::RESOURCE, "main", Kind::Plain));
    }
    if workloads.handover {
        v.push(r(handover::RESOURCE, "main", Kind::Plain));
    }
    if workloads.permits {
        v.push(r(
            permits::RESOURCE,
            "main",
            Kind::Semaphore {
                limit: permits::LIMIT,
            },
        ));
    }
    if workloads.election {
        v.push(Resource {
            election: true,
            ..r(election::ELECTION, "main", Kind::Plain)
        });
    }
    v
}

/// The first line of `<server> --version`.
fn server_version() -> String {
    let bin = crate::common::server_binary();
    match std::process::Command::new(&bin).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
        Err(e) => format!("{}: {e}", bin.to_string_lossy()),
    }
}
