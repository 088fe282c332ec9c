//! A guarded write or check on the server a resource lives on, with
//! blocking I/O: the core's [`Call`] driven over the locker's
//! [`Topology`] (one server, or the master of the resource's slot, `MOVED`
//! and `ASK` followed).

use super::{is_own_error_reply, Attempt, Call, Next};
use crate::error::{reached, Result};
use crate::route::Topology;
use redis::Value;
use std::time::{Duration, Instant};

/// Runs `cmd` (routed by `resource`) until it is answered or `call` gives
/// up. Each attempt runs on a connection that answered a `PING` first, so
/// that a failure tells whether the command may have reached the server.
pub(crate) fn run(
    topology: &Topology,
    resource: &str,
    io_timeout: Duration,
    mut call: Call,
    cmd: &redis::Cmd,
) -> Result<Value> {
    loop {
        let mut sent = false;
        let r = topology.run_live(resource, io_timeout, |c, asking| {
            sent = true;
            let mut p = redis::pipe();
            if asking {
                p.cmd("ASKING").ignore();
            }
            p.add_command(cmd.clone());
            match p.query::<Vec<Value>>(c) {
                Ok(mut v) => Ok(Ok(v.pop().unwrap_or(Value::Nil))),
                // The command's own answer: handed back as it is (the
                // connection stays usable).
                Err(e) if is_own_error_reply(&e) => Ok(Err(e)),
                Err(e) => {
                    // An error reply (`MOVED`, `LOADING`, ...): not run.
                    if !reached(&e) {
                        sent = false;
                    }
                    Err(e)
                }
            }
        });
        let attempt = match r {
            Ok(Ok(v)) => Attempt::Replied(v),
            Ok(Err(e)) => Attempt::Refused(e),
            Err(failure) => Attempt::Failed {
                failure,
                may_have_run: sent,
            },
        };
        match call.attempted(attempt, Instant::now()) {
            Next::Done(r) => return r,
            Next::Pause(p) => std::thread::sleep(p),
        }
    }
}
