//! A resource's holds while one command or timer changes them: loaded
//! with the dead ones pruned, changed, and written back with their effects.
//! Every `step` carries out its plan on these, one per resource.

use redis_module::raw;

use super::api::{now_us, Ctx};
use super::keys::LockKey;
use super::quarantine;
use super::{hold_effects, hold_guards};
use crate::lock::changes::Change;
use crate::lock::holds::Holds;
use crate::lock::Error;

/// A resource's holds being changed by one command: the holds as they will
/// be, and the changes that lead there, in order.
pub struct Work {
    pub holds: Holds,
    /// The key held a plain lock or nothing (plain effects may apply).
    was_plain: bool,
    changes: Vec<Change>,
    /// A hold ended (pruned, released, revoked) or there is none: the
    /// queue may fit now. Otherwise nothing a queued request waits for
    /// changed, and re-planning the queue would find nothing.
    pub freed: bool,
    /// A hold ended by its deadline or an admin's expiry when loaded.
    pub pruned: bool,
    pub now_us: u64,
}

impl Work {
    /// The holds of `key`, with those past their deadline dropped.
    pub fn load(key: &LockKey) -> Result<Work, Error> {
        Self::load_at(key, now_us())
    }

    /// As `load`, at `now_us`: the members of a set share one clock read,
    /// so their holds get one absolute deadline.
    pub fn load_at(key: &LockKey, now_us: u64) -> Result<Work, Error> {
        let was_plain = !key.is_multi()?;
        let mut holds = key.holds()?.unwrap_or_else(|| Holds::new(1));
        let mut changes = Vec::new();
        if !was_plain {
            // The module keeps a multi-hold key's expiry at its latest hold
            // deadline, so an earlier one is an admin's `PEXPIRE`: it ends
            // every hold there, and writing the holds back must not give
            // the key the later deadline again.
            if let Some(until) = key.deadline()? {
                changes.extend(holds.clamp(until).into_iter().map(|token| Change::Move {
                    token,
                    deadline_ms: until,
                }));
            }
        }
        changes.extend(
            holds
                .prune(now_us / 1000)
                .into_iter()
                .map(|h| Change::Drop { token: h.token }),
        );
        let pruned = changes.iter().any(|c| matches!(c, Change::Drop { .. }));
        Ok(Work {
            freed: pruned || holds.is_empty(),
            pruned,
            holds,
            was_plain,
            changes,
            now_us,
        })
    }

    pub fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    pub fn add(&mut self, ask: &crate::lock::ask::Ask<'_>, fence: u64) {
        let deadline = self.now_ms() + ask.ttl_ms;
        self.holds.add(ask, fence, deadline);
        quarantine::note_ttl(ask.ttl_ms);
        if let Some(hold) = self.holds.hold_of(ask.token) {
            self.changes.push(Change::Add {
                hold: hold.to_hold(),
                limit: self.holds.limit,
            });
        }
    }

    pub fn move_deadline(&mut self, token: &[u8], ttl_ms: u64) {
        let deadline_ms = self.now_ms() + ttl_ms;
        if self.holds.set_deadline(token, deadline_ms) {
            quarantine::note_ttl(ttl_ms);
            self.changes.push(Change::Move {
                token: token.into(),
                deadline_ms,
            });
        }
    }

    pub fn drop_hold(&mut self, token: &[u8]) -> bool {
        let dropped = self.holds.release(token);
        self.freed |= dropped;
        if dropped {
            self.changes.push(Change::Drop {
                token: token.into(),
            });
        }
        dropped
    }

    /// Writes the holds back with their effects, if anything changed;
    /// returns when the queue must next look at them.
    pub fn finish(
        &mut self,
        ctx: Ctx,
        key: &mut LockKey,
        name: *mut raw::RedisModuleString,
    ) -> Result<Deadlines, Error> {
        let deadlines = Deadlines {
            earliest: self.holds.earliest_deadline_ms(),
            latest: self.holds.deadline_ms(),
        };
        if self.changes.is_empty() {
            return Ok(deadlines);
        }
        hold_effects::propagate(ctx, name, self.was_plain, &self.holds, &self.changes)?;
        self.changes.clear();
        hold_guards::put_holds(ctx, key, name, std::mem::take(&mut self.holds))?;
        key.signal_modified()?;
        Ok(deadlines)
    }
}

/// The earliest and latest hold deadlines after a command.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    pub earliest: Option<u64>,
    pub latest: Option<u64>,
}
