//! A master (the module loaded), its replicas and three sentinels watching it
//! as `m`, every process on a free loopback port in a temp dir of its own,
//! killed (and the dirs removed) on drop.

use crate::common::server::{server_binary, wait_until, ServerBuilder};
use crate::common::{Server, SEC};
use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The name the sentinels know the master by.
pub const NAME: &str = "m";
/// How long a failover may take on a loaded machine.
pub const FAILOVER_DEADLINE: Duration = Duration::from_secs(30);

/// One sentinel process (`redis-server sentinel.conf --sentinel`).
pub struct Sentinel {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Sentinel {
    /// A sentinel watching `127.0.0.1:master_port` as `m`, quorum 2, a
    /// master down after 1 s without an answer.
    pub fn start(master_port: u16) -> Sentinel {
        let dir = std::env::temp_dir().join(format!(
            "dlock-sentinel-{}-{}",
            std::process::id(),
            free_port()
        ));
        fs::create_dir_all(&dir).unwrap();
        for _ in 0..5 {
            let port = free_port();
            let conf = dir.join("sentinel.conf");
            fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d}/sentinel.log\n\
                     sentinel monitor {NAME} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {NAME} 1000\n\
                     sentinel failover-timeout {NAME} 10000\n",
                    d = dir.display()
                ),
            )
            .unwrap();
            let child = Command::new(server_binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(dir.join("stderr.log")).unwrap())
                .spawn()
                .expect("spawn a sentinel");
            let mut s = Sentinel {
                port,
                dir: dir.clone(),
                child,
            };
            let up = (0..100).any(|_| {
                if s.child.try_wait().ok().flatten().is_some() {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
                s.conn().is_some()
            });
            if up {
                return s;
            }
            let log = s.log();
            if !log.contains("Address already in use") {
                panic!("the sentinel on port {port} did not start:\n{log}");
            }
        }
        panic!("no free port for a sentinel");
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn conn(&self) -> Option<redis::Connection> {
        crate::common::server::connect_within(&format!("redis://127.0.0.1:{}/", self.port), 2 * SEC)
            .ok()
    }

    fn log(&self) -> String {
        let read = |f: &str| fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!("{}{}", read("sentinel.log"), read("stderr.log"))
    }

    /// The master's port this sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let mut c = self.conn()?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(NAME)
            .query(&mut c)
            .ok()?;
        addr.map(|a| a.1)
    }

    /// How many of `kind` (`replicas`, `sentinels`) it knows for `m`.
    fn known(&self, kind: &str) -> usize {
        let Some(mut c) = self.conn() else { return 0 };
        let known: redis::RedisResult<Vec<redis::Value>> =
            redis::cmd("SENTINEL").arg(kind).arg(NAME).query(&mut c);
        known.map_or(0, |v| v.len())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A master, its replicas and three sentinels that know them all.
pub struct Group {
    pub servers: Vec<Server>,
    pub sentinels: Vec<Sentinel>,
}

impl Group {
    /// A master and `replicas` replicas, the module loaded with
    /// `module_args`, and three sentinels that see every replica and each
    /// other.
    pub fn start(replicas: usize, module_args: &[&str]) -> Group {
        let opts = |mut b: ServerBuilder| {
            for a in module_args {
                b = b.module_arg(*a);
            }
            b
        };
        let master = opts(Server::builder()).start();
        let mut servers = vec![master];
        for _ in 0..replicas {
            let r = opts(Server::builder()).replica_of(&servers[0]).start();
            r.wait_for_sync(10 * SEC);
            servers.push(r);
        }
        let port = servers[0].port();
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(port)).collect();
        for s in &sentinels {
            wait_until(
                FAILOVER_DEADLINE,
                "the sentinels to know each other",
                || s.known("replicas") == replicas && s.known("sentinels") == 2,
            );
        }
        Group { servers, sentinels }
    }

    /// `redis+sentinel://` naming every sentinel, `extra` sentinel
    /// addresses first.
    pub fn url(&self, extra: &[&str], name: &str) -> String {
        let mut addrs: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        addrs.extend(self.sentinels.iter().map(Sentinel::addr));
        format!("redis+sentinel://{}/{name}", addrs.join(","))
    }

    /// The index of the server on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.servers
            .iter()
            .position(|s| s.port() == port)
            .expect("a server of the group")
    }

    /// Waits until every live sentinel names a master other than
    /// `servers[old]` and that server says it is a master; its index.
    pub fn wait_new_master(&self, old: usize, live: &[usize]) -> usize {
        let old_port = self.servers[old].port();
        let mut found = None;
        wait_until(
            FAILOVER_DEADLINE,
            "the sentinels to name a new master",
            || {
                let ports: Vec<Option<u16>> = live
                    .iter()
                    .map(|&i| self.sentinels[i].master_port())
                    .collect();
                let Some(Some(port)) = ports.first().copied() else {
                    return false;
                };
                if port == old_port || ports.iter().any(|p| *p != Some(port)) {
                    return false;
                }
                let i = self.index_of(port);
                let role: redis::RedisResult<Vec<redis::Value>> =
                    redis::cmd("ROLE").query(&mut self.servers[i].conn());
                let master = matches!(role.as_deref(),
                Ok([redis::Value::BulkString(r), ..]) if r == b"master");
                found = Some(i).filter(|_| master);
                found.is_some()
            },
        );
        found.expect("found")
    }
}
