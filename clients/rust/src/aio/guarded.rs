//! A guarded write or check on the async locker's server: the core's
//! [`Call`] driven on tokio, on the shared connection.

use super::conn::Server;
use crate::error::{reached, Error, Failure, Result};
use crate::guarded::{is_own_error_reply, Attempt, Call, Next};
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Runs `cmd` until it is answered or `call` gives up.
pub(super) async fn run(server: &Server, mut call: Call, cmd: &redis::Cmd) -> Result<Value> {
    loop {
        let attempt = attempt(server, cmd).await;
        match call.attempted(attempt, Instant::now()) {
            Next::Done(r) => return r,
            Next::Pause(p) => tokio::time::sleep(p).await,
        }
    }
}

/// One attempt, after a `PING` on the connection answered: a failure then
/// tells whether the command may have reached the server.
async fn attempt(server: &Server, cmd: &redis::Cmd) -> Attempt {
    let sent = AtomicBool::new(false);
    let run = async {
        let mut conn = server.conn(false).await?;
        redis::cmd("PING").query_async::<Value>(&mut conn).await?;
        sent.store(true, Ordering::Relaxed);
        match cmd.query_async::<Value>(&mut conn).await {
            Ok(v) => Ok(Ok(v)),
            Err(e) if is_own_error_reply(&e) => Ok(Err(e)),
            Err(e) => {
                // An error reply (`LOADING`, `READONLY`, ...): not run.
                if !reached(&e) {
                    sent.store(false, Ordering::Relaxed);
                }
                Err(Failure::from(e))
            }
        }
    };
    let limit = server.io_timeout.saturating_mul(2);
    let failure = match tokio::time::timeout(limit, run).await {
        Ok(Ok(Ok(v))) => return Attempt::Replied(v),
        Ok(Ok(Err(e))) => return Attempt::Refused(e),
        Ok(Err(f)) => f,
        Err(_) => Failure::Retry(Error::Unavailable("timed out".into())),
    };
    Attempt::Failed {
        failure: server.failed(failure, false).await,
        may_have_run: sent.load(Ordering::Relaxed),
    }
}
