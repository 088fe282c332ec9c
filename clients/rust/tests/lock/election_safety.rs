//! Two candidates never both lead, checked end to end against a fenced
//! sink while one leader is paused (SIGSTOP) past its ttl and resumed.
//!
//! Three candidates are threads of this process; a fourth is a child
//! process (this test binary run again, `candidate_process`), because only
//! a process can be paused whole: SIGSTOP stops its watchdog with it, as a
//! GC pause or a suspended VM does. Every candidate campaigns in a loop;
//! a leader checks `is_lost()` before each write, as a careful user does,
//! and writes its term to the sink: a small store that accepts a write only
//! with a term at least the highest it has seen, and records every write.
//!
//! The child is paused at the worst moment for it: after its check passed
//! and before its write is sent (it waits for the test's "go" there, and is
//! stopped while it waits). Its lease runs out, another candidate leads and
//! writes; resumed, the child sends the write it had checked for, with its
//! old term, and the sink must refuse it.
//!
//! Times are `CLOCK_MONOTONIC` microseconds, one clock for both processes.
//! A leadership is believed from the moment `campaign` returned until the
//! budget end read at its last passing check, or its resignation if that
//! came first: inside the server's lease, so believed leaderships of two
//! candidates never overlap.

use crate::common::{ms, Server, SEC};
use dlock_client::{Leader, Leadership, Locker};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const NAME: &str = "leader";
/// Short, so a pause past it costs well under a second.
const TTL: Duration = Duration::from_millis(600);
/// How long one campaign waits in the queue before the stop flag is read.
const CAMPAIGN_WAIT: Duration = Duration::from_millis(300);
/// Set in the child's environment: `url sink-address control-address`.
const CHILD_ENV: &str = "DLOCK_TEST_ELECTION_CANDIDATE";
const CHILD_ID: &str = "paused";
/// The child's write (0-based, in its first leadership) it is paused before.
const PAUSED_WRITE: u32 = 2;

/// `CLOCK_MONOTONIC` in µs: the same clock in every process (and the one
/// `Instant` reads on Linux).
fn mono_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// A small seeded generator: each candidate's choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One write the sink received.
#[derive(Debug, Clone)]
struct SinkWrite {
    writer: String,
    term: u64,
    /// The writer's budget end at the check before the write.
    until_us: u64,
    /// When the sink received it.
    at_us: u64,
    accepted: bool,
    /// The sink's highest term before this write.
    highest: u64,
}

/// The fenced sink: over TCP, one line per write (`writer term until`),
/// answered `ok` or `refused`.
#[derive(Default)]
struct Sink {
    highest: u64,
    log: Vec<SinkWrite>,
}

fn start_sink() -> (String, Arc<Mutex<Sink>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sink = Arc::new(Mutex::new(Sink::default()));
    let shared = sink.clone();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let sink = shared.clone();
            thread::spawn(move || serve_writes(conn, &sink));
        }
    });
    (addr, sink)
}

fn serve_writes(conn: TcpStream, sink: &Mutex<Sink>) {
    let mut out = conn.try_clone().unwrap();
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let f: Vec<&str> = line.split(' ').collect();
        let [writer, term, until] = f[..] else {
            return;
        };
        let (term, until_us) = (term.parse().unwrap(), until.parse().unwrap());
        let accepted = {
            let mut s = sink.lock().unwrap();
            let highest = s.highest;
            let accepted = term >= highest;
            if accepted {
                s.highest = term;
            }
            s.log.push(SinkWrite {
                writer: writer.to_string(),
                term,
                until_us,
                at_us: mono_us(),
                accepted,
                highest,
            });
            accepted
        };
        let reply: &[u8] = if accepted { b"ok\n" } else { b"refused\n" };
        if out.write_all(reply).is_err() {
            return;
        }
    }
}

/// A candidate's connection to the sink.
struct SinkConn {
    writer: String,
    out: TcpStream,
    replies: BufReader<TcpStream>,
}

impl SinkConn {
    fn open(addr: &str, writer: &str) -> SinkConn {
        let out = TcpStream::connect(addr).unwrap();
        out.set_read_timeout(Some(10 * SEC)).unwrap();
        let replies = BufReader::new(out.try_clone().unwrap());
        SinkConn {
            writer: writer.to_string(),
            out,
            replies,
        }
    }

    /// Writes `term`; whether the sink accepted it.
    fn write(&mut self, term: u64, until_us: u64) -> bool {
        let line = format!("{} {term} {until_us}\n", self.writer);
        self.out.write_all(line.as_bytes()).unwrap();
        let mut reply = String::new();
        self.replies.read_line(&mut reply).unwrap();
        reply.trim() == "ok"
    }
}

/// A leadership as its candidate believed it.
#[derive(Debug, Clone)]
struct Term {
    who: String,
    term: u64,
    /// Just after `campaign` returned.
    granted_us: u64,
    /// Until the budget end read at the last check that passed, or the
    /// resignation if sooner (0: no check passed).
    until_us: u64,
}

/// The careful user's check before a write: `None` once the leadership is
/// lost; else the budget end, read after the check (so it is no later
/// than the lease's end).
fn check(lead: &Leadership) -> Option<u64> {
    let now = mono_us();
    if lead.is_lost() {
        return None;
    }
    let left = lead.valid_until().saturating_duration_since(Instant::now());
    (!left.is_zero()).then(|| now + left.as_micros() as u64)
}

/// A thread candidate: campaigns until `stop`; each leadership writes 1
/// to 6 times, or one time in five keeps leading past a ttl (the watchdog
/// renews), then resigns.
fn thread_candidate(
    url: String,
    sink: String,
    who: String,
    seed: u64,
    stop: Arc<AtomicBool>,
    terms: Arc<Mutex<Vec<Term>>>,
) {
    let locker = Locker::new(&url).unwrap();
    let election = locker.election(NAME).id(who.clone()).ttl(TTL);
    let mut sink = SinkConn::open(&sink, &who);
    let mut rng = Rng(seed);
    while !stop.load(Ordering::SeqCst) {
        let Some(lead) = election.campaign(CAMPAIGN_WAIT).unwrap() else {
            continue;
        };
        let mut t = Term {
            who: who.clone(),
            term: lead.term(),
            granted_us: mono_us(),
            until_us: 0,
        };
        let keep = rng.below(5) == 0;
        let writes = 1 + rng.below(6);
        let began = Instant::now();
        let mut n = 0;
        while let Some(until) = check(&lead) {
            t.until_us = until;
            sink.write(t.term, until);
            n += 1;
            let more = if keep {
                began.elapsed() < TTL + ms(100)
            } else {
                n < writes
            };
            if !more || stop.load(Ordering::SeqCst) {
                break;
            }
            thread::sleep(ms(5 + rng.below(10)));
        }
        t.until_us = t.until_us.min(mono_us());
        terms.lock().unwrap().push(t);
        let _ = lead.resign();
    }
}

/// The child candidate, in its own process (see the file comment). It
/// reports to the test on the control connection: `lead TERM`, `ready
/// TERM` (at the pause point, then waits for `go`), `lost TERM`, and `end
/// TERM GRANTED UNTIL` for each leadership; `stop` ends it.
#[test]
#[ignore = "a child process of two_candidates_never_both_lead_with_a_leader_paused_past_its_ttl"]
fn candidate_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let [url, sink, control] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{CHILD_ENV}: {spec}");
    };
    let control = TcpStream::connect(control).unwrap();
    let mut say = control.try_clone().unwrap();
    let mut say = move |line: String| {
        say.write_all(format!("{line}\n").as_bytes()).unwrap();
    };
    let (tx, heard) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(control).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let locker = Locker::new(url).unwrap();
    let election = locker.election(NAME).id(CHILD_ID).ttl(TTL);
    let mut sink = SinkConn::open(sink, CHILD_ID);
    let mut paused = false;
    let mut stop = false;
    while !stop {
        stop = heard.try_recv().is_ok_and(|l| l == "stop");
        let Some(lead) = election.campaign(CAMPAIGN_WAIT).unwrap() else {
            continue;
        };
        let (term, granted) = (lead.term(), mono_us());
        let mut until_us = 0;
        say(format!("lead {term}"));
        for n in 0..4 {
            let Some(until) = check(&lead) else {
                say(format!("lost {term}"));
                break;
            };
            until_us = until;
            if !paused && n == PAUSED_WRITE {
                paused = true;
                say(format!("ready {term}"));
                // Stopped here by the test; "go" is waiting when resumed.
                let go = heard.recv_timeout(30 * SEC).unwrap();
                assert_eq!(go, "go");
            }
            sink.write(term, until);
            thread::sleep(ms(10));
        }
        let until_us = until_us.min(mono_us());
        say(format!("end {term} {granted} {until_us}"));
        drop(lead);
        stop = stop || heard.try_recv().is_ok_and(|l| l == "stop");
    }
}

/// The child candidate's process: resumed and killed when dropped.
struct ChildCandidate {
    child: Child,
    output: std::path::PathBuf,
}

impl ChildCandidate {
    fn spawn(url: &str, sink: &str, control: &str) -> ChildCandidate {
        let output =
            std::env::temp_dir().join(format!("dlock-election-child-{}.log", std::process::id()));
        let log = std::fs::File::create(&output).unwrap();
        // The child test's name: this module's path less the crate's name.
        let module = module_path!().split_once("::").map_or("", |(_, m)| m);
        let name = format!("{module}::candidate_process");
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            &name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{url} {sink} {control}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // Dies with the test process, even if it is killed.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        ChildCandidate {
            child: cmd.spawn().unwrap(),
            output,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: a signal to our own child.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Whether the process is stopped (state `T` in /proc).
    fn stopped(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
    }

    /// Waits for its exit, at most `within`; whether it exited cleanly.
    fn wait(&mut self, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            thread::sleep(ms(10));
        }
        false
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }
}

impl Drop for ChildCandidate {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.output);
    }
}

/// A line from the child, with when it came.
fn heard(
    rx: &mpsc::Receiver<String>,
    what: &str,
    within: Duration,
    child: &ChildCandidate,
) -> String {
    rx.recv_timeout(within).unwrap_or_else(|_| {
        panic!(
            "the child did not say {what} within {within:?}; its output:\n{}",
            child.output()
        )
    })
}

#[test]
fn two_candidates_never_both_lead_with_a_leader_paused_past_its_ttl() {
    let server = Server::start();
    let url = server.url();
    let (sink_addr, sink) = start_sink();
    let stop = Arc::new(AtomicBool::new(false));
    let terms: Arc<Mutex<Vec<Term>>> = Arc::default();

    // The observer, from the start.
    let (seen_tx, seen) = mpsc::channel();
    let observed = Locker::new(&url).unwrap().election(NAME);
    thread::spawn(move || {
        for change in observed.observe() {
            if seen_tx.send(change).is_err() {
                break;
            }
        }
    });

    // The child candidate and its control connection.
    let control = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child =
        ChildCandidate::spawn(&url, &sink_addr, &control.local_addr().unwrap().to_string());
    control.set_nonblocking(true).unwrap();
    let started = Instant::now();
    let conn = loop {
        match control.accept() {
            Ok((c, _)) => break c,
            Err(_) if started.elapsed() < 20 * SEC => thread::sleep(ms(10)),
            Err(e) => panic!("the child never connected ({e}): {}", child.output()),
        }
    };
    conn.set_nonblocking(false).unwrap();
    let mut tell = conn.try_clone().unwrap();
    let (line_tx, from_child) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(conn).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut child_lines = Vec::new();

    let candidates: Vec<_> = (0..3)
        .map(|i| {
            let (url, sink, stop, terms) =
                (url.clone(), sink_addr.clone(), stop.clone(), terms.clone());
            thread::spawn(move || {
                thread_candidate(url, sink, format!("t{i}"), 0x9e37_79b9 + i, stop, terms)
            })
        })
        .collect();

    // The child leads and reaches its pause point: stop it there, past its
    // ttl, until another leader has written.
    let paused_term = loop {
        let line = heard(&from_child, "ready", 20 * SEC, &child);
        child_lines.push(line.clone());
        if let Some(t) = line.strip_prefix("ready ") {
            break t.parse::<u64>().unwrap();
        }
    };
    child.signal(libc::SIGSTOP);
    crate::common::server::wait_until(5 * SEC, "the child stopped", || child.stopped());
    let (stopped_at, stopped_us) = (Instant::now(), mono_us());
    tell.write_all(b"go\n").unwrap();
    crate::common::server::wait_until(10 * SEC, "another leader's write", || {
        let s = sink.lock().unwrap();
        let other = |w: &SinkWrite| w.writer != CHILD_ID && w.at_us > stopped_us && w.accepted;
        stopped_at.elapsed() > TTL + ms(200) && s.log.iter().any(other)
    });
    let resumed_us = mono_us();
    child.signal(libc::SIGCONT);
    // Resumed, its next check finds the leadership lost.
    loop {
        let line = heard(&from_child, "lost", 5 * SEC, &child);
        child_lines.push(line.clone());
        if line == format!("lost {paused_term}") {
            break;
        }
    }
    // A while longer: the child campaigns again, leaders come and go.
    thread::sleep(SEC);
    stop.store(true, Ordering::SeqCst);
    tell.write_all(b"stop\n").unwrap();
    let end = Instant::now() + 20 * SEC;
    for c in candidates {
        while !c.is_finished() {
            assert!(Instant::now() < end, "a candidate thread did not stop");
            thread::sleep(ms(10));
        }
        c.join().unwrap();
    }
    assert!(child.wait(10 * SEC), "the child: {}", child.output());
    // Its last reports, up to the end of its connection.
    loop {
        match from_child.recv_timeout(5 * SEC) {
            Ok(line) => child_lines.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => panic!("the child's connection did not end: {e}"),
        }
    }

    // Every leadership, the child's from its reports.
    let mut all = terms.lock().unwrap().clone();
    for line in &child_lines {
        if let Some(rest) = line.strip_prefix("end ") {
            let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
            all.push(Term {
                who: CHILD_ID.into(),
                term: f[0],
                granted_us: f[1],
                until_us: f[2],
            });
        }
    }
    let by_term: HashMap<u64, &Term> = all.iter().map(|t| (t.term, t)).collect();
    assert_eq!(by_term.len(), all.len(), "a term granted twice: {all:?}");

    // Believed leaderships never overlap, and terms rise from one to the next.
    let mut led: Vec<&Term> = all.iter().filter(|t| t.until_us > t.granted_us).collect();
    led.sort_by_key(|t| t.granted_us);
    for w in led.windows(2) {
        assert!(
            w[0].until_us <= w[1].granted_us,
            "two leaders at once: {:?} and {:?}",
            w[0],
            w[1]
        );
        assert!(
            w[0].term < w[1].term,
            "terms went down: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    assert!(led.len() >= 5, "only {} leaderships: {all:?}", led.len());

    // The sink: accepted writes carry the highest term so far, each term is
    // one writer's; a write is refused only when it arrived after its
    // writer's budget (its leadership may have ended: someone else led).
    let log = sink.lock().unwrap().log.clone();
    for w in &log {
        let owner = by_term.get(&w.term).map(|t| t.who.as_str());
        assert_eq!(
            owner,
            Some(w.writer.as_str()),
            "a write under another's term: {w:?}"
        );
        if w.accepted {
            assert!(w.term >= w.highest, "{w:?}");
        } else {
            assert!(
                w.at_us >= w.until_us,
                "refused while its writer still led (two leaders): {w:?}"
            );
        }
    }
    let accepted: Vec<u64> = log.iter().filter(|w| w.accepted).map(|w| w.term).collect();
    assert!(
        accepted.windows(2).all(|p| p[0] <= p[1]),
        "accepted terms interleave: {accepted:?}"
    );
    // The paused leader's late write: exactly one after the resume (its
    // next check saw the loss), refused.
    let late: Vec<&SinkWrite> = log
        .iter()
        .filter(|w| w.writer == CHILD_ID && w.term == paused_term && w.at_us >= resumed_us)
        .collect();
    assert_eq!(
        late.len(),
        1,
        "the paused leader's writes after SIGCONT: {late:?}"
    );
    assert!(
        !late[0].accepted,
        "the late write was accepted: {:?}",
        late[0]
    );
    assert!(late[0].highest > paused_term);

    // The observer: terms only rise, each one a candidate's; it saw the
    // paused leadership (it lasted past a ttl), and last nobody leading
    // (everyone resigned): read until that is the last change and no other
    // came for 300 ms.
    let mut shown = Vec::new();
    let mut last = None;
    let end = Instant::now() + 10 * SEC;
    loop {
        let idle = ms(300).min(end.saturating_duration_since(Instant::now()));
        match seen.recv_timeout(idle) {
            Ok(change) => {
                let change = change.expect("the observer's error");
                if let Leader::Leads { id, term, .. } = &change {
                    let who = by_term.get(term).map(|t| t.who.as_str());
                    assert_eq!(who, Some(id.as_str()), "term {term}");
                    shown.push(*term);
                }
                last = Some(change);
            }
            Err(_) if last == Some(Leader::Nobody) => break,
            Err(_) => assert!(Instant::now() < end, "the observer's last change: {last:?}"),
        }
    }
    assert!(
        shown.windows(2).all(|p| p[0] < p[1]),
        "the observer saw a term go back: {shown:?}"
    );
    assert!(
        shown.contains(&paused_term),
        "{paused_term} not in {shown:?}"
    );
    eprintln!(
        "{} leaderships, {} writes ({} refused), the observer saw {} terms",
        all.len(),
        log.len(),
        log.iter().filter(|w| !w.accepted).count(),
        shown.len()
    );
}
