//! A lock key opened through the raw key API, closed on drop.
//!
//! The crate's key wrappers drop the TTL on `set_value` and have no absolute
//! expiry; locks need both, so this small wrapper talks to the API directly.

use std::ffi::{c_int, c_void};

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx};
use crate::server::keyspace::value::{self, Stored};
use crate::server::state;
use dlock_core::resource::holds::{Holds, NEVER};
use dlock_core::resource::lease::LeaseRef;
use dlock_core::Error;

pub struct LockKey {
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
}

impl LockKey {
    pub fn open_write(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<Self, Error> {
        Self::open(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    pub fn open_read(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<Self, Error> {
        Self::open(ctx, name, raw::REDISMODULE_READ)
    }

    fn open(ctx: Ctx, name: *mut raw::RedisModuleString, mode: u32) -> Result<Self, Error> {
        let key = unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, mode as c_int) };
        // In read mode a missing key comes back as NULL: that is a free lock.
        Ok(LockKey { ctx, name, key })
    }

    /// The plain lease stored here; `None` when free or holding a
    /// multi-hold value (callers that can meet one use `stored`).
    pub fn lease(&self) -> Result<Option<LeaseRef<'_>>, Error> {
        Ok(self.stored()?.and_then(|s| match s {
            Stored::Plain(l) => Some(l),
            Stored::Multi(_) => None,
        }))
    }

    /// The holds stored here as the model sees them (a plain lock as one
    /// hold ending at the key's deadline); `None` when free.
    pub fn holds(&self) -> Result<Option<Holds>, Error> {
        Ok(match self.stored()? {
            None => None,
            Some(Stored::Plain(l)) => Some(Holds::from_plain(l, self.deadline()?)),
            Some(Stored::Multi(h)) => Some(h.clone()),
        })
    }

    /// The multi-hold value stored here, to change in place; `None` for a
    /// plain lock or a free key. The caller keeps the key's TTL right
    /// (`set_holds_deadline`).
    pub fn holds_in_place(&mut self) -> Result<Option<&mut Holds>, Error> {
        if !self.is_multi()? {
            return Ok(None);
        }
        let value = unsafe { rm!(RedisModule_ModuleTypeGetValue)(self.key) };
        // SAFETY: a value of our type, alive while the key is open; `&mut
        // self` keeps every other view of it away.
        Ok(unsafe { value::holds_mut(value) })
    }

    /// Sets the key's TTL to the latest deadline of `holds` (none: no TTL).
    pub fn set_holds_deadline(&mut self, latest: Option<u64>) -> Result<(), Error> {
        match latest {
            Some(d) if d < NEVER => self.set_deadline(d),
            _ => self.persist(),
        }
    }

    /// Whether the key holds a multi-hold value.
    pub fn is_multi(&self) -> Result<bool, Error> {
        Ok(matches!(self.stored()?, Some(Stored::Multi(_))))
    }

    /// The value stored here; `WRONGTYPE` if the key holds anything else.
    pub fn stored(&self) -> Result<Option<Stored<'_>>, Error> {
        if self.key.is_null() {
            return Ok(None);
        }
        let kind = unsafe { rm!(RedisModule_KeyType)(self.key) };
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(None);
        }
        let is_lock = kind == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            && unsafe { rm!(RedisModule_ModuleTypeGetType)(self.key) } == state::lock_type();
        if !is_lock {
            return Err(Error::WrongType);
        }
        let value = unsafe { rm!(RedisModule_ModuleTypeGetValue)(self.key) };
        // SAFETY: values of our type are blocks from `value::into_raw`, alive
        // while the key is open and unchanged (`&self`).
        match unsafe { value::view(value) } {
            Some(stored) => {
                // A lock a command can read is in the keyspace for good (a
                // refused RESTORE never gets here), and what it reads may be
                // shown to a client or decide a grant: its fence raises the
                // clock now, not when `restored`'s timer gets to it.
                state::observe_fence(stored.max_fence());
                Ok(Some(stored))
            }
            None => Err(Error::Internal("lock key without a value")),
        }
    }

    /// Stores a lease in an empty key, or replaces whatever the key holds
    /// (only the internal effect does that, mirroring the master). An empty
    /// key gets no TTL; set one with `set_deadline`.
    pub fn store(&mut self, lease: LeaseRef<'_>) -> Result<(), Error> {
        self.store_block(new_block(lease)?)
    }

    fn store_block(&mut self, block: *mut c_void) -> Result<(), Error> {
        let set = rm!(RedisModule_ModuleTypeSetValue);
        if unsafe { set(self.key, state::lock_type(), block) } != crate::server::edge::api::OK {
            // Not stored: the block is still ours to free.
            unsafe { value::free(block) };
            return Err(Error::Internal("key not writable"));
        }
        crate::server::notify::stats::lock_created();
        Ok(())
    }

    /// Swaps the lease of a key that holds a lock, keeping its TTL.
    pub fn replace(&mut self, lease: LeaseRef<'_>) -> Result<(), Error> {
        self.replace_block(new_block(lease)?)
    }

    fn replace_block(&mut self, block: *mut c_void) -> Result<(), Error> {
        let swap = rm!(RedisModule_ModuleTypeReplaceValue);
        let mut old: *mut c_void = std::ptr::null_mut();
        if unsafe { swap(self.key, state::lock_type(), block, &mut old) }
            != crate::server::edge::api::OK
        {
            unsafe { value::free(block) };
            return Err(Error::Internal("lock value not replaceable"));
        }
        // The old block left the keyspace without the free callback.
        unsafe { value::free(old) };
        Ok(())
    }

    /// Stores `lease` whether or not the key already holds a lock.
    pub fn put(&mut self, lease: LeaseRef<'_>) -> Result<(), Error> {
        match self.stored() {
            Ok(Some(_)) => self.replace(lease),
            Ok(None) | Err(Error::WrongType) => self.store(lease),
            Err(e) => Err(e),
        }
    }

    /// Stores `holds` (in the plain layout when they are a plain lock) and
    /// sets the key's TTL to their latest deadline; deletes the key when
    /// none are left.
    pub fn put_holds(&mut self, holds: Holds) -> Result<(), Error> {
        let Some(deadline) = holds.deadline_ms() else {
            return self.delete();
        };
        if holds.as_plain().is_none() {
            // Multi-hold stays multi-hold: into the stored value, in place
            // (what it replaces is the placeholder `Work` left there).
            if let Some(stored) = self.holds_in_place()? {
                *stored = holds;
                return self.set_holds_deadline(Some(deadline));
            }
        }
        let block = value::holds_into_raw(holds);
        if block.is_null() {
            return Err(Error::Internal("out of memory"));
        }
        match self.stored() {
            Ok(Some(_)) => self.replace_block(block)?,
            Ok(None) | Err(Error::WrongType) => self.store_block(block)?,
            Err(e) => {
                unsafe { value::free(block) };
                return Err(e);
            }
        }
        self.set_holds_deadline(Some(deadline))
    }

    /// Removes the key's TTL (a hold without a deadline: see `NEVER`).
    fn persist(&mut self) -> Result<(), Error> {
        let no_expire = raw::REDISMODULE_NO_EXPIRE as i64;
        unsafe { rm!(RedisModule_SetExpire)(self.key, no_expire) };
        Ok(())
    }

    pub fn delete(&mut self) -> Result<(), Error> {
        unsafe { rm!(RedisModule_DeleteKey)(self.key) };
        Ok(())
    }

    /// Absolute deadlines only: the same number goes to replicas and the AOF.
    pub fn set_deadline(&mut self, deadline_ms: u64) -> Result<(), Error> {
        let at = i64::try_from(deadline_ms).map_err(|_| Error::Internal("deadline"))?;
        if unsafe { rm!(RedisModule_SetAbsExpire)(self.key, at) } != crate::server::edge::api::OK {
            return Err(Error::Internal("cannot set expiry"));
        }
        Ok(())
    }

    /// Unix ms when the lease ends; `None` if an admin removed the TTL, or
    /// for a free key. An empty key is never handed to `GetAbsExpire`:
    /// Redis 8.6 dereferences its missing value there and crashes (earlier
    /// servers answer no expiry), and a `WAIT` on a free lock held back by
    /// a quarantine or its queue asks for the deadline of an empty key.
    pub fn deadline(&self) -> Result<Option<u64>, Error> {
        if self.key.is_null()
            || unsafe { rm!(RedisModule_KeyType)(self.key) }
                == raw::REDISMODULE_KEYTYPE_EMPTY as c_int
        {
            return Ok(None);
        }
        let at = unsafe { rm!(RedisModule_GetAbsExpire)(self.key) };
        Ok(u64::try_from(at).ok())
    }

    /// Only real changes are signalled (the module runs with implicit
    /// signalling off), so a refused command does not abort others' WATCH.
    pub fn signal_modified(&self) -> Result<(), Error> {
        unsafe { rm!(RedisModule_SignalModifiedKey)(self.ctx.0, self.name) };
        Ok(())
    }
}

fn new_block(lease: LeaseRef<'_>) -> Result<*mut c_void, Error> {
    let block = value::into_raw(lease);
    if block.is_null() {
        return Err(Error::Internal("out of memory"));
    }
    Ok(block)
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if self.key.is_null() {
            return;
        }
        if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
            unsafe { close(self.key) };
        }
    }
}
