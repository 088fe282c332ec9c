//! `kill -9` of dlock (alone, or with its whole process group): every
//! process of the command's group dies at once, well before the lease could
//! pass to the next holder; and the helper that sees to it (the reaper)
//! holds none of dlock's descriptors and never outlives a normal run.

use crate::cli::{alive, dlock, kill, wait_until, Dir, Dlock, Server, SEC};
use crate::common::ms;
use dlock_client::Locker;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The lease in these tests: once dlock is dead, the next holder gets the
/// lock 2/3 of it later at the earliest (renewals come every third).
const TTL: &str = "6s";

/// Within this time of dlock's death, the whole group is gone.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// A command whose group holds, besides its leader (`group`): a background
/// job (`job`), a shell that forked a job of its own (`forker`,
/// `grandchild`), and an orphan whose parent exited (`orphan`, reparented
/// to dlock).
fn family(dir: &Dir) -> String {
    format!(
        "echo $$ > {group}; \
         sleep 60 & echo $! > {job}; \
         sh -c 'sleep 61 & echo $! > {grandchild}; wait' & echo $! > {forker}; \
         (sleep 62 & echo $! > {orphan}); \
         touch {started}; wait",
        group = dir.sh("group"),
        job = dir.sh("job"),
        grandchild = dir.sh("grandchild"),
        forker = dir.sh("forker"),
        orphan = dir.sh("orphan"),
        started = dir.sh("started"),
    )
}

/// The pids [`family`] recorded, once all are running in the group.
fn members(dir: &Dir) -> Vec<i32> {
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let pids: Vec<i32> = ["group", "job", "forker", "grandchild", "orphan"]
        .iter()
        .map(|f| dir.wait_number(f, 5 * SEC) as i32)
        .collect();
    for &p in &pids {
        assert!(alive(p), "{p} not running");
        assert_eq!(
            stat(p).map(|s| s.pgid),
            Some(pids[0]),
            "{p} not in the group"
        );
    }
    pids
}

/// Waits until none of `pids` is alive; panics naming the survivors.
fn all_die(pids: &[i32], within: Duration, what: &str) {
    let end = Instant::now() + within;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < end,
            "{what}: {left:?} of the group {pids:?} still running after {within:?}"
        );
        std::thread::sleep(ms(10));
    }
}

/// `kill -9` of dlock: its command's group (background job, grandchild,
/// orphan) dies within 2 s, and the lock goes to the next client only once
/// no process of the group is left.
#[test]
fn killing_dlock_kills_the_commands_whole_group() {
    let server = Server::start();
    let dir = Dir::new();
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "--ttl", TTL, "k9g", "--", "sh", "-c", &family(&dir)]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    let pids = members(&dir);
    let next = {
        let (url, pids) = (server.url(), pids.clone());
        std::thread::spawn(move || {
            let locker = Locker::new(&url).unwrap();
            let g = locker
                .request("k9g")
                .ttl(10 * SEC)
                .wait(60 * SEC)
                .acquire()
                .unwrap();
            assert!(g.is_some(), "the next client got no lock");
            let survivors: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
            (Instant::now(), survivors)
        })
    };
    assert!(kill(d.pid(), libc::SIGKILL));
    let killed = Instant::now();
    assert_eq!(d.wait(10 * SEC), 128 + libc::SIGKILL);
    all_die(&pids, GONE_WITHIN, "dlock killed");
    let gone = Instant::now();
    let (granted, survivors) = next.join().unwrap();
    assert!(survivors.is_empty(), "granted while {survivors:?} ran");
    assert!(
        gone < granted,
        "granted {:?} after the kill, the group gone only {:?} after it",
        granted - killed,
        gone - killed
    );
}

/// `kill -9 -PGID` of dlock's own process group (a service manager or a
/// shell killing the job): the command's group, a group of its own, dies
/// too.
#[test]
fn killing_dlocks_process_group_kills_the_commands_group() {
    let server = Server::start();
    let dir = Dir::new();
    let mut d = Dlock::spawn(
        dlock(&server.url())
            .args([
                "exec",
                "--ttl",
                TTL,
                "k9pg",
                "--",
                "sh",
                "-c",
                &family(&dir),
            ])
            .process_group(0),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    let pids = members(&dir);
    assert_ne!(pids[0], d.pid(), "the command runs in a group of its own");
    assert!(kill(-d.pid(), libc::SIGKILL));
    assert_eq!(d.wait(10 * SEC), 128 + libc::SIGKILL);
    all_die(&pids, GONE_WITHIN, "dlock's group killed");
}

/// dlock with its stdout on a pipe, killed on drop with the group its
/// command recorded.
struct Piped {
    child: Child,
    group: std::path::PathBuf,
}

impl Drop for Piped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pgid) = std::fs::read_to_string(&self.group)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Everything written to dlock's stdout, read to EOF; panics if EOF does
/// not come within `within`.
fn read_to_eof(p: &mut Piped, within: Duration) -> String {
    let mut out = p.child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx.recv_timeout(within)
        .unwrap_or_else(|_| panic!("dlock's stdout still open {within:?} after dlock ended"))
}

/// `x=$(dlock exec ...)`: dlock's stdout reaches EOF as soon as dlock and
/// its command are gone, whether dlock exits or is killed (no helper keeps
/// a copy of it).
#[test]
fn a_captured_stdout_ends_with_dlock() {
    let server = Server::start();
    let dir = Dir::new();
    let mut p = Piped {
        child: dlock(&server.url())
            .args(["exec", "out", "--", "echo", "hi"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
        group: dir.path("group"),
    };
    assert_eq!(read_to_eof(&mut p, 20 * SEC), "hi\n");
    assert!(p.child.wait().unwrap().success());

    let script = format!(
        "echo $$ > {group}; touch {started}; echo started; exec sleep 60",
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut p = Piped {
        child: dlock(&server.url())
            .args(["exec", "--ttl", TTL, "out", "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
        group: dir.path("group"),
    };
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    assert!(kill(p.child.id() as i32, libc::SIGKILL));
    // Under an init that does not reap (this test process), the command
    // stays a zombie: the group is never empty, and the reaper keeps
    // killing it for a while. It must not hold the pipe meanwhile.
    assert_eq!(read_to_eof(&mut p, SEC), "started\n");
}

/// While the command runs, the reaper is dlock's child, in a session of
/// its own (out of reach of signals to dlock's group or terminal), with
/// nothing open but /dev/null and its socket to dlock; after a normal run, dlock has
/// reaped it: no process of that pid is left, not even a zombie.
#[test]
fn the_reaper_does_not_outlive_dlock() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "echo $$ > {group}; touch {started}; while ! [ -e {go} ]; do sleep 0.02; done",
        group = dir.sh("group"),
        started = dir.sh("started"),
        go = dir.sh("go"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "reaped", "--", "sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let reapers: Vec<Stat> = all_processes()
        .filter(|s| s.comm == "dlock-reaper" && s.ppid == d.pid())
        .collect();
    assert_eq!(reapers.len(), 1, "dlock's reapers: {reapers:?}");
    let reaper = &reapers[0];
    let dlock = stat(d.pid()).unwrap();
    assert_eq!(reaper.sid, reaper.pid, "a session of its own");
    assert_ne!(reaper.pgid, dlock.pgid);
    let mut fds: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{}/fd", reaper.pid))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let target = std::fs::read_link(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                target.display().to_string(),
            )
        })
        .collect();
    fds.sort();
    assert_eq!(fds.len(), 4, "{fds:?}");
    assert!(fds[..3].iter().all(|(_, t)| t == "/dev/null"), "{fds:?}");
    assert!(fds[3].1.starts_with("socket:"), "{fds:?}");
    std::fs::write(dir.path("go"), "").unwrap();
    assert_eq!(d.wait(20 * SEC), 0, "{}", d.stderr());
    let left = stat(reaper.pid).filter(|s| s.comm == "dlock-reaper");
    assert!(left.is_none(), "the reaper outlived dlock: {left:?}");
}

/// A process's `/proc/PID/stat`, the fields these tests look at.
#[derive(Debug)]
struct Stat {
    pid: i32,
    comm: String,
    ppid: i32,
    pgid: i32,
    sid: i32,
}

fn stat(pid: i32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp session ...": comm may hold spaces.
    let (head, rest) = s.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        pid,
        comm,
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        sid: f.get(3)?.parse().ok()?,
    })
}

fn all_processes() -> impl Iterator<Item = Stat> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(stat)
}
