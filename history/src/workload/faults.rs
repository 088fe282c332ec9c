//! The fault thread: one fault at a time, seeded gaps between them, every
//! kind once (in a seeded order) before the rest are drawn at random; and
//! the proxies' dropped replies, recorded as `lost_reply` faults.
use super::servers::{guard, Servers, GROUP_NAMES, LIN, MAIN};
use super::Ctx;
use crate::common::connect_within;
use crate::history::{FaultKind, Phase};
use crate::proxy::Rng;
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::{Duration, Instant};

const KINDS: [FaultKind; 9] = [
    FaultKind::Kill9Always,
    FaultKind::Kill9Everysec,
    FaultKind::Failover,
    FaultKind::FailoverStale,
    FaultKind::ClientPause,
    FaultKind::SlowScript,
    FaultKind::ClientKill,
    FaultKind::ClientUnblock,
    FaultKind::DebugSleep,
];

const SPIN: &str = "local t = redis.call('TIME') \
local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1]) * 1000 \
while true do \
  local n = redis.call('TIME') \
  if tonumber(n[1]) * 1000000 + tonumber(n[2]) >= stop then break end \
end \
return 1";

struct Faults<'a> {
    ctx: &'a Ctx,
    servers: Servers,
    rng: Rng,
    /// Replies each group's proxy dropped that are already recorded.
    seen: [usize; 2],
}

/// Runs faults until the deadline; hands the servers back (they must
/// outlive the clients) with the first fault that could not be undone.
pub fn run(ctx: &Ctx, servers: Servers, seed: u64) -> (Servers, Result<(), String>) {
    let mut f = Faults {
        ctx,
        servers,
        rng: Rng::new(seed ^ 0xfa17_fa17),
        seen: [0, 0],
    };
    let r = f.run();
    f.poll_lost();
    (f.servers, r)
}

fn between(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

impl Faults<'_> {
    fn run(&mut self) -> Result<(), String> {
        let mut queue: Vec<FaultKind> = KINDS.to_vec();
        // Fisher-Yates, from the fault thread's stream.
        for i in (1..queue.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            queue.swap(i, j);
        }
        queue.reverse(); // popped from the back
        loop {
            let gap = between(&mut self.rng, 300, 2500);
            if !self.pause(Duration::from_millis(gap)) {
                return Ok(());
            }
            let kind = match queue.pop() {
                Some(k) => k,
                None => KINDS[self.rng.below(KINDS.len() as u64) as usize],
            };
            let done = self
                .inject(kind)
                .map_err(|e| format!("fault {kind:?}: {e}"))?;
            if !done && queue.len() < KINDS.len() {
                // Nobody was blocked: try this kind again later.
                queue.insert(0, kind);
            }
            self.poll_lost();
        }
    }

    /// Sleeps, polling the proxies; false once the run's time is up.
    fn pause(&mut self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            self.poll_lost();
            let now = Instant::now();
            if now >= self.ctx.deadline || self.ctx.abort.load(Ordering::SeqCst) {
                return false;
            }
            if now >= end {
                return true;
            }
            sleep((end - now).min(Duration::from_millis(50)));
        }
    }

    fn poll_lost(&mut self) {
        for g in [MAIN, LIN] {
            let dropped = self.ctx.groups[g].proxy.dropped();
            for d in &dropped[self.seen[g].min(dropped.len())..] {
                let cmd: Vec<String> = d
                    .args
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                let detail = cmd.join(" ");
                let rec = &self.ctx.rec;
                rec.fault(
                    FaultKind::LostReply,
                    Phase::Start,
                    GROUP_NAMES[g],
                    None,
                    &detail,
                );
                rec.fault(
                    FaultKind::LostReply,
                    Phase::End,
                    GROUP_NAMES[g],
                    None,
                    &detail,
                );
            }
            self.seen[g] = dropped.len();
        }
    }

    fn start(&self, kind: FaultKind, group: usize, client: Option<u32>, detail: &str) {
        (self.ctx.rec).fault(kind, Phase::Start, GROUP_NAMES[group], client, detail);
    }
    fn end(&self, kind: FaultKind, group: usize, client: Option<u32>, detail: &str) {
        (self.ctx.rec).fault(kind, Phase::End, GROUP_NAMES[group], client, detail);
    }

    /// A command on a group's master, on a fresh connection.
    fn master_cmd(&self, group: usize, cmd: &redis::Cmd) -> Result<redis::Value, String> {
        let url = self.servers.group_master(group).url();
        let mut c = connect_within(&url, Duration::from_secs(10)).map_err(|e| e.to_string())?;
        cmd.query(&mut c).map_err(|e| e.to_string())
    }

    /// Injects one fault; false when it found nothing to hit.
    fn inject(&mut self, kind: FaultKind) -> Result<bool, String> {
        let group = if self.rng.below(4) == 0 { LIN } else { MAIN };
        match kind {
            FaultKind::Kill9Always => {
                self.kill9(if group == LIN { LIN } else { MAIN }, "always")?
            }
            FaultKind::Kill9Everysec => self.kill9(MAIN, "everysec")?,
            FaultKind::Failover => self.failover(false)?,
            FaultKind::FailoverStale => self.failover(true)?,
            FaultKind::ClientPause => {
                let ms = between(&mut self.rng, 50, 800);
                let mode = if self.rng.below(2) == 0 {
                    "WRITE"
                } else {
                    "ALL"
                };
                let detail = format!("{mode} {ms} ms");
                self.start(kind, group, None, &detail);
                let mut pause = redis::cmd("CLIENT");
                pause.arg("PAUSE").arg(ms).arg(mode);
                self.master_cmd(group, &pause)?;
                sleep(Duration::from_millis(ms));
                let mut unpause = redis::cmd("CLIENT");
                unpause.arg("UNPAUSE");
                self.master_cmd(group, &unpause)?;
                self.end(kind, group, None, &detail);
            }
            FaultKind::SlowScript => {
                let ms = between(&mut self.rng, 50, 400);
                let detail = format!("{ms} ms");
                self.start(kind, group, None, &detail);
                let mut eval = redis::cmd("EVAL");
                eval.arg(SPIN).arg(0).arg(ms);
                self.master_cmd(group, &eval)?;
                self.end(kind, group, None, &detail);
            }
            FaultKind::DebugSleep => {
                let ms = between(&mut self.rng, 50, 800);
                let detail = format!("{ms} ms");
                self.start(kind, group, None, &detail);
                let mut cmd = redis::cmd("DEBUG");
                cmd.arg("SLEEP").arg(format!("{:.3}", ms as f64 / 1000.0));
                self.master_cmd(group, &cmd)?;
                self.end(kind, group, None, &detail);
            }
            FaultKind::ClientKill | FaultKind::ClientUnblock => return self.hit_waiter(kind),
            FaultKind::LostReply => return Ok(false),
        }
        Ok(true)
    }

    /// kill -9 of a group's master under `appendfsync <fsync>`, a restart on
    /// its data, and (on `main`) the replica back in sync.
    fn kill9(&mut self, group: usize, fsync: &str) -> Result<(), String> {
        let kind = if fsync == "always" {
            FaultKind::Kill9Always
        } else {
            FaultKind::Kill9Everysec
        };
        let port = self.servers.group_master(group).port();
        let detail = format!("port {port}, appendfsync {fsync}");
        self.start(kind, group, None, &detail);
        let mut set = redis::cmd("CONFIG");
        set.arg("SET").arg("appendfsync").arg(fsync);
        self.master_cmd(group, &set)?;
        sleep(Duration::from_millis(200));
        let server = if group == MAIN {
            let m = self.servers.master;
            &mut self.servers.nodes[m]
        } else {
            &mut self.servers.lin
        };
        server.kill9();
        Servers::restart(server)?;
        if group == MAIN {
            self.servers.resync()?;
        }
        self.end(kind, group, None, &detail);
        Ok(())
    }

    /// kill -9 of the `main` master, the replica promoted once it saw its
    /// link down, the old master back as its replica. `stale`: the replica
    /// is stopped for a while before the kill and resumed after it.
    fn failover(&mut self, stale: bool) -> Result<(), String> {
        let kind = if stale {
            FaultKind::FailoverStale
        } else {
            FaultKind::Failover
        };
        let (old, new) = (self.servers.master, 1 - self.servers.master);
        let new_port = self.servers.nodes[new].port();
        let detail = format!(
            "port {} dies, port {new_port} promoted",
            self.servers.nodes[old].port()
        );
        self.start(kind, MAIN, None, &detail);
        if stale {
            // The master drops its link to the stopped replica and goes on
            // granting: what it grants from then on never reaches the
            // replica (otherwise the replica reads it from its socket
            // after SIGCONT and is not stale at all).
            guard("SIGSTOP of the replica", || self.servers.nodes[new].stop())?;
            sleep(Duration::from_millis(between(&mut self.rng, 50, 200)));
            let mut drop_link = redis::cmd("CLIENT");
            drop_link.arg("KILL").arg("TYPE").arg("replica");
            self.master_cmd(MAIN, &drop_link)?;
            sleep(Duration::from_millis(between(&mut self.rng, 200, 600)));
        }
        self.servers.nodes[old].kill9();
        if stale {
            guard("SIGCONT of the replica", || self.servers.nodes[new].cont())?;
        }
        self.servers.wait_link_down()?;
        let url = self.servers.nodes[new].url();
        let mut c = connect_within(&url, Duration::from_secs(10)).map_err(|e| e.to_string())?;
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut c)
            .map_err(|e| format!("REPLICAOF NO ONE: {e}"))?;
        self.servers.master = new;
        self.servers.nodes[new].start_as_replica_of(None);
        self.ctx.groups[MAIN].set_master(new_port);
        // Back as a replica from its first moment: restarted as a master,
        // it would grant from its old data to any client still addressing
        // it until REPLICAOF, and those grants vanish at the full sync (a
        // split brain of the workload's making, not dlock's).
        self.servers.nodes[old].start_as_replica_of(Some(new_port));
        Servers::restart(&mut self.servers.nodes[old])?;
        let (a, b) = (&self.servers.nodes[old], &self.servers.nodes[new]);
        guard("REPLICAOF of the old master", || a.replica_of(b))
            .map_err(|e| format!("{e}\n{}", self.servers.logs()))?;
        self.servers.resync()?;
        self.end(kind, MAIN, None, &detail);
        Ok(())
    }

    /// `CLIENT KILL ID` or `CLIENT UNBLOCK` of a workload client blocked in
    /// a lock's or an observer's `WAIT` on the `main` master; false when
    /// none is blocked.
    fn hit_waiter(&mut self, kind: FaultKind) -> Result<bool, String> {
        let mut list = redis::cmd("CLIENT");
        list.arg("LIST");
        let text = match self.master_cmd(MAIN, &list)? {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::VerbatimString { text, .. } | redis::Value::SimpleString(text) => text,
            other => return Err(format!("CLIENT LIST: {other:?}")),
        };
        let mut blocked = Vec::new();
        for line in text.lines() {
            let f = |name: &str| {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or("")
            };
            let Some(c) = f("name")
                .strip_prefix('h')
                .and_then(|c| c.parse::<u32>().ok())
            else {
                continue;
            };
            let cmd = f("cmd");
            let waits = matches!(cmd, "dlock.acquire" | "dlock.macquire" | "dlock.observe");
            if f("flags").contains('b') && waits {
                blocked.push((c, f("id").to_string(), cmd.to_string()));
            }
        }
        if blocked.is_empty() {
            return Ok(false);
        }
        let (c, id, cmd) = blocked.swap_remove(self.rng.below(blocked.len() as u64) as usize);
        let mut hit = redis::cmd("CLIENT");
        let detail = if kind == FaultKind::ClientKill {
            self.ctx.killed[c as usize].store(true, Ordering::SeqCst);
            hit.arg("KILL").arg("ID").arg(&id);
            format!("id {id} ({cmd})")
        } else {
            hit.arg("UNBLOCK").arg(&id);
            let error = self.rng.below(2) == 0;
            if error {
                hit.arg("ERROR");
            }
            format!("id {id} ({cmd}){}", if error { " ERROR" } else { "" })
        };
        self.start(kind, MAIN, Some(c), &detail);
        let r = self.master_cmd(MAIN, &hit)?;
        self.end(kind, MAIN, Some(c), &format!("{detail}: {r:?}"));
        Ok(true)
    }
}
