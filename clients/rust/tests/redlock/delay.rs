//! A loopback TCP proxy that delivers every byte the server sends `delay`
//! after the server sent it (commands go through at once): a slow link, or
//! a server slow to answer, whose commands still take effect on time.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub struct DelayProxy {
    port: u16,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Listens on a fresh loopback port, forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16, delay: Duration) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let acceptor = thread::spawn(move || {
            for client in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                // Errors end this connection; the peers see it closed.
                thread::spawn(move || serve(client, upstream, delay));
            }
        });
        DelayProxy {
            port,
            stop,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor, which sees the flag. Connection threads end
        // when their client or server closes.
        if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            if let Some(h) = self.acceptor.take() {
                let _ = h.join();
            }
        }
    }
}

fn serve(client: TcpStream, upstream: u16, delay: Duration) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(mut from_client), Ok(mut to_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    // Commands: at once.
    thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_server);
        let _ = to_server.shutdown(Shutdown::Write);
    });
    // Replies: each chunk `delay` after it was read from the server.
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut from_server = server;
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from_server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    let mut to_client = client;
    for (due, bytes) in rx {
        thread::sleep(due.saturating_duration_since(Instant::now()));
        if to_client.write_all(&bytes).is_err() {
            break;
        }
    }
    let _ = to_client.shutdown(Shutdown::Both);
}
