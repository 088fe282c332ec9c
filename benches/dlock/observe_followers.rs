//! The observers of the `observe` section (observe.rs): N connections, each
//! with one `DLOCK.OBSERVE res SINCE <last version> WAIT 0` outstanding,
//! driven by one thread with poll(2) (no thread per observer: on a 2-core
//! machine the observers must not crowd out the clients they watch). While
//! following, an observer sends its next `OBSERVE` with the version of each
//! answer as soon as the answer arrives, so it follows every change it can
//! (state, not a log: changes made while its next command travels are
//! skipped, and it is answered at once with the latest).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The version of a free resource.
pub const FREE: &[u8; 16] = b"0000000000000000";

/// What the driver thread and the section share.
#[derive(Default)]
struct Shared {
    /// Whether an answered observer observes again.
    follow: AtomicBool,
    /// Observers with a command outstanding.
    outstanding: AtomicUsize,
    /// Answers received (a state; never a nil or an error).
    answers: AtomicU64,
    /// Replies that were not a state: nil or an error.
    odd: AtomicU64,
    quit: AtomicBool,
}

pub struct Followers {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

struct Observer {
    stream: TcpStream,
    rbuf: Vec<u8>,
    version: [u8; 16],
    outstanding: bool,
}

impl Followers {
    /// `n` observers of `res` on `port`, connected, idle (not following).
    pub fn connect(port: u16, res: &str, n: usize) -> Result<Followers, String> {
        let mut obs = Vec::with_capacity(n);
        for i in 0..n {
            let stream = TcpStream::connect(("127.0.0.1", port))
                .map_err(|e| format!("observer {i} of {n}: {e}"))?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            stream.set_nonblocking(true).map_err(|e| e.to_string())?;
            obs.push(Observer {
                stream,
                rbuf: Vec::with_capacity(512),
                version: *FREE,
                outstanding: false,
            });
        }
        let shared = Arc::new(Shared::default());
        let (s, res) = (shared.clone(), res.to_string());
        let thread = thread::spawn(move || drive(obs, &res, &s));
        Ok(Followers {
            shared,
            thread: Some(thread),
        })
    }

    /// Every observer observes again (with the last version it saw) and
    /// follows from then on.
    pub fn follow(&self) {
        self.shared.follow.store(true, Ordering::SeqCst);
    }

    /// Answered observers stay idle; those still waiting are answered by
    /// the next change of the resource, which the caller makes.
    pub fn stop(&self) {
        self.shared.follow.store(false, Ordering::SeqCst);
    }

    pub fn outstanding(&self) -> usize {
        self.shared.outstanding.load(Ordering::SeqCst)
    }

    pub fn answers(&self) -> u64 {
        self.shared.answers.load(Ordering::Relaxed)
    }

    /// Replies that were not a state (must stay 0).
    pub fn odd(&self) -> u64 {
        self.shared.odd.load(Ordering::Relaxed)
    }

    /// Waits until no observer has a command outstanding.
    pub fn wait_idle(&self, within: Duration) -> Result<(), String> {
        let end = Instant::now() + within;
        while self.outstanding() > 0 {
            if Instant::now() >= end {
                return Err(format!("{} observers still waiting", self.outstanding()));
            }
            thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

impl Drop for Followers {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Err(e)) => eprintln!("bench: observers failed: {e}"),
                Err(_) => eprintln!("bench: the observers' thread panicked"),
                Ok(Ok(())) => {}
            }
        }
    }
}

fn observe_cmd(res: &str, since: &[u8; 16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    crate::load::command(
        &mut out,
        &[
            b"DLOCK.OBSERVE",
            res.as_bytes(),
            b"SINCE",
            since,
            b"WAIT",
            b"0",
        ],
    );
    out
}

fn send(o: &mut Observer, cmd: &[u8]) -> Result<(), String> {
    let mut at = 0;
    let end = Instant::now() + Duration::from_secs(10);
    while at < cmd.len() {
        match o.stream.write(&cmd[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < end => {
                thread::yield_now()
            }
            Err(e) => return Err(format!("write: {e}")),
        }
    }
    o.outstanding = true;
    Ok(())
}

/// The driver: sends while following, reads whatever arrives.
fn drive(mut obs: Vec<Observer>, res: &str, s: &Shared) -> Result<(), String> {
    let mut fds: Vec<libc::pollfd> = obs
        .iter()
        .map(|o| libc::pollfd {
            fd: o.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut chunk = vec![0u8; 16384];
    while !s.quit.load(Ordering::SeqCst) {
        let follow = s.follow.load(Ordering::SeqCst);
        if follow {
            for o in obs.iter_mut().filter(|o| !o.outstanding) {
                let cmd = observe_cmd(res, &o.version);
                send(o, &cmd)?;
                s.outstanding.fetch_add(1, Ordering::SeqCst);
            }
        }
        // SAFETY: `fds` is a valid array of pollfd of the given length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 5) };
        if n < 0 {
            return Err(format!("poll: {}", std::io::Error::last_os_error()));
        }
        for (o, fd) in obs.iter_mut().zip(&mut fds) {
            if fd.revents == 0 {
                continue;
            }
            fd.revents = 0;
            loop {
                match o.stream.read(&mut chunk) {
                    Ok(0) => return Err("an observer's connection closed".into()),
                    Ok(k) => o.rbuf.extend_from_slice(&chunk[..k]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
            while let Some(len) = crate::load::frame_len(&o.rbuf) {
                match version_of(&o.rbuf[..len]) {
                    Some(v) => {
                        o.version = v;
                        s.answers.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        s.odd.fetch_add(1, Ordering::Relaxed);
                    }
                }
                o.rbuf.drain(..len);
                o.outstanding = false;
                s.outstanding.fetch_sub(1, Ordering::SeqCst);
                // Straight back to waiting, with what it was told.
                if s.follow.load(Ordering::Relaxed) {
                    let cmd = observe_cmd(res, &o.version);
                    send(o, &cmd)?;
                    s.outstanding.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
    Ok(())
}

/// The version of a state reply (`*2`, then the 16 hex digits); `None`
/// for a nil or an error.
fn version_of(reply: &[u8]) -> Option<[u8; 16]> {
    let v = reply.strip_prefix(b"*2\r\n$16\r\n")?;
    v.get(..16)?.try_into().ok()
}
