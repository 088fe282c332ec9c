//! A [`Guard`]'s guarded writes and sequencer check: the commands run on
//! the server that granted the lock, proven by the guard's fence, and run
//! only if that hold is live at that instant (`DLOCK.GUARD`,
//! `DLOCK.CHECK`).

use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::guarded::{self, check_reply, convert};
use crate::lease::NOT_ONE_SERVER;
use redis::{Cmd, FromRedisValue, Value};

impl Guard {
    /// Runs `cmd` on the lock's server if, at that instant, this guard's
    /// hold is live there (`DLOCK.GUARD resource FENCE fence cmd ...`), in
    /// one atomic step: a holder that paused past its lease can never write
    /// after someone else took the lock. Returns the command's reply.
    ///
    /// - [`Error::NotHeld`]: the hold is not live (expired, released,
    ///   taken over), or the guard is already known lost
    ///   ([`Guard::is_lost`]; then nothing is sent): nothing was written,
    ///   and the guard is marked lost.
    /// - [`Error::Refused`]: the command was refused or failed (its code
    ///   kept: `WRONGTYPE`, `NOPERM`, `OOM`, `CROSSSLOT`, or `ERR` for one
    ///   the server does not run guarded: blocking, `DLOCK.*`, `MULTI`,
    ///   ...); nothing was written.
    /// - [`Error::Unavailable`]: no reply. The write is sent again only
    ///   while it surely did not run; once it may have reached the server,
    ///   the error says so and the caller decides.
    /// - [`Error::Invalid`]: an empty command, or a Redlock guard (a write
    ///   on one of its servers is not protected by a majority; store
    ///   [`Guard::fences`] in the storage instead).
    ///
    /// Its keys must be in the resource's hash slot in Redis Cluster (a
    /// hash tag: lock `{orders}`, write `{orders}:stock`). For a set, the
    /// first resource's hold is the proof (every member shares its fence).
    ///
    /// ```no_run
    /// # let locker = dlock_client::Locker::new("redis://127.0.0.1:6379/")?;
    /// # let guard = locker.try_lock("{orders}", std::time::Duration::from_secs(30))?.unwrap();
    /// use dlock_client::redis;
    /// let stock: i64 = guard.write(redis::cmd("DECRBY").arg("{orders}:stock").arg(3))?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn write<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let c = guarded::write_cmd(self.resource(), self.fence(), cmd)?;
        convert(self.guarded(&c)?)
    }

    /// Runs every command of `cmds` if this guard's hold is live, all or
    /// none (`DLOCK.GUARD ... BATCH`): a command that fails undoes the
    /// ones before it, and its error comes back ([`Error::Refused`], its
    /// code kept). Returns the replies in order (`Vec<Value>`, or a tuple).
    /// An empty batch is [`Error::Invalid`]; the server limits a batch's
    /// size (a larger one: [`Error::Refused`]). Otherwise as
    /// [`Guard::write`].
    pub fn write_batch<T: FromRedisValue>(&self, cmds: &[Cmd]) -> Result<T> {
        let c = guarded::batch_cmd(self.resource(), self.fence(), cmds)?;
        convert(self.guarded(&c)?)
    }

    /// Asks the server whether this guard's hold is live now (the
    /// sequencer check, `DLOCK.CHECK`); false marks the guard lost. Racy
    /// by nature: the hold can end right after the answer. A write to the
    /// same Redis is [`Guard::write`]; elsewhere, store the fence
    /// (docs/fencing.md).
    pub fn check(&self) -> Result<bool> {
        let c = guarded::check_cmd(self.resource(), self.fence())?;
        if !self.held().lease.on_one_server() {
            return Err(Error::Invalid(NOT_ONE_SERVER.into()));
        }
        if self.is_lost() {
            self.held().mark_lost();
            return Ok(false);
        }
        let live = check_reply(self.held().lease.guarded(&c, true)?)?;
        if !live {
            self.held().mark_lost();
        }
        Ok(live)
    }

    fn guarded(&self, c: &Cmd) -> Result<Value> {
        if !self.held().lease.on_one_server() {
            return Err(Error::Invalid(NOT_ONE_SERVER.into()));
        }
        if self.is_lost() {
            self.held().mark_lost();
            return Err(Error::NotHeld);
        }
        let r = self.held().lease.guarded(c, false);
        if matches!(r, Err(Error::NotHeld)) {
            self.held().mark_lost();
        }
        r
    }
}
