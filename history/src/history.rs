//! The history file: one JSON object per line (docs/history.md).
//!
//! Times are microseconds on the recorder's monotonic clock since the run
//! started. A `process` is Jepsen's logical process: a client gets a new one
//! after an operation whose outcome it could not learn (`info`), so every
//! process has at most one operation in flight and an `info` operation may
//! take effect at any point up to its `complete` time (the recorder only
//! gives up on a connection it has closed or that the server closed, never
//! on a slow reply; see `Outcome::Info`).
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, Write};

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The first line: what the run was.
    Meta(Meta),
    /// A client sent an operation.
    Invoke {
        t: u64,
        process: u64,
        client: u32,
        id: u64,
        op: Op,
    },
    /// The operation `id` ended.
    Complete {
        t: u64,
        process: u64,
        client: u32,
        id: u64,
        outcome: Outcome,
    },
    /// A holder's write to the fenced sink of `resource`, made while it
    /// believed it held the resource under `fence`, and whether the sink
    /// took it (`highest` is the sink's highest accepted fence after it).
    Write {
        t: u64,
        client: u32,
        resource: String,
        token: String,
        fence: u64,
        accepted: bool,
        highest: u64,
        /// Made after the holder's belief ended: a leader that was paused
        /// past its lease writes what it had decided to write before.
        /// Nothing requires the sink to accept it.
        #[serde(default, skip_serializing_if = "is_false")]
        late: bool,
    },
    /// A fault injected into the servers (`Start` .. `End`).
    Fault {
        t: u64,
        fault: FaultKind,
        phase: Phase,
        /// The server group it hit (`main` or `lin`).
        group: String,
        /// The workload client it hit (`ClientKill`, `ClientUnblock`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<u32>,
        /// What it hit, e.g. the port promoted, the mode of a pause.
        detail: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub seed: u64,
    pub secs: u64,
    pub clients: u32,
    /// The server binary, as `--version` prints it.
    pub server: String,
    /// The planted bug the module was built with, if any.
    pub broken: Option<String>,
    pub resources: Vec<Resource>,
    /// The workloads that ran (`locks`, `election`): coverage is asked
    /// only of those. Histories written before there was a choice ran the
    /// locks alone.
    #[serde(default = "locks_only")]
    pub workloads: Vec<String>,
    /// The servers' `dlock.priority-aging-ms`: how many ms of waiting one
    /// level of `PRIORITY` is worth. Absent in histories written before
    /// priorities, whose requests named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_aging_ms: Option<u64>,
    /// The clients that talk through the lost-reply proxy. Absent in
    /// histories written before it was recorded: every fourth client
    /// (`client % 4 == 3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxied: Option<Vec<u32>>,
}

fn locks_only() -> Vec<String> {
    vec!["locks".into()]
}

/// A resource of the workload: which server group holds it and what kind
/// of lock the workload uses it as.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub name: String,
    /// `main`: short leases, every fault. `lin`: leases longer than the
    /// run on a server that never loses an acknowledged write, so its
    /// history must be linearizable against the sequential specification.
    pub group: String,
    pub kind: Kind,
    /// An election's resource: a plain lock whose holders are leaders and
    /// whose fences are their terms, followed by observers.
    #[serde(default, skip_serializing_if = "is_false")]
    pub election: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `ACQUIRE` without options, and sets.
    Plain,
    /// `SHARED` and exclusive holds, `OWNER` (reentrant, upgrade, downgrade),
    /// and sets.
    Rwlock,
    /// `LIMIT n`.
    Semaphore { limit: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    Acquire,
    Release,
    Extend,
    Info,
    Macquire,
    Mrelease,
    Mextend,
    /// `DLOCK.OBSERVE resource [SINCE version WAIT ms]`.
    Observe,
    /// `DLOCK.SESSION OPEN session ttl [BIND] [LOCKDELAY ms]` (no resources).
    SessionOpen,
    /// `DLOCK.SESSION KEEPALIVE session ttl`.
    SessionKeepalive,
    /// `DLOCK.SESSION CLOSE session`.
    SessionClose,
    /// `DLOCK.SESSION KILL session`, sent by another client.
    SessionKill,
    /// The client closed its connection to the group (no command sent):
    /// a session opened on it with `BIND` ends.
    Disconnect,
    /// `DLOCK.GUARD resource TOKEN token | FENCE fence` around a write to
    /// the resource's guarded sink (`guard` says what).
    Guard,
    /// A read of the resource's guarded sink: its list and its counter.
    SinkRead,
    /// `DLOCK.RESIZE resource limit`: the limit of a held semaphore
    /// becomes `limit` (the reply: the previous one, nil when unheld).
    Resize,
}

impl Command {
    /// The commands that name a session and no resource.
    pub fn is_session(self) -> bool {
        matches!(
            self,
            Command::SessionOpen
                | Command::SessionKeepalive
                | Command::SessionClose
                | Command::SessionKill
                | Command::Disconnect
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Exclusive,
    Shared,
}

/// What was sent. `resources` has one name but for the set commands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub command: Command,
    pub resources: Vec<String>,
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(default = "exclusive", skip_serializing_if = "is_exclusive")]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// `PRIORITY p` (absent: none named, which is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u16>,
    /// `PERMITS k` beside `LIMIT` (absent: one permit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// `RELEASE ... TO token`: the waiter the hold is handed over to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Followed by `WAIT 1` on the same connection (the durability recipe):
    /// a grant no replica acknowledged is released and reported `Fail`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub durable: bool,
    /// The operation whose outcome was lost and this one repeats with the
    /// same token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<u64>,
    /// The client closes its connection if no reply came after this long
    /// (a waiter that leaves): its outcome is `Info { reason: "left" }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leave_after_ms: Option<u64>,
    /// A `RELEASE` sent only to learn whether a waiter that was told nil,
    /// unblocked or killed holds anything: it must answer 0.
    #[serde(default, skip_serializing_if = "is_false")]
    pub probe: bool,
    /// `OBSERVE`'s `SINCE`: the version of the last state the observer
    /// was shown (with `wait_ms`: it waits for another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The session: `ACQUIRE`/`MACQUIRE ... SESSION id`, the session a
    /// session command names, the session whose end a probe `RELEASE`
    /// checks (not sent), the `BIND` session a `disconnect` ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// `OPEN ... BIND`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub bind: bool,
    /// `OPEN ... LOCKDELAY ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// `GUARD`: the proof and the write it guards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<Guarded>,
}

/// A guarded write: `RPUSH {resource}:sink entry`, and with `batch` also
/// `INCR {resource}:count` in the same guard (`BATCH 2`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Guarded {
    /// Proven by `FENCE fence`; by `TOKEN` (the op's token) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// What is pushed: `<client>:<fence>:<n>`, unique in the run.
    pub entry: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub batch: bool,
    /// Sent from a Lua script: `EVAL "return redis.call('DLOCK.GUARD',
    /// unpack(ARGV))"` with the resource and the sink's keys declared.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lua: bool,
}

impl Op {
    /// `command` on `resources` for `token`, with no option set.
    pub fn new(command: Command, resources: Vec<String>, token: String) -> Op {
        Op {
            command,
            resources,
            token,
            ttl_ms: None,
            mode: Mode::Exclusive,
            limit: None,
            owner: None,
            wait_ms: None,
            priority: None,
            permits: None,
            to: None,
            durable: false,
            retry_of: None,
            leave_after_ms: None,
            probe: false,
            since: None,
            session: None,
            bind: false,
            lock_delay_ms: None,
            guard: None,
        }
    }
}

fn exclusive() -> Mode {
    Mode::Exclusive
}
fn is_exclusive(m: &Mode) -> bool {
    *m == Mode::Exclusive
}
fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The server replied.
    Ok { value: Value },
    /// The server replied with an error: nothing changed.
    Fail { error: String },
    /// Indeterminate: the connection closed, or the reply was dropped,
    /// before a reply was read. `reason` says what the client saw.
    Info { reason: String },
}

/// A reply, decoded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    /// `ACQUIRE`/`MACQUIRE`: granted with this fence.
    Fence(u64),
    /// `ACQUIRE`/`MACQUIRE`: not granted (busy, or `WAIT` timed out);
    /// `INFO`: free.
    Nil,
    /// `RELEASE`, `EXTEND`, `MRELEASE`, `MEXTEND`.
    Int(i64),
    /// `ACQUIRE`/`MACQUIRE` with `durable`: granted with this fence, but
    /// `WAIT 1` saw no replica acknowledge it, so the client released it
    /// at once (the next operation) and never relied on it.
    Unacknowledged(u64),
    /// `INFO` of a held or reserved resource.
    Holds(InfoView),
    /// `OBSERVE`: a state, its version and what `INFO` shows of it
    /// (`holds` absent when free). A wait that ran out is `Nil`.
    Observed {
        version: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holds: Option<InfoView>,
    },
    /// `sink_read`: the guarded sink's entries, oldest first, and its
    /// counter (0 when unset).
    Sink { entries: Vec<String>, count: i64 },
}

/// `DLOCK.INFO`, in one form for every kind (a plain lock is one exclusive
/// hold whose owner is its token; a reserved resource has no holds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InfoView {
    pub holds: Vec<HoldView>,
    pub waiters: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HoldView {
    pub token: String,
    pub owner: String,
    pub fence: u64,
    pub mode: Mode,
    pub ttl_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// kill -9 of the master and a restart on its data, `appendfsync always`.
    Kill9Always,
    /// The same with `appendfsync everysec` (the restart quarantine).
    Kill9Everysec,
    /// kill -9 of the master, its replica promoted (`REPLICAOF NO ONE`,
    /// the promotion quarantine), the old master back as a replica.
    Failover,
    /// As `Failover`, but the replica is stopped (SIGSTOP) first and resumed
    /// after the kill, so the promoted replica missed the last writes.
    FailoverStale,
    /// A reply dropped by the proxy after the command ran.
    LostReply,
    ClientPause,
    /// `EVAL` spinning for a while: the event loop is held.
    SlowScript,
    ClientKill,
    ClientUnblock,
    DebugSleep,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Start,
    End,
}

/// Appends events as JSON lines.
pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Writer { out }
    }
    pub fn event(&mut self, e: &Event) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, e)?;
        self.out.write_all(b"\n")
    }
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Reads a whole history; a line that does not parse, or a history the
/// checker cannot judge (see `Shape`), is an error naming its line.
pub fn read(input: impl BufRead) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    let mut shape = Shape::default();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let e = serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?;
        shape
            .event(&e)
            .map_err(|e| format!("line {}: {e}", n + 1))?;
        events.push(e);
    }
    if events.is_empty() {
        return Err("empty: not a history (its first line is the meta line)".into());
    }
    Ok(events)
}

/// What makes a list of events a history the checker can judge: the meta
/// line first and only there, each operation id invoked once, the
/// single-resource commands with one resource and the set commands with at
/// least one, every resource named by the meta line.
#[derive(Default)]
struct Shape {
    resources: Option<std::collections::HashSet<String>>,
    ids: std::collections::HashSet<u64>,
}

impl Shape {
    fn event(&mut self, e: &Event) -> Result<(), String> {
        let known = |shape: &Self, r: &str| -> Result<(), String> {
            match &shape.resources {
                Some(set) if set.contains(r) => Ok(()),
                _ => Err(format!("resource {r:?} is not in the meta line")),
            }
        };
        match (e, &self.resources) {
            (Event::Meta(m), None) => {
                self.resources = Some(m.resources.iter().map(|r| r.name.clone()).collect());
                Ok(())
            }
            (Event::Meta(_), Some(_)) => Err("a second meta line".into()),
            (_, None) => Err("the first line is not the meta line: not a history".into()),
            (Event::Invoke { id, op, .. }, Some(_)) => {
                if !self.ids.insert(*id) {
                    return Err(format!("operation {id} invoked twice"));
                }
                let sets = matches!(
                    op.command,
                    Command::Macquire | Command::Mrelease | Command::Mextend
                );
                let n = op.resources.len();
                if op.command.is_session() {
                    if n != 0 || op.session.is_none() {
                        return Err(format!(
                            "operation {id}: {:?} names a session and no resource",
                            op.command
                        ));
                    }
                    return Ok(());
                }
                if n == 0 || (!sets && n != 1) {
                    return Err(format!(
                        "operation {id}: {n} resources for {:?}",
                        op.command
                    ));
                }
                op.resources.iter().try_for_each(|r| known(self, r))
            }
            (Event::Write { resource, .. }, Some(_)) => known(self, resource),
            _ => Ok(()),
        }
    }
}
