//! The wait-for graph between sessions, read from the server for
//! `dlock_core::sessions::deadlock`: who holds a resource (its bound holds,
//! read from the key) and what a session waits for (its queued requests,
//! from the parking lot). Read only: nothing is settled or written.

use std::ffi::c_char;

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx};
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::sessions;
use crate::server::waiting::blocking::{self, Resource};
use dlock_core::resource::holds::Holds;
use dlock_core::sessions::deadlock::{find_cycle, WaitsFor};
use dlock_core::Error;

/// Resources a check looks at, at most: a few hundred key reads, well
/// under a millisecond.
const BUDGET: usize = 256;

struct Server<'g> {
    ctx: Ctx,
    /// The step's own resources: their holds are out of their keys while
    /// it decides (`Work`), so they are read from the step.
    opened: &'g [(Resource, &'g Holds)],
    /// The caller's database, selected again when the walk ends.
    home: i32,
    selected: i32,
}

impl Server<'_> {
    fn select(&mut self, db: i32) {
        if self.selected != db {
            if let Some(select) = unsafe { raw::RedisModule_SelectDb } {
                unsafe { select(self.ctx.0, db) };
                self.selected = db;
            }
        }
    }
}

impl WaitsFor<Resource> for Server<'_> {
    fn holders(&mut self, res: &Resource) -> Vec<Box<[u8]>> {
        if let Some((_, holds)) = self.opened.iter().find(|(r, _)| r == res) {
            return holds.bound().map(|(_, s)| Box::from(s)).collect();
        }
        self.select(res.db);
        let (Some(create), Some(free)) = (unsafe { raw::RedisModule_CreateString }, unsafe {
            raw::RedisModule_FreeString
        }) else {
            return Vec::new();
        };
        let name = unsafe { create(self.ctx.0, res.key.as_ptr().cast::<c_char>(), res.key.len()) };
        let holders = match LockKey::open_read(self.ctx, name) {
            Ok(key) => match key.stored() {
                Ok(Some(Stored::Multi(holds))) => {
                    holds.bound().map(|(_, s)| Box::from(s)).collect()
                }
                _ => Vec::new(),
            },
            Err(_) => Vec::new(),
        };
        unsafe { free(self.ctx.0, name) };
        holders
    }

    fn waits(&mut self, session: &[u8]) -> Vec<Resource> {
        sessions::wait_ids(session)
            .into_iter()
            .filter_map(blocking::resources_of)
            .flatten()
            .collect()
    }
}

/// `Err(Deadlock)` if session `me` waiting for `targets` would close a
/// cycle of sessions waiting for each other; `opened`, the resources the
/// step has opened, with their holds.
pub fn refuse_cycle(
    ctx: Ctx,
    me: &[u8],
    targets: &[Resource],
    opened: &[(Resource, &Holds)],
) -> Result<(), Error> {
    let home = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) };
    let mut server = Server {
        ctx,
        opened,
        home,
        selected: home,
    };
    let cycle = find_cycle(me, targets, &mut server, BUDGET);
    let home = server.home;
    server.select(home);
    match cycle {
        Some(resources) => Err(Error::Deadlock(
            resources.into_iter().map(|r| r.key).collect(),
        )),
        None => Ok(()),
    }
}
