//! A throwaway Redis Cluster of `Server`s with the dlock module loaded.
//!
//! Nodes are addressed by their index in `Cluster::nodes()`; topology
//! questions (who owns a slot, who replicates whom) are answered from a live
//! node's `CLUSTER NODES`, so they stay right across failovers.
//!
//! Every wait has a deadline, and when the owning thread panics the `Drop`
//! dumps every node's log before the servers are killed.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::{info_field, wait_until, Server};

/// Bounds cluster creation, resharding steps and convergence waits.
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);
pub const SLOTS: u16 = 16384;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLine {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// Flags `fail` or `fail?`.
    pub failing: bool,
    /// The master's id for a replica, else None.
    pub master_id: Option<String>,
    /// Owned slot ranges, inclusive; importing/migrating markers are skipped.
    pub slots: Vec<(u16, u16)>,
}

pub fn parse_cluster_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert!(f.len() >= 8, "bad CLUSTER NODES line {line:?}");
            let addr = f[1].split('@').next().unwrap();
            let port = addr.rsplit(':').next().unwrap().parse().unwrap_or(0);
            let flags: Vec<&str> = f[2].split(',').collect();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => {
                        let n = s.parse().unwrap();
                        (n, n)
                    }
                })
                .collect();
            NodeLine {
                id: f[0].to_string(),
                port,
                master: flags.contains(&"master"),
                failing: flags.contains(&"fail") || flags.contains(&"fail?"),
                master_id: (f[3] != "-").then(|| f[3].to_string()),
                slots,
            }
        })
        .collect()
}

pub struct Cluster {
    nodes: Vec<Server>,
    ids: Vec<String>,
    alive: Vec<bool>,
}

impl Cluster {
    /// `masters * (1 + replicas_per_master)` nodes, created with
    /// `redis-cli --cluster create`; returns once `wait_stable` holds.
    pub fn start(masters: usize, replicas_per_master: usize) -> Cluster {
        assert!(masters >= 3, "redis-cli --cluster create needs 3 masters");
        let n = masters * (1 + replicas_per_master);
        let nodes: Vec<Server> = (0..n)
            .map(|_| {
                Server::builder()
                    .arg("--cluster-enabled")
                    .arg("yes")
                    .arg("--cluster-config-file")
                    .arg("nodes.conf")
                    .arg("--cluster-node-timeout")
                    .arg("2000")
                    .arg("--appendonly")
                    .arg("yes")
                    .start()
            })
            .collect();
        let ids = nodes
            .iter()
            .map(|s| {
                redis::cmd("CLUSTER")
                    .arg("MYID")
                    .query::<String>(&mut s.conn())
                    .expect("CLUSTER MYID")
            })
            .collect();
        let cluster = Cluster {
            nodes,
            ids,
            alive: vec![true; n],
        };
        cluster.create(replicas_per_master);
        cluster.wait_stable();
        cluster
    }

    fn create(&self, replicas: usize) {
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(self.nodes.iter().map(|s| format!("127.0.0.1:{}", s.port())));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let mut child = Command::new(super::cli_binary())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn redis-cli");
        // Drain the pipes on threads so a chatty redis-cli never blocks.
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let out_t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err_t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let end = Instant::now() + CLUSTER_DEADLINE;
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            sleep(Duration::from_millis(50));
        };
        let output = format!(
            "{}\n{}",
            out_t.join().unwrap_or_default(),
            err_t.join().unwrap_or_default()
        );
        match status {
            Some(st) if st.success() && output.contains("[OK] All 16384 slots covered") => {}
            Some(st) => panic!("redis-cli {} failed ({st}):\n{output}", args.join(" ")),
            None => panic!("redis-cli --cluster create hung for {CLUSTER_DEADLINE:?}:\n{output}"),
        }
    }

    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }
    pub fn node(&self, i: usize) -> &Server {
        &self.nodes[i]
    }
    pub fn id(&self, i: usize) -> &str {
        &self.ids[i]
    }
    pub fn is_alive(&self, i: usize) -> bool {
        self.alive[i]
    }
    pub fn live(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.alive[i]).collect()
    }
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|s| s.port() == port)
    }
    fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// SIGKILL node `i` (its dir stays, for `restart`).
    pub fn kill9(&mut self, i: usize) {
        self.nodes[i].kill9();
        self.alive[i] = false;
    }

    /// A cluster client seeded with every live node. 5 s timeouts, so a
    /// wedged node fails the test instead of hanging it.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        let urls: Vec<String> = self.live().iter().map(|&i| self.nodes[i].url()).collect();
        redis::cluster::ClusterClientBuilder::new(urls)
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(5))
            .retries(8)
            .build()
            .expect("cluster client")
    }
    pub fn conn(&self) -> redis::cluster::ClusterConnection {
        self.client().get_connection().expect("cluster connection")
    }

    /// A plain connection to some live node.
    fn any_conn(&self) -> redis::Connection {
        let i = *self.live().first().expect("no live node");
        self.nodes[i].conn()
    }

    /// `CLUSTER NODES` as seen by node `i`.
    pub fn view(&self, i: usize) -> Vec<NodeLine> {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[i].conn())
            .expect("CLUSTER NODES");
        parse_cluster_nodes(&text)
    }
    fn reference_view(&self) -> Vec<NodeLine> {
        self.view(*self.live().first().expect("no live node"))
    }

    pub fn key_slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.any_conn())
            .expect("CLUSTER KEYSLOT")
    }

    /// Index of the master owning `slot` (as the first live node sees it).
    pub fn node_for_slot(&self, slot: u16) -> usize {
        let view = self.reference_view();
        let line = view
            .iter()
            .find(|l| l.master && l.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .unwrap_or_else(|| panic!("no owner for slot {slot}: {view:?}"));
        self.index_of_id(&line.id).expect("unknown node id")
    }

    /// Live masters with at least one slot, by index.
    pub fn masters(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .reference_view()
            .iter()
            .filter(|l| l.master && !l.slots.is_empty())
            .filter_map(|l| self.index_of_id(&l.id))
            .filter(|&i| self.alive[i])
            .collect();
        v.sort_unstable();
        v
    }

    /// Live replicas of `master`, by index.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let id = self.ids[master].clone();
        let mut v: Vec<usize> = self
            .reference_view()
            .iter()
            .filter(|l| !l.master && l.master_id.as_deref() == Some(id.as_str()))
            .filter_map(|l| self.index_of_id(&l.id))
            .filter(|&i| self.alive[i])
            .collect();
        v.sort_unstable();
        v
    }

    /// Moves `slot` from master `from` to master `to` with the manual
    /// resharding protocol, keys included (MIGRATE ... KEYS).
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) {
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let (mut sc, mut dc) = (src.conn(), dst.conn());
        let setslot =
            |c: &mut redis::Connection, state: &str, id: &str| setslot(c, slot, state, id);
        setslot(&mut dc, "IMPORTING", &self.ids[from]);
        setslot(&mut sc, "MIGRATING", &self.ids[to]);
        move_slot_keys(&mut sc, slot, dst.port());
        // Destination first, so it owns the slot before the source redirects.
        setslot(&mut dc, "NODE", &self.ids[to]);
        setslot(&mut sc, "NODE", &self.ids[to]);
        for m in self.masters() {
            if m != from && m != to {
                setslot(&mut self.nodes[m].conn(), "NODE", &self.ids[to]);
            }
        }
        self.wait_stable();
        assert_eq!(self.node_for_slot(slot), to, "slot {slot} not moved");
    }

    /// Waits until every live node reports `cluster_state:ok` with all slots
    /// assigned, all live nodes agree on roles and slot ownership of the live
    /// nodes, and every live replica's link to its master is up.
    pub fn wait_stable(&self) {
        let live = self.live();
        let live_ids: BTreeSet<&str> = live.iter().map(|&i| self.ids[i].as_str()).collect();
        let end = Instant::now() + CLUSTER_DEADLINE;
        loop {
            let Err(last) = self.stable(&live, &live_ids) else {
                return;
            };
            assert!(
                Instant::now() < end,
                "cluster not stable after {CLUSTER_DEADLINE:?}: {last}"
            );
            sleep(Duration::from_millis(50));
        }
    }

    fn stable(&self, live: &[usize], live_ids: &BTreeSet<&str>) -> Result<(), String> {
        let mut first: Option<Vec<NodeLine>> = None;
        for &i in live {
            let port = self.nodes[i].port();
            let mut c = super::connect_within(&self.nodes[i].url(), Duration::from_secs(2))
                .map_err(|e| format!("node {port}: {e}"))?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut c)
                .map_err(|e| e.to_string())?;
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_assigned:16384")
            {
                return Err(format!("node {port}: {info}"));
            }
            let text: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut c)
                .map_err(|e| e.to_string())?;
            let mut view: Vec<NodeLine> = parse_cluster_nodes(&text)
                .into_iter()
                .filter(|l| live_ids.contains(l.id.as_str()))
                .collect();
            view.sort_by(|a, b| a.id.cmp(&b.id));
            if view.len() != live.len() || view.iter().any(|l| l.failing) {
                return Err(format!("node {port} sees {view:?}"));
            }
            match &first {
                None => first = Some(view.clone()),
                Some(f) if *f != view => {
                    return Err(format!("views differ: {f:?} vs node {port}: {view:?}"))
                }
                Some(_) => {}
            }
            let me = view.iter().find(|l| l.id == self.ids[i]).unwrap();
            if !me.master {
                let link = info_field(&mut c, "replication", "master_link_status");
                let syncing = info_field(&mut c, "replication", "master_sync_in_progress");
                if link.as_deref() != Some("up") || syncing.as_deref() != Some("0") {
                    return Err(format!(
                        "replica {port}: link {link:?}, syncing {syncing:?}"
                    ));
                }
            }
        }
        let covered: u32 = first
            .unwrap_or_default()
            .iter()
            .filter(|l| l.master)
            .flat_map(|l| l.slots.iter())
            .map(|&(a, b)| u32::from(b - a) + 1)
            .sum();
        if covered != u32::from(SLOTS) {
            return Err(format!("live masters cover {covered} slots"));
        }
        Ok(())
    }

    /// Waits until node `i` reports `role:<role>` in `INFO replication`.
    pub fn wait_role(&self, i: usize, role: &str) {
        let mut c = self.nodes[i].conn();
        wait_until(CLUSTER_DEADLINE, &format!("node {i} to be {role}"), || {
            info_field(&mut c, "replication", "role").as_deref() == Some(role)
        });
    }

    /// Every node's log, for failure reports.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let log = n.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(150)..];
            s.push_str(&format!(
                "--- node {i} port {} id {} alive {} (last {} lines of redis.log) ---\n{}\n",
                n.port(),
                self.ids[i],
                self.alive[i],
                tail.len(),
                tail.join("\n")
            ));
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("=== cluster test failed; node logs ===\n{}", self.logs());
        }
    }
}

/// `CLUSTER SETSLOT slot state [id]` on one node.
pub fn setslot(c: &mut redis::Connection, slot: u16, state: &str, id: &str) {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SETSLOT").arg(slot).arg(state);
    if !id.is_empty() {
        cmd.arg(id);
    }
    let _: () = cmd
        .query(c)
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} {id}: {e}"));
}

/// Moves every key of `slot` from the node behind `sc` to the node on
/// `dst_port` (MIGRATE ... KEYS), a batch at a time, with a deadline.
pub fn move_slot_keys(sc: &mut redis::Connection, slot: u16, dst_port: u16) {
    let end = Instant::now() + CLUSTER_DEADLINE;
    loop {
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(sc)
            .expect("CLUSTER GETKEYSINSLOT");
        if keys.is_empty() {
            return;
        }
        assert!(Instant::now() < end, "slot {slot} never drained");
        let _: redis::Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(dst_port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query(sc)
            .unwrap_or_else(|e| panic!("MIGRATE slot {slot} keys {keys:?}: {e}"));
    }
}
