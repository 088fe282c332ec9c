//! A small closed-loop load generator, in the manner of `redis-benchmark`:
//! one thread, `conns` non-blocking connections multiplexed with poll(2),
//! each sending `pipeline` commands and waiting for all their replies before
//! sending the next batch. Unlike redis-benchmark, the commands come from a
//! closure, so a workload can tie the token to the key (owner hits), walk a
//! permutation (every release hits once), or alternate acquire and release
//! on one connection (a lock cycle).
//!
//! One thread on purpose: on a 2-core machine the client must not steal the
//! server's core. Replies are only framed and classified (positive, negative,
//! error), never decoded into values.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How a run is shaped.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub conns: usize,
    pub pipeline: usize,
    /// Commands in the whole run.
    pub total: u64,
    /// Record each command's latency (time from its batch being written to
    /// its reply being read; exact at pipeline 1).
    pub latency: bool,
}

#[derive(Default)]
pub struct Outcome {
    pub ops: u64,
    pub elapsed: Duration,
    /// `+OK`, a non-zero integer, a non-nil bulk or array.
    pub positive: u64,
    /// `:0`, nil.
    pub negative: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub latencies_ns: Vec<u64>,
}

impl Outcome {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    /// Adds another run of the same workload (several rounds of one case).
    pub fn absorb(&mut self, o: Outcome) {
        self.ops += o.ops;
        self.elapsed += o.elapsed;
        self.positive += o.positive;
        self.negative += o.negative;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.latencies_ns.extend(o.latencies_ns);
    }
    pub fn hit_rate(&self) -> f64 {
        self.positive as f64 / (self.positive + self.negative).max(1) as f64
    }
}

/// Appends one command in RESP.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_num(out, args.len() as u64);
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        push_num(out, a.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_num(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Positive,
    Negative,
    Error,
}

/// Length of the first complete reply in `buf`, if there is one.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    frame(buf).map(|(len, _)| len)
}

/// Length and kind of the first complete reply in `buf`, if there is one.
fn frame(buf: &[u8]) -> Option<(usize, Kind)> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = &buf[1..line_end];
    let after = line_end + 2;
    let num = || -> i64 {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    match buf[0] {
        b'+' => Some((after, Kind::Positive)),
        b'-' => Some((after, Kind::Error)),
        b':' => Some((
            after,
            if num() == 0 {
                Kind::Negative
            } else {
                Kind::Positive
            },
        )),
        b'$' => {
            let n = num();
            if n < 0 {
                return Some((after, Kind::Negative));
            }
            let end = after + n as usize + 2;
            (buf.len() >= end).then_some((end, Kind::Positive))
        }
        b'*' => {
            let n = num();
            if n < 0 {
                return Some((after, Kind::Negative));
            }
            let mut at = after;
            for _ in 0..n {
                let (len, _) = frame(&buf[at..])?;
                at += len;
            }
            Some((at, Kind::Positive))
        }
        b'_' => Some((after, Kind::Negative)),
        other => panic!("unexpected reply byte {other:#x}"),
    }
}

struct Conn {
    stream: TcpStream,
    wbuf: Vec<u8>,
    written: usize,
    rbuf: Vec<u8>,
    outstanding: usize,
    sent_at: Instant,
}

/// Runs `shape.total` commands from `gen(conn_index, out)` (one command per
/// call) against `port`; returns when every reply has arrived.
pub fn run(port: u16, shape: Shape, mut gen: impl FnMut(usize, &mut Vec<u8>)) -> Outcome {
    let mut conns: Vec<Conn> = (0..shape.conns)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            stream.set_nodelay(true).unwrap();
            stream.set_nonblocking(true).unwrap();
            Conn {
                stream,
                wbuf: Vec::with_capacity(4096),
                written: 0,
                rbuf: Vec::with_capacity(65536),
                outstanding: 0,
                sent_at: Instant::now(),
            }
        })
        .collect();
    let mut out = Outcome {
        latencies_ns: Vec::with_capacity(if shape.latency {
            shape.total as usize
        } else {
            0
        }),
        ..Outcome::default()
    };
    let mut issued = 0u64;
    let mut done = 0u64;
    let mut pollfds: Vec<libc::pollfd> = conns
        .iter()
        .map(|c| libc::pollfd {
            fd: c.stream.as_raw_fd(),
            events: 0,
            revents: 0,
        })
        .collect();
    let mut chunk = vec![0u8; 65536];
    let start = Instant::now();
    while done < shape.total {
        // Idle connections send their next batch.
        for (i, c) in conns.iter_mut().enumerate() {
            if c.outstanding == 0 && issued < shape.total {
                let n = (shape.pipeline as u64).min(shape.total - issued) as usize;
                c.wbuf.clear();
                c.written = 0;
                for _ in 0..n {
                    gen(i, &mut c.wbuf);
                }
                issued += n as u64;
                c.outstanding = n;
                c.sent_at = Instant::now();
                flush(c);
            }
        }
        for (p, c) in pollfds.iter_mut().zip(&conns) {
            p.events = libc::POLLIN;
            if c.written < c.wbuf.len() {
                p.events |= libc::POLLOUT;
            }
            p.revents = 0;
        }
        // SAFETY: pollfds is a valid array of pollfd for its length.
        let rc = unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as _, 10_000) };
        assert!(rc > 0, "poll: no reply within 10 s (rc {rc})");
        for (p, c) in pollfds.iter().zip(conns.iter_mut()) {
            if p.revents & libc::POLLOUT != 0 {
                flush(c);
            }
            if p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) == 0 {
                continue;
            }
            loop {
                match c.stream.read(&mut chunk) {
                    Ok(0) => panic!("server closed the connection"),
                    Ok(n) => c.rbuf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
            let mut at = 0;
            let now = Instant::now();
            while let Some((len, kind)) = frame(&c.rbuf[at..]) {
                match kind {
                    Kind::Positive => out.positive += 1,
                    Kind::Negative => out.negative += 1,
                    Kind::Error => {
                        out.errors += 1;
                        if out.first_error.is_none() {
                            out.first_error =
                                Some(String::from_utf8_lossy(&c.rbuf[at..at + len]).into());
                        }
                    }
                }
                if shape.latency {
                    out.latencies_ns
                        .push(now.duration_since(c.sent_at).as_nanos() as u64);
                }
                at += len;
                c.outstanding -= 1;
                done += 1;
            }
            c.rbuf.drain(..at);
        }
    }
    out.elapsed = start.elapsed();
    out.ops = done;
    out
}

fn flush(c: &mut Conn) {
    while c.written < c.wbuf.len() {
        match c.stream.write(&c.wbuf[c.written..]) {
            Ok(n) => c.written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) => panic!("write: {e}"),
        }
    }
}

/// xorshift64*: fast, reproducible, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}
