//! What a replica receives: a connection that asks the master for a full
//! sync (`SYNC`, the protocol `redis-cli --replica` speaks), skips the
//! snapshot and reads the commands the master propagates after it.
use super::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct ReplStream {
    r: BufReader<TcpStream>,
    markers: u64,
}

impl ReplStream {
    /// Attaches to `s` as a replica; returns once the snapshot is read.
    pub fn attach(s: &Server) -> ReplStream {
        let tcp = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut w = tcp.try_clone().unwrap();
        w.write_all(b"*1\r\n$4\r\nSYNC\r\n").unwrap();
        let mut r = BufReader::new(tcp);
        let head = loop {
            let line = read_line(&mut r);
            // Newlines keep the link alive while the master saves.
            if !line.is_empty() {
                break line;
            }
        };
        let size = head.strip_prefix('$').expect("a snapshot");
        match size.strip_prefix("EOF:") {
            // A snapshot streamed from a socket ends with this mark.
            Some(mark) => {
                let mark = mark.as_bytes();
                let mut tail: Vec<u8> = Vec::new();
                let mut b = [0u8; 1];
                while !tail.ends_with(mark) {
                    r.read_exact(&mut b).unwrap();
                    tail.push(b[0]);
                }
            }
            None => {
                let mut rdb = vec![0u8; size.parse().unwrap()];
                r.read_exact(&mut rdb).unwrap();
            }
        }
        ReplStream { r, markers: 0 }
    }

    /// The next command the master propagated.
    fn next(&mut self) -> Vec<String> {
        let head = loop {
            let line = read_line(&mut self.r);
            if !line.is_empty() {
                break line;
            }
        };
        let n: usize = head.strip_prefix('*').expect("a command").parse().unwrap();
        (0..n)
            .map(|_| {
                let len: usize = read_line(&mut self.r)[1..].parse().unwrap();
                let mut arg = vec![0u8; len + 2];
                self.r.read_exact(&mut arg).unwrap();
                arg.truncate(len);
                String::from_utf8_lossy(&arg).into_owned()
            })
            .collect()
    }

    /// Every command propagated since the last call: writes a marker key
    /// through `c` and reads up to it (the marker left out).
    pub fn commands(&mut self, c: &mut redis::Connection) -> Vec<Vec<String>> {
        self.markers += 1;
        let marker = format!("repl-stream-marker:{}", self.markers);
        let _: () = redis::cmd("SET").arg(&marker).arg(1).query(c).unwrap();
        let mut out = Vec::new();
        loop {
            let cmd = self.next();
            if cmd[0].eq_ignore_ascii_case("SET") && cmd.get(1) == Some(&marker) {
                return out;
            }
            out.push(cmd);
        }
    }
}

fn read_line(r: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "the master closed the replication link");
    line.trim_end_matches(['\r', '\n']).to_owned()
}
