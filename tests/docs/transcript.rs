//! `redis-cli` sessions in the manual, run against a real server.
//!
//! A code block is a session when one of its lines is a prompt:
//! `127.0.0.1:6380> COMMAND ...` (any `host:port>`), or a shell line
//! `$ redis-cli [-p PORT] COMMAND ...`. In a session:
//! - a prompt line is a command; the lines after it, up to the next prompt
//!   or comment, are its reply exactly as `redis-cli` prints it;
//! - `# ...` is narration; `# client X ...` makes X the client of the
//!   commands that follow (each client is one `redis-cli` connection; the
//!   first is the one before any such line);
//! - a command with no reply lines blocks: it must be parked by the server
//!   (`blocked_clients` goes up) and its reply comes later, as reply lines
//!   right after a `# client X ...` line, with no prompt between;
//! - `  # remark` (two spaces or more first) ends any command or reply line
//!   and is not part of it;
//! - in a reply, an integer of 10^12 or more is a fence: the same fence
//!   written twice in a page must be the same fence from the server,
//!   different ones different, in the same order; an integer after a
//!   `"ttl"` or `"maxhold"` field (or a `"waited"` or `"timeout"` one, as
//!   `DLOCK.WAITERS` answers) or in the reply to `PTTL` is a TTL, and so is
//!   the number of ms a `MAXHOLD` refusal names, matched within
//!   1.5 s (negative ones exactly); a quoted string of 16 hex digits other
//!   than all zeros is a `DLOCK.OBSERVE` version (keyed per server process):
//!   the same version written twice must be the same from the server,
//!   different ones different (all zeros, a free resource, exactly), and a
//!   command that names a version or a fence the page got earlier sends the
//!   server's.
//!
//! Each page's sessions run in order on one fresh server; each client is a
//! `redis-cli --no-raw` process fed through a pipe, so `MULTI` and `WAIT`
//! behave as typed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::markdown::Block;

/// What a session does, step by step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Run `command` as `client`; no `expect` lines: it must block.
    Run {
        client: String,
        command: String,
        expect: Vec<String>,
        line: usize,
    },
    /// The reply `client`'s blocked command gets.
    Later {
        client: String,
        expect: Vec<String>,
        line: usize,
    },
}

fn is_prompt(line: &str) -> Option<String> {
    if let Some(rest) = line.strip_prefix("$ redis-cli ") {
        let mut words = rest.split_whitespace().peekable();
        let mut skipped = Vec::new();
        while let Some(w) = words.peek() {
            if *w == "-p" || *w == "-h" {
                skipped.push(words.next().unwrap());
                skipped.push(words.next()?);
            } else {
                break;
            }
        }
        return Some(words.collect::<Vec<_>>().join(" "));
    }
    let (head, rest) = line.split_once("> ")?;
    let host_port = head.split('[').next()?;
    let (host, port) = host_port.rsplit_once(':')?;
    let ok = !host.is_empty()
        && !host.contains(' ')
        && !port.is_empty()
        && port.chars().all(|c| c.is_ascii_digit());
    ok.then(|| rest.to_string())
}

/// Whether a code block is a `redis-cli` session.
pub fn is_session(block: &Block) -> bool {
    block
        .lines
        .iter()
        .any(|l| is_prompt(l.trim_end()).is_some())
}

/// The line without a trailing `  # remark`.
fn strip_remark(line: &str) -> &str {
    let mut from = 0;
    while let Some(i) = line[from..].find('#') {
        let at = from + i;
        let before = &line[..at];
        if before.ends_with("  ") && !before.trim().is_empty() {
            return before.trim_end();
        }
        from = at + 1;
    }
    line.trim_end()
}

/// `# client X ...` -> X.
fn client_switch(comment: &str) -> Option<String> {
    let rest = comment.strip_prefix("# client ")?;
    let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
    (!name.is_empty()).then_some(name)
}

/// The steps of a session, or what is wrong with it.
pub fn parse(block: &Block) -> Result<Vec<Step>, String> {
    let mut steps: Vec<Step> = Vec::new();
    let mut client = String::new();
    // The step the next reply lines belong to.
    let mut open: Option<usize> = None;
    // A `# client X` line was the last thing seen: replies go to X's blocked command.
    let mut switched = false;
    for (i, raw) in block.lines.iter().enumerate() {
        let n = block.line + i;
        let line = raw.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        if let Some(command) = is_prompt(strip_remark(line)) {
            steps.push(Step::Run {
                client: client.clone(),
                command,
                expect: Vec::new(),
                line: n,
            });
            open = Some(steps.len() - 1);
            switched = false;
            continue;
        }
        if line.starts_with('#') {
            open = None;
            switched = false;
            if let Some(x) = client_switch(line) {
                client = x;
                switched = true;
            }
            continue;
        }
        let reply = strip_remark(line).to_string();
        if switched {
            steps.push(Step::Later {
                client: client.clone(),
                expect: Vec::new(),
                line: n,
            });
            open = Some(steps.len() - 1);
            switched = false;
        }
        match open.map(|o| &mut steps[o]) {
            Some(Step::Run { expect, .. }) | Some(Step::Later { expect, .. }) => expect.push(reply),
            None => {
                return Err(format!(
                    "line {n}: a reply line without a command: {line:?}"
                ))
            }
        }
    }
    Ok(steps)
}

/// One `redis-cli` connection.
pub struct Cli {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    in_multi: bool,
    /// The reply on its way is one line with no end marker (inside `MULTI`).
    single_line: bool,
}

const END: &str = "dlock-docs-end-of-reply";

impl Cli {
    pub fn connect(cli: &std::ffi::OsStr, port: u16) -> Cli {
        let mut child = Command::new(cli)
            .args(["--no-raw", "-p", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cli.to_string_lossy()));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Cli {
            child,
            stdin,
            lines,
            in_multi: false,
            single_line: false,
        }
    }

    /// Sends a command; inside `MULTI` a queued command's reply is one line,
    /// elsewhere an `ECHO` behind it marks the reply's end.
    pub fn send(&mut self, command: &str) {
        let word = command
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let mut text = format!("{command}\n");
        let single_line = self.in_multi && word != "EXEC" && word != "DISCARD" || word == "MULTI";
        if !single_line {
            text.push_str(&format!("ECHO {END}\n"));
        }
        match word.as_str() {
            "MULTI" => self.in_multi = true,
            "EXEC" | "DISCARD" => self.in_multi = false,
            _ => {}
        }
        self.single_line = single_line;
        self.stdin.write_all(text.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// The reply to the last command sent, or None if none came in `wait`.
    pub fn reply(&mut self, wait: Duration) -> Option<Vec<String>> {
        let end = Instant::now() + wait;
        let mut out = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == format!("\"{END}\"") => return Some(out),
                Ok(line) => {
                    out.push(line);
                    if self.single_line {
                        // MULTI's OK or a QUEUED: no end marker behind it.
                        self.single_line = false;
                        return Some(out);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => return Some(out),
            }
        }
    }

    /// Whatever the connection printed so far, without waiting.
    pub fn pending_output(&mut self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fences seen in one page: documented -> real, one to one, same order;
/// and the observe versions: documented -> real, one to one.
#[derive(Default)]
pub struct Fences {
    pairs: Vec<(i64, i64)>,
    versions: Vec<(String, String)>,
}

/// The smallest integer taken for a fence (fences are unix microseconds).
pub const FENCE_FLOOR: i64 = 1_000_000_000_000;
/// How far a documented TTL may be from the server's.
pub const TTL_SLACK: i64 = 1_500;

impl Fences {
    /// Whether `real` may stand where the page wrote `doc`, recording it.
    fn accept(&mut self, doc: i64, real: i64) -> Result<(), String> {
        if real < FENCE_FLOOR {
            return Err(format!("{real} is not a fence (the page shows {doc})"));
        }
        for &(d, r) in &self.pairs {
            if d == doc && r != real {
                return Err(format!(
                    "the page shows fence {doc} twice, the server gave {r} and then {real}"
                ));
            }
            if d != doc && r == real {
                return Err(format!(
                    "the server gave fence {real} for both {d} and {doc} of the page"
                ));
            }
            if (d < doc) != (r < real) && d != doc {
                return Err(format!(
                    "fences out of order: the page shows {d} then {doc}, the server gave {r} then {real}"
                ));
            }
        }
        if !self.pairs.iter().any(|&(d, _)| d == doc) {
            self.pairs.push((doc, real));
        }
        Ok(())
    }
}

impl Fences {
    /// `command` with every version and every fence the page showed in an
    /// earlier reply replaced by the one the server gave in its place.
    pub fn translate(&self, command: &str) -> String {
        command
            .split(' ')
            .map(|w| {
                if let Some((_, r)) = self.versions.iter().find(|(d, _)| d == w) {
                    return r.clone();
                }
                let fence = w.parse::<i64>().ok().filter(|f| *f >= FENCE_FLOOR);
                match fence.and_then(|f| self.pairs.iter().find(|(d, _)| *d == f)) {
                    Some((_, r)) => r.to_string(),
                    None => w.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether version `real` may stand where the page wrote `doc`.
    fn accept_version(&mut self, doc: &str, real: &str) -> Result<(), String> {
        for (d, r) in &self.versions {
            if d == doc && r != real {
                return Err(format!(
                    "the page shows version {doc} twice, the server gave {r} and then {real}"
                ));
            }
            if d != doc && r == real {
                return Err(format!(
                    "the server gave version {real} for both {d} and {doc} of the page"
                ));
            }
        }
        if !self.versions.iter().any(|(d, _)| d == doc) {
            self.versions.push((doc.to_string(), real.to_string()));
        }
        Ok(())
    }
}

/// `prefix"<16 hex digits>"` (not all zeros) -> (prefix, version).
fn version_of(line: &str) -> Option<(&str, &str)> {
    let body = line.strip_suffix('"')?;
    let at = body.rfind('"')?;
    let v = &body[at + 1..];
    let is_version =
        v.len() == 16 && v.chars().all(|c| c.is_ascii_hexdigit()) && v != "0000000000000000";
    is_version.then(|| (&line[..at], v))
}

/// `prefix(integer) N` -> (prefix, N).
/// A `MAXHOLD` refusal's ms left to the cap, matched as a TTL: the text
/// before and after the number, and the number.
fn ms_left_of(line: &str) -> Option<(&str, i64, &str)> {
    const LEFT: &str = "MAXHOLD the hold may live ";
    let at = line.find(LEFT)? + LEFT.len();
    let end = at + line[at..].find(' ')?;
    Some((&line[..at], line[at..end].parse().ok()?, &line[end..]))
}

fn integer_of(line: &str) -> Option<(&str, i64)> {
    let at = line.find("(integer) ")?;
    let n = line[at + "(integer) ".len()..].trim().parse().ok()?;
    Some((&line[..at], n))
}

/// Compares a reply with what the page shows; `command` is what produced it.
pub fn compare(
    command: &str,
    expect: &[String],
    got: &[String],
    fences: &mut Fences,
) -> Result<(), String> {
    let mismatch = || {
        format!(
            "`{command}`: the page shows\n    {}\n  the server replied\n    {}",
            expect.join("\n    "),
            got.join("\n    ")
        )
    };
    if expect.len() != got.len() {
        return Err(mismatch());
    }
    let pttl = command
        .split_whitespace()
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case("PTTL"));
    for (i, (e, g)) in expect.iter().zip(got).enumerate() {
        let (e, g) = (e.trim_end(), g.trim_end());
        if let (Some((ep, ev)), Some((gp, gv))) = (version_of(e), version_of(g)) {
            if ep != gp {
                return Err(mismatch());
            }
            fences
                .accept_version(ev, gv)
                .map_err(|why| format!("{}\n  {why}", mismatch()))?;
            continue;
        }
        if e == g {
            if let Some((_, n)) = integer_of(e) {
                if n >= FENCE_FLOOR {
                    fences
                        .accept(n, n)
                        .map_err(|why| format!("{}: {why}", mismatch()))?;
                }
            }
            continue;
        }
        if let (Some((ep, en, es)), Some((gp, gn, gs))) = (ms_left_of(e), ms_left_of(g)) {
            if (ep, es) == (gp, gs) && (en - gn).abs() <= TTL_SLACK {
                continue;
            }
            return Err(mismatch());
        }
        let (Some((ep, en)), Some((gp, gn))) = (integer_of(e), integer_of(g)) else {
            return Err(mismatch());
        };
        if ep != gp {
            return Err(mismatch());
        }
        // Durations that run while the page is read: a TTL, a cap's time
        // left, and the `waited` and `timeout` of a `DLOCK.WAITERS` reply.
        let ttl = pttl
            || (i > 0
                && ["\"ttl\"", "\"maxhold\"", "\"waited\"", "\"timeout\""]
                    .iter()
                    .any(|f| expect[i - 1].trim_end().ends_with(f)));
        if en >= FENCE_FLOOR {
            fences
                .accept(en, gn)
                .map_err(|why| format!("{}\n  {why}", mismatch()))?;
        } else if ttl && en >= 0 && gn >= 0 && (en - gn).abs() <= TTL_SLACK {
            continue;
        } else {
            return Err(mismatch());
        }
    }
    Ok(())
}

/// How long a command may take to answer (the page's `WAIT`s are short).
const REPLY_WAIT: Duration = Duration::from_secs(10);

/// Runs one page's sessions on the server at `port`; `blocked` reads the
/// server's `blocked_clients`. Returns every failure, with its line.
pub fn run_page(
    path: &str,
    sessions: &[Vec<Step>],
    cli: &std::ffi::OsStr,
    port: u16,
    mut blocked: impl FnMut() -> i64,
) -> Vec<String> {
    let mut fences = Fences::default();
    let mut failures = Vec::new();
    for steps in sessions {
        let mut clients: HashMap<String, Cli> = HashMap::new();
        let mut pending: HashMap<String, String> = HashMap::new();
        for step in steps {
            match step {
                Step::Run {
                    client,
                    command,
                    expect,
                    line,
                } => {
                    let c = clients
                        .entry(client.clone())
                        .or_insert_with(|| Cli::connect(cli, port));
                    // A version the page got earlier is sent as the server's.
                    let command = &fences.translate(command);
                    if expect.is_empty() {
                        let before = blocked();
                        c.send(command);
                        let end = Instant::now() + Duration::from_secs(5);
                        while blocked() <= before && Instant::now() < end {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        let early = c.pending_output();
                        if blocked() <= before || !early.is_empty() {
                            failures.push(format!(
                                "{path}:{line}: `{command}` shows no reply, so it must block; it did not ({early:?})"
                            ));
                            break;
                        }
                        pending.insert(client.clone(), command.clone());
                        continue;
                    }
                    c.send(command);
                    let Some(got) = c.reply(REPLY_WAIT) else {
                        failures.push(format!("{path}:{line}: `{command}`: no reply"));
                        break;
                    };
                    if let Err(e) = compare(command, expect, &got, &mut fences) {
                        failures.push(format!("{path}:{line}: {e}"));
                    }
                }
                Step::Later {
                    client,
                    expect,
                    line,
                } => {
                    let (Some(command), Some(c)) =
                        (pending.remove(client), clients.get_mut(client))
                    else {
                        failures.push(format!(
                            "{path}:{line}: a reply for client {client}, which has no blocked command"
                        ));
                        break;
                    };
                    let Some(got) = c.reply(REPLY_WAIT) else {
                        failures.push(format!(
                            "{path}:{line}: `{command}` (client {client}): still blocked"
                        ));
                        break;
                    };
                    if let Err(e) = compare(&command, expect, &got, &mut fences) {
                        failures.push(format!("{path}:{line}: {e}"));
                    }
                }
            }
        }
    }
    failures
}
