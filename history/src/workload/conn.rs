//! A minimal RESP2 connection of a workload client: pipelined commands out,
//! one frame at a time in, every read bounded by a caller-given timeout, so
//! the client tells a closed connection from a reply that never came.
use crate::proxy::{read_frame, Frame};
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// Why no reply was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The read timeout fired.
    Timeout,
    /// EOF, reset, or any other I/O error: the connection is gone.
    Closed,
}

pub struct Conn {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    /// The server's `CLIENT ID` of this connection.
    pub id: i64,
}

const SETUP_TIMEOUT: Duration = Duration::from_secs(5);

pub fn encode(args: &[String]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn lost(e: &io::Error) -> Lost {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Lost::Timeout,
        _ => Lost::Closed,
    }
}

fn other(what: String) -> io::Error {
    io::Error::other(what)
}

impl Conn {
    /// Connects, names the connection (`CLIENT SETNAME name`) and learns
    /// its `CLIENT ID`.
    pub fn open(port: u16, name: &str) -> io::Result<Conn> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        let reader = BufReader::new(stream.try_clone()?);
        let mut c = Conn {
            stream,
            reader,
            id: 0,
        };
        let setname = ["CLIENT", "SETNAME", name].map(String::from);
        let id = ["CLIENT", "ID"].map(String::from);
        c.send(&[setname.to_vec(), id.to_vec()])
            .map_err(|l| other(format!("setup: {l:?}")))?;
        for _ in 0..2 {
            match c.read(SETUP_TIMEOUT) {
                Ok(Frame::Int(n)) => c.id = n,
                Ok(Frame::Error(e)) => return Err(other(String::from_utf8_lossy(&e).into_owned())),
                Ok(_) => {}
                Err(l) => return Err(other(format!("setup: {l:?}"))),
            }
        }
        Ok(c)
    }

    /// Writes the commands in one go (a pipeline).
    pub fn send(&mut self, cmds: &[Vec<String>]) -> Result<(), Lost> {
        let mut buf = Vec::new();
        for c in cmds {
            buf.extend(encode(c));
        }
        self.stream.write_all(&buf).map_err(|e| lost(&e))
    }

    /// Reads one reply, waiting at most `timeout`.
    pub fn read(&mut self, timeout: Duration) -> Result<Frame, Lost> {
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| lost(&e))?;
        let mut raw = Vec::new();
        read_frame(&mut self.reader, &mut raw).map_err(|e| lost(&e))
    }

    /// Closes the connection at once (a waiter that leaves).
    pub fn close(self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}
