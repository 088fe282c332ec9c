//! The reference queue's handoff (scale_kinds_queue.rs): the server's own
//! `BLPOP` waiters served by `LPUSH`.

use std::time::{Duration, Instant};

use super::{Queue, LIST};

impl Queue {
    /// The reference's handoff: k `LPUSH`es pipelined, each of which hands
    /// its element to the longest-waiting `BLPOP` as part of the command
    /// (inside a script the list's waiters would be served only once the
    /// script ends); returns their time. The k served are the oldest, but
    /// within an enqueue round the server's order is its own: they are
    /// told apart by which connections got a reply.
    pub(super) fn push(&mut self, k: usize) -> Result<Duration, String> {
        let mut pipe = redis::pipe();
        for _ in 0..k {
            pipe.cmd("LPUSH").arg(LIST).arg("x");
        }
        let t0 = Instant::now();
        let lengths: Vec<i64> = pipe
            .query(&mut self.control)
            .map_err(|e| format!("LPUSH: {e}"))?;
        let took = t0.elapsed();
        if lengths.iter().any(|&n| n != 1) {
            return Err(format!(
                "LPUSH answered {lengths:?}: an element was not taken"
            ));
        }
        // The oldest waiters up to the end of the round of the k-th.
        let mut among = Vec::new();
        let mut last = None;
        for &i in self.by_serial.values() {
            if among.len() >= k && last != Some(self.round[i]) {
                break;
            }
            last = Some(self.round[i]);
            among.push(i);
        }
        let pool = self.pool.as_mut().ok_or("no connections")?;
        let served = pool.readable(&among, k, Duration::from_secs(10))?;
        if served.len() != k {
            return Err(format!("{} of {k} BLPOP waiters served", served.len()));
        }
        for &i in &served {
            let reply = pool.reply_lines(i, 5)?;
            if reply != format!("*2\r\n$5\r\n{LIST}\r\n$1\r\nx") {
                return Err(format!("served waiter got {reply:?}"));
            }
        }
        for i in served {
            self.unqueue(i);
        }
        Ok(took)
    }
}
