//! A lock's identity on this server, shared by the parking lot, the
//! deferred jobs and every file that hands locks over.

use redis_module::raw;

use crate::server::edge::api::{self, rm, Ctx};
use dlock_core::Error;

/// A lock's identity on this server: database and key name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    pub db: i32,
    pub key: Box<[u8]>,
}

impl Resource {
    /// The resource behind `name` in the caller's database.
    pub fn of(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<Resource, Error> {
        let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) };
        Ok(Resource {
            db,
            key: api::bytes(name)?.into(),
        })
    }
}
