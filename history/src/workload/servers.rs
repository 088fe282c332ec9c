//! The two server groups: `main` (a master and a replica, roles swapped by
//! every failover) and `lin` (one server), their proxies, and the shared
//! "current master" the clients connect to.
use crate::common::{info_field, Server};
use crate::proxy::Proxy;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

pub const MAIN: usize = 0;
pub const LIN: usize = 1;
pub const GROUP_NAMES: [&str; 2] = ["main", "lin"];

/// What clients share about a group.
pub struct Group {
    pub name: &'static str,
    master: AtomicU16,
    pub proxy: Proxy,
}

impl Group {
    pub fn master_port(&self) -> u16 {
        self.master.load(Ordering::SeqCst)
    }
    /// Where a client connects: the master, or the group's proxy.
    pub fn port(&self, proxied: bool) -> u16 {
        if proxied {
            self.proxy.port()
        } else {
            self.master_port()
        }
    }
    /// Connections from now on go to `port` (a failover).
    pub fn set_master(&self, port: u16) {
        self.master.store(port, Ordering::SeqCst);
        self.proxy.set_upstream(port);
    }
}

/// Lock commands but `DLOCK.INFO` may lose their reply.
fn lock_command(args: &[Vec<u8>]) -> bool {
    let name = args
        .first()
        .map(|a| a.to_ascii_uppercase())
        .unwrap_or_default();
    name.starts_with(b"DLOCK.") && name != b"DLOCK.INFO"
}

/// The processes, owned by the fault thread.
pub struct Servers {
    /// `main`: two nodes, `master` indexes the current master.
    pub nodes: [Server; 2],
    pub master: usize,
    pub lin: Server,
}

/// A panic of the harness as an error message.
pub fn guard<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        format!("{what}: {msg}")
    })
}

/// `dlock.priority-aging-ms` on every server (a module argument, so that
/// a restart keeps it): low, so that the priority workload's window
/// (`priority::TOP` levels of it) is short beside its waiter's `WAIT`.
pub const PRIORITY_AGING_MS: u64 = 200;

pub fn start(seed: u64) -> Result<(Servers, [Group; 2]), String> {
    let node = || {
        guard("starting a main server", || {
            Server::builder()
                .aof("always")
                .module_arg("priority-aging-ms")
                .module_arg(PRIORITY_AGING_MS.to_string())
                .try_start()
        })?
    };
    let a = node()?;
    let b = node()?;
    guard("making the replica", || b.replica_of(&a))?;
    guard("the replica's first sync", || {
        b.wait_for_sync(Duration::from_secs(20))
    })
    .map_err(|e| format!("{e}\n--- replica log ---\n{}", b.log()))?;
    let lin = guard("starting the lin server", || {
        Server::builder()
            .aof("always")
            .module_arg("priority-aging-ms")
            .module_arg(PRIORITY_AGING_MS.to_string())
            .try_start()
    })??;
    let groups = [
        Group {
            name: GROUP_NAMES[MAIN],
            master: AtomicU16::new(a.port()),
            proxy: Proxy::start(a.port(), seed ^ 0x6d61_696e, 20, lock_command),
        },
        Group {
            name: GROUP_NAMES[LIN],
            master: AtomicU16::new(lin.port()),
            proxy: Proxy::start(lin.port(), seed ^ 0x6c69_6e00, 20, lock_command),
        },
    ];
    Ok((
        Servers {
            nodes: [a, b],
            master: 0,
            lin,
        },
        groups,
    ))
}

impl Servers {
    pub fn main_master(&self) -> &Server {
        &self.nodes[self.master]
    }
    pub fn main_replica(&self) -> &Server {
        &self.nodes[1 - self.master]
    }
    pub fn group_master(&self, group: usize) -> &Server {
        if group == MAIN {
            self.main_master()
        } else {
            &self.lin
        }
    }

    /// Both `main` nodes' logs, for an error.
    pub fn logs(&self) -> String {
        format!(
            "--- main master log ---\n{}\n--- main replica log ---\n{}\n--- lin log ---\n{}",
            tail(&self.main_master().log()),
            tail(&self.main_replica().log()),
            tail(&self.lin.log())
        )
    }

    /// Restarts a killed server on its data; an error with its log.
    pub fn restart(server: &mut Server) -> Result<(), String> {
        guard("restart", || server.restart())
    }

    /// Waits (bounded) until the `main` replica is in sync with the master
    /// again; an error with both logs.
    pub fn resync(&self) -> Result<(), String> {
        guard("replica sync", || {
            self.main_replica().wait_for_sync(Duration::from_secs(20))
        })
        .map_err(|e| format!("{e}\n{}", self.logs()))
    }

    /// Waits (bounded) until the replica saw its link to the master drop.
    pub fn wait_link_down(&self) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(20);
        let replica = self.main_replica();
        loop {
            let down = crate::common::connect_within(&replica.url(), Duration::from_secs(2))
                .ok()
                .and_then(|mut c| info_field(&mut c, "replication", "master_link_status"));
            if down.as_deref() == Some("down") {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(format!(
                    "the replica never saw its link down (status {down:?})\n{}",
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The last 60 lines of a log.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
