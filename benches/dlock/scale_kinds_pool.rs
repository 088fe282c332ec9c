//! Connections for the waiters of scale_kinds_queue.rs: a waiter blocks its
//! connection, so W waiters need W connections, each written to and read
//! from on its own (no thread per connection: one reply at most is ever
//! outstanding on each, and it is read only once it is due).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long a read of a reply that is due may take before it counts as lost.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Pool {
    conns: Vec<TcpStream>,
    ids: Vec<i64>,
}

impl Pool {
    /// `n` connections to `port` and their `CLIENT ID`s.
    pub fn open(port: u16, n: usize) -> Result<Pool, String> {
        let mut conns = Vec::with_capacity(n);
        for i in 0..n {
            let s = TcpStream::connect(("127.0.0.1", port))
                .map_err(|e| format!("connection {i} of {n}: {e}"))?;
            let _ = s.set_nodelay(true);
            let _ = s.set_read_timeout(Some(READ_TIMEOUT));
            conns.push(s);
            // Asked as they open, read below: a round trip each would add
            // up to seconds at 10,000 connections.
            send(&mut conns[i], b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")?;
        }
        let mut ids = Vec::with_capacity(n);
        for (i, s) in conns.iter_mut().enumerate() {
            let line = read_line(s).map_err(|e| format!("CLIENT ID of connection {i}: {e}"))?;
            match line.strip_prefix(':').and_then(|v| v.parse().ok()) {
                Some(id) => ids.push(id),
                None => return Err(format!("CLIENT ID of connection {i}: {line}")),
            }
        }
        Ok(Pool { conns, ids })
    }

    pub fn id(&self, i: usize) -> i64 {
        self.ids[i]
    }

    /// Writes one encoded command on connection `i`.
    pub fn send(&mut self, i: usize, cmd: &[u8]) -> Result<(), String> {
        send(&mut self.conns[i], cmd)
    }

    /// The one-line reply due on connection `i` (an integer, a nil or an
    /// error: what a waiting command answers).
    pub fn reply(&mut self, i: usize) -> Result<String, String> {
        self.reply_lines(i, 1)
    }

    /// The reply of `lines` lines due on connection `i` (`BLPOP`'s key and
    /// element are five), CRLFs kept between lines.
    pub fn reply_lines(&mut self, i: usize, lines: usize) -> Result<String, String> {
        read_lines(&mut self.conns[i], lines).map_err(|e| format!("reply on connection {i}: {e}"))
    }

    /// Which of the connections `among` have a reply waiting, once `want`
    /// of them do (or after `timeout`).
    pub fn readable(
        &self,
        among: &[usize],
        want: usize,
        timeout: Duration,
    ) -> Result<Vec<usize>, String> {
        let mut fds: Vec<libc::pollfd> = among
            .iter()
            .map(|&i| libc::pollfd {
                fd: self.conns[i].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // SAFETY: `fds` is a valid array of pollfd of the given length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1) };
            if n < 0 {
                return Err(format!("poll: {}", std::io::Error::last_os_error()));
            }
            let ready: Vec<usize> = among
                .iter()
                .zip(&fds)
                .filter(|(_, f)| f.revents != 0)
                .map(|(&i, _)| i)
                .collect();
            if ready.len() >= want || left.is_zero() {
                return Ok(ready);
            }
        }
    }
}

fn send(s: &mut TcpStream, cmd: &[u8]) -> Result<(), String> {
    s.write_all(cmd).map_err(|e| format!("write: {e}"))
}

/// Reads one line, CRLF stripped. Only one reply is ever due on a
/// connection, so nothing past it is read.
fn read_line(s: &mut TcpStream) -> Result<String, String> {
    read_lines(s, 1)
}

/// Reads `lines` lines, the last CRLF stripped.
fn read_lines(s: &mut TcpStream, lines: usize) -> Result<String, String> {
    let mut buf = Vec::with_capacity(32);
    let mut chunk = [0u8; 64];
    while !buf.ends_with(b"\r\n") || buf.windows(2).filter(|w| w == b"\r\n").count() < lines {
        match s.read(&mut chunk) {
            Ok(0) => return Err("connection closed".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    buf.truncate(buf.len() - 2);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Raises this process's open-file limit to `needed` if the hard limit
/// allows it; the servers it starts inherit the limit.
pub fn raise_nofile(needed: u64) -> Result<(), String> {
    // SAFETY: getrlimit/setrlimit on a valid rlimit struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err("getrlimit failed".into());
        }
        if lim.rlim_cur as u64 >= needed {
            return Ok(());
        }
        if (lim.rlim_max as u64) < needed {
            return Err(format!(
                "open-file hard limit {} < {needed} needed",
                lim.rlim_max
            ));
        }
        lim.rlim_cur = needed as libc::rlim_t;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            return Err(format!("setrlimit to {needed} failed"));
        }
    }
    Ok(())
}
