//! What a decision reads of the server besides the keys it opened: which
//! path decides a request (`route`), and the inputs of a plain decision
//! (`Inputs`, the server's side of `dlock_core::plan::plain::Reads`).

use std::cell::OnceCell;

use crate::server::edge::api::{now_us, Ctx, Flags};
use crate::server::edge::cluster;
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::quarantine;
use crate::server::waiting::blocking::{self, Resource};
use dlock_core::plan::plain::{self, Reads, Route, Shape};
use dlock_core::{request::args, Error};

/// Which path decides a request on the value `stored` of a key that `res`
/// names when anyone waits on it (`plain_request`: the request asks for a
/// plain exclusive hold).
pub fn route(stored: Option<Stored<'_>>, res: Option<&Resource>, plain_request: bool) -> Route {
    let shape = match stored {
        None => Shape::Free,
        Some(Stored::Plain(_)) => Shape::Plain,
        Some(Stored::Multi(_)) => Shape::Multi,
    };
    plain::route(
        shape,
        res.is_none_or(blocking::queue_is_plain),
        plain_request,
    )
}

/// As `route`, reading the key; a key of another type is the plain path's
/// to report.
pub fn route_key(key: &LockKey, res: Option<&Resource>, plain_request: bool) -> Route {
    key.stored()
        .map_or(Route::Plain, |stored| route(stored, res, plain_request))
}

/// What a plain decision reads of the server, each read at most once and
/// only when asked.
pub struct Inputs<'a> {
    ctx: Ctx,
    res: Option<&'a Resource>,
    /// The command's acquire (none for a release, a revocation or a timer).
    acquire: Option<&'a args::Acquire<'a>>,
    now_us: OnceCell<u64>,
    flags: OnceCell<Option<Flags>>,
}

impl<'a> Inputs<'a> {
    /// For a command's request on `res` (if anyone waits on it).
    pub fn of(ctx: Ctx, res: Option<&'a Resource>, req: &'a args::Acquire<'a>) -> Self {
        Inputs {
            ctx,
            res,
            acquire: Some(req),
            now_us: OnceCell::new(),
            flags: OnceCell::new(),
        }
    }

    /// For a release, a revocation or a timer on `res` (if anyone waits on
    /// it): nothing that waits.
    pub fn serving(ctx: Ctx, res: Option<&'a Resource>) -> Self {
        Inputs {
            ctx,
            res,
            acquire: None,
            now_us: OnceCell::new(),
            flags: OnceCell::new(),
        }
    }
}

impl Reads for Inputs<'_> {
    fn blocks(&self) -> bool {
        self.acquire.is_some_and(|req| req.wait_ms.is_some())
            && self
                .flags
                .get_or_init(|| self.ctx.flags().ok())
                .is_some_and(can_block)
    }

    fn new_token(&self) -> Result<(), Error> {
        self.acquire.map_or(Ok(()), |req| req.check_new_token())
    }

    fn quarantined_ms(&self) -> u64 {
        quarantine::ms_left()
    }

    fn held_until(&self) -> Option<u64> {
        self.res.and_then(blocking::held_until)
    }

    fn owns_slot(&self) -> Result<bool, Error> {
        match self.res {
            Some(res) => cluster::may_grant(self.ctx, &res.key),
            None => Ok(true),
        }
    }

    fn now_us(&self) -> u64 {
        *self.now_us.get_or_init(now_us)
    }
}

/// Inside MULTI, Lua, or a replayed command, WAIT degrades to a plain try.
pub fn can_block(flags: Flags) -> bool {
    !(flags.in_transaction_or_script() || flags.is_replicated() || flags.is_loading())
}
