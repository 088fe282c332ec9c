//! `dlock metrics --listen ADDR`: a small HTTP/1.1 server on std::net for
//! Prometheus to scrape. Each connection on a thread of its own (at most
//! [`MAX_CONNECTIONS`] at once; more are closed at once), each bounded:
//! the request's head in at most [`MAX_HEAD`] bytes and [`HEAD_DEADLINE`],
//! every read and write within [`IO_TIMEOUT`], so silent clients cannot
//! hold a scrape back. It answers and closes (`Connection: close`). SIGINT
//! and SIGTERM stop it: it stops accepting, and the connections being
//! served end within their bounds.

use libc::c_int;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request head larger than this is refused (431): a scraper's is a few
/// hundred bytes.
pub const MAX_HEAD: usize = 8192;
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; a scraper needs one.
pub const MAX_CONNECTIONS: usize = 16;
const HEAD_DEADLINE: Duration = Duration::from_secs(10);

/// What a request asks for.
#[derive(Debug, PartialEq)]
pub enum Route {
    Metrics,
    NotFound,
    /// Another method than GET.
    NotAllowed,
}

/// The route of a request head (its request line); Err: not HTTP.
pub fn route(head: &[u8]) -> Result<Route, ()> {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line)
        .map_err(|_| ())?
        .trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(());
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(());
    }
    if method != "GET" {
        return Ok(Route::NotAllowed);
    }
    // The query string is ignored (Prometheus sends none unless asked).
    let path = target.split('?').next().unwrap_or_default();
    Ok(if path == "/metrics" {
        Route::Metrics
    } else {
        Route::NotFound
    })
}

/// A whole response, closing the connection.
pub fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    };
    let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The end of a request head (the blank line), if `buf` has it.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").or_else(|| {
        // A bare LF is tolerated, as most servers do.
        buf.windows(2).position(|w| w == b"\n\n")
    })
}

enum Head {
    Got(Vec<u8>),
    TooLarge,
    /// Closed, timed out, or failed: nothing to answer.
    Gone,
}

fn read_head(s: &mut TcpStream) -> Head {
    let end = Instant::now() + HEAD_DEADLINE;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(at) = head_end(&buf) {
            buf.truncate(at);
            return Head::Got(buf);
        }
        if buf.len() > MAX_HEAD {
            return Head::TooLarge;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left.min(IO_TIMEOUT))).is_err() {
            return Head::Gone;
        }
        match s.read(&mut chunk) {
            Ok(0) => return Head::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Head::Gone,
        }
    }
}

/// One connection: read its request, answer, close.
fn handle(mut s: TcpStream, metrics: &(dyn Fn() -> String + Sync)) {
    let text = "text/plain; charset=utf-8";
    let head = read_head(&mut s);
    let read_all = matches!(&head, Head::Got(h) if route(h) == Ok(Route::Metrics));
    let reply = match head {
        Head::Gone => return,
        Head::TooLarge => response(431, text, b"request head too large\n"),
        Head::Got(head) => match route(&head) {
            Ok(Route::Metrics) => response(200, crate::prom::CONTENT_TYPE, metrics().as_bytes()),
            Ok(Route::NotFound) => response(404, text, b"not found: the metrics are at /metrics\n"),
            Ok(Route::NotAllowed) => response(405, text, b"only GET\n"),
            Err(()) => response(400, text, b"bad request\n"),
        },
    };
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    let _ = s.write_all(&reply);
    let _ = s.flush();
    if !read_all {
        linger(s);
    }
}

/// After an error answer to a request that may have more to send (a head
/// past the bound, a body): what it sends is read and dropped until it
/// closes (a bounded amount, for a bounded time), since closing with
/// unread data resets the connection, and the client may then lose the
/// answer before reading it.
fn linger(mut s: TcpStream) {
    let _ = s.shutdown(Shutdown::Write);
    let end = Instant::now() + Duration::from_secs(1);
    let mut left: usize = 64 * 1024;
    let mut chunk = [0u8; 4096];
    while left > 0 {
        let wait = end.saturating_duration_since(Instant::now());
        if wait.is_zero() || s.set_read_timeout(Some(wait)).is_err() {
            return;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// SIGINT and SIGTERM, taken by a thread of their own: they set `stopped`
/// and wake the accept loop through a socket pair.
pub struct Stop {
    stopped: Arc<AtomicBool>,
    wake: UnixStream,
}

/// Blocks SIGINT and SIGTERM and starts the thread that takes them. Call
/// it before any other thread starts: threads inherit the mask.
pub fn on_signals() -> io::Result<Stop> {
    let signals = [libc::SIGINT, libc::SIGTERM];
    let set = crate::signals::set_of(&signals);
    // SAFETY: a plain libc call on an initialised set.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let (wake, mut waker) = UnixStream::pair()?;
    let stopped = Arc::new(AtomicBool::new(false));
    let flag = stopped.clone();
    std::thread::Builder::new()
        .name("dlock-signals".into())
        .spawn(move || loop {
            let mut sig: c_int = 0;
            // SAFETY: `set` is an initialised set of blocked signals.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                flag.store(true, Ordering::SeqCst);
                let _ = waker.write_all(b"x");
            }
        })?;
    Ok(Stop { stopped, wake })
}

impl Stop {
    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

/// Serves until a signal stops it: each `GET /metrics` answered with
/// `metrics()`.
pub fn serve(
    listener: TcpListener,
    stop: &Stop,
    metrics: &(dyn Fn() -> String + Sync),
) -> io::Result<()> {
    // Accepting never blocks: a connection gone between the poll and the
    // accept would otherwise hold the loop.
    listener.set_nonblocking(true)?;
    let busy = AtomicUsize::new(0);
    std::thread::scope(|scope| accept_loop(&listener, stop, metrics, &busy, scope))
}

fn accept_loop<'s>(
    listener: &TcpListener,
    stop: &Stop,
    metrics: &'s (dyn Fn() -> String + Sync),
    busy: &'s AtomicUsize,
    scope: &'s std::thread::Scope<'s, '_>,
) -> io::Result<()> {
    while !stop.stopped() {
        let mut fds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two initialised pollfds, the length given.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if stop.stopped() {
            break;
        }
        match listener.accept() {
            Ok((s, _)) => {
                if busy.load(Ordering::SeqCst) >= MAX_CONNECTIONS
                    || s.set_nonblocking(false).is_err()
                {
                    continue;
                }
                busy.fetch_add(1, Ordering::SeqCst);
                let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                    handle(s, metrics);
                    busy.fetch_sub(1, Ordering::SeqCst);
                });
                if spawned.is_err() {
                    busy.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The client's failure (reset before accept), or too many
            // files open for now: the next request may do better.
            Err(e) => eprintln!("dlock: metrics: accept: {e}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed() {
        let r = |s: &str| route(s.as_bytes());
        assert_eq!(r("GET /metrics HTTP/1.1\r\nHost: x"), Ok(Route::Metrics));
        assert_eq!(r("GET /metrics?name[]=x HTTP/1.0"), Ok(Route::Metrics));
        assert_eq!(r("GET /metrics HTTP/1.1\n"), Ok(Route::Metrics));
        assert_eq!(r("GET / HTTP/1.1"), Ok(Route::NotFound));
        assert_eq!(r("GET /metricsx HTTP/1.1"), Ok(Route::NotFound));
        assert_eq!(r("GET /metrics/ HTTP/1.1"), Ok(Route::NotFound));
        assert_eq!(r("POST /metrics HTTP/1.1"), Ok(Route::NotAllowed));
        assert_eq!(r("HEAD /metrics HTTP/1.1"), Ok(Route::NotAllowed));
        for bad in [
            "",
            "GET",
            "GET /metrics",
            "GET /metrics HTTP/2",
            "GET metrics HTTP/1.1",
            "GET  /metrics HTTP/1.1",
            "GET /metrics HTTP/1.1 x",
            "\u{0}\u{1}",
        ] {
            assert_eq!(r(bad), Err(()), "{bad:?}");
        }
        assert_eq!(route(b"GET /\xff HTTP/1.1"), Err(()));
    }

    #[test]
    fn responses_say_their_length_and_close() {
        let r = String::from_utf8(response(200, "text/plain", b"abc")).unwrap();
        assert_eq!(
            r,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\
             Connection: close\r\n\r\nabc"
        );
        let r = String::from_utf8(response(405, "t", b"")).unwrap();
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
        assert!(r.contains("\r\nAllow: GET\r\n"), "{r}");
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(20));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }
}
