//! A client blocked in a command on its own thread and connection (an
//! `ACQUIRE ... WAIT`, a `MACQUIRE ... WAIT`), whose reply the test collects.
use super::Server;
use redis::{Connection, RedisResult};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::time::Duration;

pub struct Waiter {
    /// Its connection's `CLIENT ID` (for `CLIENT KILL`/`UNBLOCK`).
    pub id: i64,
    rx: Receiver<(RedisResult<Option<i64>>, Connection)>,
}

impl Waiter {
    /// Sends `cmd` on a new connection to `s` from a thread of its own.
    pub fn send(s: &Server, cmd: redis::Cmd) -> Waiter {
        let mut w = s.conn();
        w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut w).unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let reply = cmd.query(&mut w);
            let _ = tx.send((reply, w));
        });
        Waiter { id, rx }
    }

    /// The reply, and the waiter's connection.
    pub fn reply(&self) -> (RedisResult<Option<i64>>, Connection) {
        self.rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the waiter got no reply within 30 s")
    }

    /// The fence granted, and the waiter's connection.
    pub fn granted(&self) -> (i64, Connection) {
        match self.reply() {
            (Ok(Some(f)), c) => (f, c),
            (other, _) => panic!("expected a grant, got {other:?}"),
        }
    }

    /// No reply yet (a reply that did arrive is consumed).
    pub fn pending(&self) -> bool {
        matches!(self.rx.try_recv(), Err(TryRecvError::Empty))
    }
}
