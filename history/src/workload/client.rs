//! A workload client: its connections (one per group, reconnecting to the
//! group's current master or its proxy), how one operation is sent and
//! recorded, same-token retries after an unknown outcome, and probes after
//! a waiter that ended without a grant.
use super::conn::{Conn, Lost};
use super::ops;
use super::Ctx;
use crate::history::{Command, Mode, Op, Outcome, Value};
use crate::proxy::{Frame, Rng};
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long a client keeps trying to reach its group before the run fails.
const RECONNECT_FOR: Duration = Duration::from_secs(60);
/// Replies are awaited for the request's `WAIT` plus this.
const REPLY_SLACK: Duration = Duration::from_secs(30);

/// What a client believes it holds.
#[derive(Clone, Debug)]
pub struct Hold {
    pub group: usize,
    pub resources: Vec<String>,
    /// Taken by `MACQUIRE` (released by `MRELEASE`, extended by `MEXTEND`).
    pub set: bool,
    pub token: String,
    pub fence: u64,
    pub mode: Mode,
    pub owner: Option<String>,
    pub limit: Option<u32>,
    /// Recorder time (µs) until which the hold is believed.
    pub bound: u64,
}

impl Hold {
    /// Holders of an exclusive plain or read-write hold write to the sink.
    pub fn writes(&self) -> bool {
        self.mode == Mode::Exclusive && self.limit.is_none()
    }
}

/// An operation sent whose reply is still to read.
pub struct Pending {
    g: usize,
    id: u64,
    t: u64,
    process: u64,
    command: Command,
    durable: bool,
    leaves: bool,
    waits: bool,
    timeout: Duration,
    sent_at: Instant,
    sent: Result<(), Lost>,
}

/// One operation's record.
pub struct Done {
    pub id: u64,
    /// The invocation time of the attempt whose outcome this is.
    pub t: u64,
    pub outcome: Outcome,
    /// The fault thread killed this client's connection meanwhile.
    pub killed: bool,
}

pub struct Client<'a> {
    pub c: u32,
    pub ctx: &'a Ctx,
    pub rng: Rng,
    conns: [Option<Conn>; 2],
    process: u64,
    pub proxied: bool,
    pub holds: Vec<Hold>,
}

pub fn between(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

impl<'a> Client<'a> {
    pub fn new(ctx: &'a Ctx, c: u32, seed: u64) -> Client<'a> {
        Client {
            c,
            ctx,
            rng: Rng::new(seed ^ (u64::from(c) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            conns: [None, None],
            process: ctx.rec.process(),
            proxied: c % 4 == 3,
            holds: Vec::new(),
        }
    }

    /// A fresh token (never reused by anyone).
    pub fn token(&mut self) -> String {
        format!("c{}-{}", self.c, self.rng.next_u64() % 1_000_000_000_000)
    }

    /// Connects (again) to group `g`, retrying every 50 ms for 60 s.
    fn connect(&mut self, g: usize) -> Result<(), String> {
        if self.conns[g].is_some() {
            return Ok(());
        }
        let started = Instant::now();
        let group = &self.ctx.groups[g];
        loop {
            if self.ctx.abort.load(Ordering::SeqCst) {
                return Err(format!("client {}: run aborted", self.c));
            }
            let port = group.port(self.proxied);
            match Conn::open(port, &format!("h{}", self.c)) {
                // A direct client that raced a failover goes again.
                Ok(conn) if !self.proxied && group.master_port() != port => conn.close(),
                Ok(conn) => {
                    self.ctx.ids[self.c as usize][g].store(conn.id, Ordering::SeqCst);
                    self.conns[g] = Some(conn);
                    return Ok(());
                }
                Err(e) if started.elapsed() > RECONNECT_FOR => {
                    return Err(format!(
                        "client {}: cannot reach group {} (port {port}) for {RECONNECT_FOR:?}: {e}",
                        self.c, group.name
                    ))
                }
                Err(_) => {}
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Sends one operation on group `g` and records it.
    pub fn exec(&mut self, g: usize, op: &Op) -> Result<Done, String> {
        let pending = self.send(g, op)?;
        Ok(self.finish(pending))
    }

    /// Sends one operation and records its invocation; `finish` reads its
    /// reply (a client may send on another connection meanwhile).
    pub fn send(&mut self, g: usize, op: &Op) -> Result<Pending, String> {
        self.connect(g)?;
        let mut cmds = vec![ops::args(op)];
        if op.durable {
            cmds.push(["WAIT", "1", "200"].map(String::from).to_vec());
        }
        let timeout = match op.leave_after_ms {
            Some(ms) => Duration::from_millis(ms),
            None => Duration::from_millis(op.wait_ms.unwrap_or(0)) + REPLY_SLACK,
        };
        let waits = op.wait_ms.is_some();
        if waits {
            self.ctx.killed[self.c as usize].store(false, Ordering::SeqCst);
        }
        let process = self.process;
        let (id, t) = self.ctx.rec.invoke(self.c, process, op);
        let conn = self.conns[g].as_mut().expect("connected");
        let sent = conn.send(&cmds);
        Ok(Pending {
            g,
            id,
            t,
            process,
            command: op.command,
            durable: op.durable,
            leaves: op.leave_after_ms.is_some(),
            waits,
            timeout,
            sent_at: Instant::now(),
            sent,
        })
    }

    /// Reads the reply of a sent operation and records its completion.
    pub fn finish(&mut self, p: Pending) -> Done {
        let conn = self.conns[p.g].as_mut().expect("connected");
        let reply = p.sent.and_then(|()| {
            let first = conn.read(p.timeout)?;
            if !p.durable {
                return Ok((first, None));
            }
            let left = p.timeout.saturating_sub(p.sent_at.elapsed());
            Ok((first, Some(conn.read(left + Duration::from_millis(500))?)))
        });
        let outcome = match reply {
            Ok((first, wait)) => durable(ops::decode(p.command, first), wait),
            Err(lost) => Outcome::Info {
                reason: match (lost, p.leaves) {
                    (Lost::Timeout, true) => "left",
                    (Lost::Timeout, false) => "timeout",
                    (Lost::Closed, _) => "closed",
                }
                .into(),
            },
        };
        let info = matches!(outcome, Outcome::Info { .. });
        if info {
            if let Some(conn) = self.conns[p.g].take() {
                conn.close();
            }
        }
        self.ctx.rec.complete(self.c, p.process, p.id, &outcome);
        if info {
            self.process = self.ctx.rec.process();
        }
        let killed =
            p.waits && info && self.ctx.killed[self.c as usize].swap(false, Ordering::SeqCst);
        Done {
            id: p.id,
            t: p.t,
            outcome,
            killed,
        }
    }

    /// Closes the connection to group `g` (recorded as `disconnect` of
    /// `session`): a session opened on it with `BIND` ends.
    pub fn disconnect(&mut self, g: usize, session: &str) {
        let op = Op {
            session: Some(session.to_string()),
            ..Op::new(Command::Disconnect, Vec::new(), String::new())
        };
        let (id, _) = self.ctx.rec.invoke(self.c, self.process, &op);
        if let Some(conn) = self.conns[g].take() {
            conn.close();
        }
        let done = Outcome::Ok {
            value: Value::Int(1),
        };
        self.ctx.rec.complete(self.c, self.process, id, &done);
    }

    /// `exec`, then same-token retries while the outcome is unknown (at
    /// most three; never for a waiter that left or was killed, nor a probe).
    pub fn run(&mut self, g: usize, op: &Op) -> Result<Done, String> {
        let first = self.exec(g, op)?;
        let mut last = first;
        let original = last.id;
        for _ in 0..3 {
            match &last.outcome {
                Outcome::Info { reason } if reason != "left" && !last.killed && !op.probe => {}
                _ => break,
            }
            let mut again = op.clone();
            again.retry_of = Some(original);
            last = self.exec(g, &again)?;
        }
        let granted = matches!(
            last.outcome,
            Outcome::Ok {
                value: Value::Fence(_)
            }
        );
        if last.id != original && granted {
            // A retry that was granted: the server shows which fence it
            // keeps (the `shown` checker compares it with the reply).
            for r in &op.resources {
                self.exec(g, &Op::new(Command::Info, vec![r.clone()], String::new()))?;
            }
        }
        Ok(last)
    }

    /// After a waiter ended without a grant (told nil, an error such as
    /// `UNBLOCKED`, killed, or it left), a direct client asks the server to
    /// release its token: the probe must answer 0.
    pub fn probe_waiter(&mut self, g: usize, op: &Op, done: &Done) -> Result<(), String> {
        if op.wait_ms.is_none() || self.proxied {
            return Ok(());
        }
        let needed = match &done.outcome {
            Outcome::Ok { value: Value::Nil } | Outcome::Fail { .. } => true,
            Outcome::Info { reason } => reason == "left" || done.killed,
            Outcome::Ok { .. } => false,
        };
        if needed {
            // An EXTEND first: a token that was never granted holds
            // nothing to extend, whoever holds the resource.
            let extend = Op {
                probe: true,
                ttl_ms: Some(100),
                ..Op::new(
                    if op.command == Command::Macquire {
                        Command::Mextend
                    } else {
                        Command::Extend
                    },
                    op.resources.clone(),
                    op.token.clone(),
                )
            };
            self.exec(g, &extend)?;
            let command = if op.command == Command::Macquire {
                Command::Mrelease
            } else {
                Command::Release
            };
            let probe = Op {
                probe: true,
                ..Op::new(command, op.resources.clone(), op.token.clone())
            };
            self.exec(g, &probe)?;
        }
        Ok(())
    }

    /// Stops believing `token`'s hold and releases it (recorded, with
    /// retries).
    pub fn release(&mut self, token: &str) -> Result<Done, String> {
        let i = self
            .holds
            .iter()
            .position(|h| h.token == token)
            .expect("a believed hold");
        let h = self.holds.swap_remove(i);
        let command = if h.set {
            Command::Mrelease
        } else {
            Command::Release
        };
        self.run(h.group, &Op::new(command, h.resources, h.token))
    }

    /// Whether `token`'s hold is still believed (its bound not passed).
    pub fn still_holds(&mut self, token: &str) -> bool {
        self.forget_expired();
        self.holds.iter().any(|h| h.token == token)
    }

    /// Releases `token`'s hold if it is still believed.
    pub fn release_if_held(&mut self, token: &str) -> Result<(), String> {
        if self.still_holds(token) {
            self.release(token)?;
        }
        Ok(())
    }

    /// One acquire on `main`; a grant is held 0 to `hold_ms` ms and
    /// released (if still believed).
    pub fn take_briefly(&mut self, op: &Op, token: &str, hold_ms: u64) -> Result<(), String> {
        if self.acquired(super::servers::MAIN, op, true)? {
            sleep(Duration::from_millis(between(&mut self.rng, 0, hold_ms)));
            self.release_if_held(token)?;
        }
        Ok(())
    }

    /// Writes to the sink of every member of a believed exclusive hold.
    pub fn write(&mut self, token: &str) {
        let Some(h) = self.holds.iter().find(|h| h.token == token) else {
            return;
        };
        if !h.writes() {
            return;
        }
        for r in &h.resources {
            if self
                .ctx
                .rec
                .write(self.c, r, &h.token, h.fence, h.bound)
                .is_none()
            {
                break;
            }
        }
    }
}

/// A durable acquire's outcome from its reply and `WAIT 1`'s: a grant no
/// replica acknowledged is `Unacknowledged`.
fn durable(first: Outcome, wait: Option<Frame>) -> Outcome {
    let Some(wait) = wait else {
        return first;
    };
    match (first, wait) {
        (
            Outcome::Ok {
                value: Value::Fence(f),
            },
            Frame::Int(n),
        ) if n >= 1 => Outcome::Ok {
            value: Value::Fence(f),
        },
        (
            Outcome::Ok {
                value: Value::Fence(f),
            },
            _,
        ) => Outcome::Ok {
            value: Value::Unacknowledged(f),
        },
        (other, _) => other,
    }
}

/// A client of its own workload that connects directly, running `turn`
/// until the deadline (or a breakdown), then releasing what it still holds.
pub fn direct_loop(
    ctx: &Ctx,
    c: u32,
    seed: u64,
    mut turn: impl FnMut(&mut Client) -> Result<(), String>,
) -> Result<(), String> {
    let mut x = Client::new(ctx, c, seed);
    x.proxied = false;
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        turn(&mut x)?;
    }
    x.forget_expired();
    x.release_all()
}
