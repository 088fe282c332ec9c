//! A loopback TCP proxy for fault injection: sits between clients and a
//! redis-server and, for a seeded random subset of the commands a filter
//! selects, forwards the command, waits for the server's reply and then
//! drops the client connection instead of forwarding it. The command took
//! effect, the client never hears: a lost reply.
//!
//! The proxy works in lockstep (one command, one reply), which is how a sync
//! client talks; pipelined commands are handled one at a time. Only RESP2
//! is parsed. Every dropped reply is recorded (command and reply), so a test
//! can tell exactly which commands took effect without the client knowing.
#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Bounds every proxy read, so no proxy thread outlives a wedged peer by
/// more than this.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// xorshift64*: small, seedable, good enough for fault schedules.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so nearby seeds give unrelated streams and
        // the state is never 0.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// One RESP2 value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Frame>>),
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn read_line(r: &mut impl BufRead, raw: &mut Vec<u8>) -> io::Result<Vec<u8>> {
    let start = raw.len();
    r.read_until(b'\n', raw)?;
    let line = &raw[start..];
    if line.is_empty() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad("RESP line without CRLF"));
    }
    Ok(line[..line.len() - 2].to_vec())
}

fn parse_int(b: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad RESP integer"))
}

/// Reads one complete RESP2 value, appending its exact bytes to `raw`.
pub fn read_frame(r: &mut impl BufRead, raw: &mut Vec<u8>) -> io::Result<Frame> {
    let line = read_line(r, raw)?;
    let (kind, rest) = line.split_first().ok_or_else(|| bad("empty RESP line"))?;
    Ok(match kind {
        b'+' => Frame::Simple(rest.to_vec()),
        b'-' => Frame::Error(rest.to_vec()),
        b':' => Frame::Int(parse_int(rest)?),
        b'$' => {
            let n = parse_int(rest)?;
            if n < 0 {
                Frame::Bulk(None)
            } else {
                let start = raw.len();
                raw.resize(start + n as usize + 2, 0);
                r.read_exact(&mut raw[start..])?;
                if &raw[raw.len() - 2..] != b"\r\n" {
                    return Err(bad("bulk string without CRLF"));
                }
                Frame::Bulk(Some(raw[start..start + n as usize].to_vec()))
            }
        }
        b'*' => {
            let n = parse_int(rest)?;
            if n < 0 {
                Frame::Array(None)
            } else {
                let mut items = Vec::with_capacity(n.min(1024) as usize);
                for _ in 0..n {
                    items.push(read_frame(r, raw)?);
                }
                Frame::Array(Some(items))
            }
        }
        _ => return Err(bad("unsupported RESP type (RESP2 only)")),
    })
}

/// A command whose reply was produced by the server and then withheld.
#[derive(Clone, Debug)]
pub struct Dropped {
    /// The command as sent, e.g. `["DLOCK.ACQUIRE", "res", "tok", "5000"]`.
    pub args: Vec<Vec<u8>>,
    /// The reply the client never received.
    pub reply: Frame,
}

impl Dropped {
    pub fn arg(&self, i: usize) -> &[u8] {
        self.args.get(i).map_or(&[], |a| a.as_slice())
    }
}

/// Which commands may have their reply dropped (by their arguments).
pub type Filter = fn(&[Vec<u8>]) -> bool;

struct Shared {
    upstream: AtomicU16,
    seed: u64,
    per_mille: u64,
    filter: Filter,
    stop: AtomicBool,
    conns: AtomicU64,
    forwarded: AtomicU64,
    dropped: Mutex<Vec<Dropped>>,
}

pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a fresh loopback port and forwards to `127.0.0.1:upstream`.
    /// Each command selected by `filter` has its reply dropped with
    /// probability `per_mille`/1000 (each connection draws from its own
    /// stream, derived from `seed` and the connection's number).
    pub fn start(upstream: u16, seed: u64, per_mille: u64, filter: Filter) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream: AtomicU16::new(upstream),
            seed,
            per_mille,
            filter,
            stop: AtomicBool::new(false),
            conns: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            dropped: Mutex::new(Vec::new()),
        });
        let sh = shared.clone();
        let acceptor = thread::spawn(move || {
            for client in listener.incoming() {
                if sh.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let n = sh.conns.fetch_add(1, Ordering::SeqCst);
                let sh = sh.clone();
                thread::spawn(move || {
                    let mut rng = Rng::new(sh.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    // Errors just end this connection; the client sees EOF.
                    let _ = serve(&sh, client, &mut rng);
                });
            }
        });
        Proxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    /// Connections accepted from now on go to `127.0.0.1:upstream` (a
    /// failover); open ones stay where they are.
    pub fn set_upstream(&self, upstream: u16) {
        self.shared.upstream.store(upstream, Ordering::SeqCst);
    }
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
    /// Every reply dropped so far, in order.
    pub fn dropped(&self) -> Vec<Dropped> {
        self.shared.dropped.lock().unwrap().clone()
    }
    /// The dropped replies `keep` selects, in order (filtered under the
    /// lock, so cheap even when many replies were dropped).
    pub fn dropped_where(&self, keep: impl Fn(&Dropped) -> bool) -> Vec<Dropped> {
        let all = self.shared.dropped.lock().unwrap();
        all.iter().filter(|d| keep(d)).cloned().collect()
    }
    pub fn drop_count(&self) -> usize {
        self.shared.dropped.lock().unwrap().len()
    }
    /// Replies delivered to clients.
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }
    /// Client connections accepted.
    pub fn connections(&self) -> u64 {
        self.shared.conns.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor; it sees the flag and exits. Connection threads
        // end when their client or server closes (or after IO_TIMEOUT).
        if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            if let Some(h) = self.acceptor.take() {
                let _ = h.join();
            }
        }
    }
}

fn serve(sh: &Shared, client: TcpStream, rng: &mut Rng) -> io::Result<()> {
    let upstream = TcpStream::connect(("127.0.0.1", sh.upstream.load(Ordering::SeqCst)))?;
    for s in [&client, &upstream] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
    }
    let mut from_client = BufReader::new(client.try_clone()?);
    let mut from_server = BufReader::new(upstream.try_clone()?);
    let (mut to_client, mut to_server) = (&client, &upstream);
    let (mut cmd_raw, mut reply_raw) = (Vec::new(), Vec::new());
    loop {
        cmd_raw.clear();
        let cmd = read_frame(&mut from_client, &mut cmd_raw)?;
        to_server.write_all(&cmd_raw)?;
        reply_raw.clear();
        let reply = read_frame(&mut from_server, &mut reply_raw)?;
        let args: Vec<Vec<u8>> = match cmd {
            Frame::Array(Some(items)) => items
                .into_iter()
                .map(|f| match f {
                    Frame::Bulk(Some(b)) => b,
                    _ => Vec::new(),
                })
                .collect(),
            _ => Vec::new(),
        };
        if (sh.filter)(&args) && rng.below(1000) < sh.per_mille {
            // Record first: whoever sees the connection die can look it up.
            sh.dropped.lock().unwrap().push(Dropped { args, reply });
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
            return Ok(());
        }
        to_client.write_all(&reply_raw)?;
        sh.forwarded.fetch_add(1, Ordering::SeqCst);
    }
}
