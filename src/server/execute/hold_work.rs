//! A resource's holds while one command or timer changes them: loaded
//! with the dead ones pruned, changed, and written back with their effects.
//! Every `step` carries out its plan on these, one per resource.

use redis_module::raw;

use crate::server::edge::api::{self, now_us, Ctx};
use crate::server::keyspace::keys::LockKey;
use crate::server::notify::{figures, stats};
use crate::server::sessions::{self, Binding};
use crate::server::{keyspace::hold_guards, persistence::hold_effects};
use crate::server::{quarantine, resource::Resource};
use dlock_core::resource::changes::Change;
use dlock_core::resource::holds::{Hold, Holds, NEVER};
use dlock_core::sessions::Fate;
use dlock_core::stats::{End, Kind};
use dlock_core::Error;

/// A resource's holds being changed by one command: the holds as they will
/// be, and the changes that lead there, in order.
///
/// A multi-hold value's holds are moved out of the key while the step
/// decides and changes them (nothing is copied: the key keeps an empty
/// placeholder), and moved back when the work finishes. Every change is
/// recorded with what undoes it, so a step that ends without finishing (an
/// error, a refusal) puts the holds back exactly as they were, in their
/// grant order (`Opened` in group.rs; `finish` itself on its errors).
pub struct Work {
    pub holds: Holds,
    /// The key held a plain lock or nothing (plain effects may apply).
    was_plain: bool,
    /// The holds were moved out of the key's multi-hold value.
    taken: bool,
    changes: Vec<Change>,
    undo: Vec<Undo>,
    /// A hold ended (pruned, released, revoked) or there is none: the
    /// queue may fit now. Otherwise nothing a queued request waits for
    /// changed, and re-planning the queue would find nothing.
    pub freed: bool,
    /// A hold ended by its deadline or an admin's expiry when loaded.
    pub pruned: bool,
    pub now_us: u64,
    /// Holds bound to a session (token, session) by this work, and bound
    /// holds it dropped or unbound: the registry learns them once the work
    /// is written back.
    bound: Vec<Binding>,
    unbound: Vec<Binding>,
    /// A hold ended (or began its lock-delay) with its session: told as a
    /// release once written.
    ended_with_session: bool,
    /// Holds that ran out or were released here, for the statistics once
    /// written: (kind, fence, end in µs, how).
    ended: Vec<(Kind, u64, u64, End)>,
}

/// What undoes one change.
enum Undo {
    /// A hold was added.
    Remove(Box<[u8]>),
    /// A hold was removed: back in its place in grant order.
    Restore(Hold, u64),
    /// A hold's deadline moved from this one.
    Deadline(Box<[u8]>, u64),
    /// The limit was this, resized or not (`DLOCK.RESIZE`).
    Limit(u32, bool),
}

impl Work {
    /// The holds of `key`, with those past their deadline dropped.
    pub fn load(key: &mut LockKey) -> Result<Work, Error> {
        Self::load_at(key, now_us())
    }

    /// As `load`, at `now_us`: the members of a set share one clock read,
    /// so their holds get one absolute deadline.
    pub fn load_at(key: &mut LockKey, now_us: u64) -> Result<Work, Error> {
        let was_plain = !key.is_multi()?;
        let (holds, taken) = match key.holds_in_place()? {
            Some(stored) => (std::mem::take(stored), true),
            None => (key.holds()?.unwrap_or_else(|| Holds::new(1)), false),
        };
        let mut work = Work {
            holds,
            was_plain,
            taken,
            changes: Vec::new(),
            undo: Vec::new(),
            freed: false,
            pruned: false,
            now_us,
            bound: Vec::new(),
            unbound: Vec::new(),
            ended_with_session: false,
            ended: Vec::new(),
        };
        if !was_plain {
            // The module keeps a multi-hold key's expiry at its latest hold
            // deadline, so an earlier one is an admin's `PEXPIRE`: it ends
            // every hold there, and writing the holds back must not give
            // the key the later deadline again.
            let until = match key.deadline() {
                Ok(until) => until,
                Err(e) => {
                    work.put_back(key);
                    return Err(e);
                }
            };
            if let Some(until) = until {
                for (token, old) in work.holds.later_than(until) {
                    work.holds.set_deadline(&token, until);
                    work.undo.push(Undo::Deadline(token.clone(), old));
                    work.changes.push(Change::Move {
                        token,
                        deadline_ms: until,
                    });
                }
            }
        }
        while let Some(token) = work.holds.first_dead(now_us / 1000) {
            if let Some((hold, seq)) = work.holds.take(&token) {
                let end_us = now_us.min(hold.deadline_ms.saturating_mul(1000));
                let kind = Kind::of(hold.mode, work.holds.limit);
                work.ended.push((kind, hold.fence, end_us, End::Expired));
                work.undo.push(Undo::Restore(hold, seq));
                work.changes.push(Change::Drop { token });
                work.pruned = true;
            }
        }
        work.settle_sessions();
        work.freed = work.pruned || work.holds.is_empty();
        Ok(work)
    }

    pub fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    /// Holds bound to a session that is no longer live: gone, or kept
    /// until its lock-delay passes (unbound, with that deadline).
    fn settle_sessions(&mut self) {
        // Not skipped while no session exists: a hold of a session that
        // ended, under a name the registry never saw (a renamed key), is
        // judged all the same (gone).
        if self.holds.bound().next().is_none() {
            return;
        }
        let now_ms = self.now_ms();
        let fates: Vec<(Binding, Fate)> = self
            .holds
            .bound()
            .map(|(t, s)| ((Box::from(t), Box::from(s)), sessions::fate(s, now_ms)))
            .filter(|(_, f)| *f != Fate::Live)
            .filter(|((t, _), _)| {
                !(cfg!(feature = "planted-session-leaves-hold") && sessions::planted_leaked(t))
            })
            .collect();
        for ((token, session), fate) in fates {
            self.unbound.push((token.clone(), session));
            self.pruned = true;
            self.ended_with_session = true;
            match fate {
                Fate::DelayedUntil(until) => {
                    // Kept, under its session's id, until the delay ends:
                    // its deadline now says when.
                    self.holds.set_deadline(&token, until);
                    self.undo.push(Undo::Deadline(token.clone(), NEVER));
                    self.changes.push(Change::Move {
                        token,
                        deadline_ms: until,
                    });
                }
                _ => {
                    if let Some((hold, seq)) = self.holds.take(&token) {
                        self.undo.push(Undo::Restore(hold, seq));
                        self.changes.push(Change::Drop { token });
                    }
                }
            }
        }
    }

    /// Adds `ask`'s hold under `fence`; whether it was not held already.
    pub fn add(&mut self, ask: &dlock_core::ask::Ask<'_>, fence: u64) -> bool {
        let deadline = ask.deadline_ms(self.now_ms());
        if self.holds.hold_of(ask.token).is_some() {
            return false;
        }
        self.holds.add(ask, fence, deadline, self.now_ms());
        match ask.session {
            Some(s) => self.bound.push((ask.token.into(), s.into())),
            None => quarantine::note_ttl(ask.ttl_ms),
        }
        if let Some(hold) = self.holds.hold_of(ask.token) {
            self.changes.push(Change::Add {
                hold: hold.to_hold(),
                limit: self.holds.limit,
            });
            self.undo.push(Undo::Remove(ask.token.into()));
        }
        true
    }

    pub fn move_deadline(&mut self, token: &[u8], ttl_ms: u64) {
        let Some((old, cap)) = self.holds.hold_of(token).map(|h| (h.deadline_ms, h.cap)) else {
            return;
        };
        // The plan refused the command's own moves past a cap; a queued
        // retry of a capped hold ends at its cap at the latest.
        let deadline_ms = (self.now_ms() + ttl_ms).min(cap.map_or(u64::MAX, |c| c.at_ms));
        if self
            .holds
            .hold_of(token)
            .is_some_and(|h| h.session.is_some())
        {
            // A session's hold: its session keeps it (a same-session retry).
            return;
        }
        self.holds.set_deadline(token, deadline_ms);
        quarantine::note_ttl(ttl_ms);
        self.undo.push(Undo::Deadline(token.into(), old));
        self.changes.push(Change::Move {
            token: token.into(),
            deadline_ms,
        });
    }

    /// `DLOCK.RESIZE`: the limit becomes `limit`, the holds marked
    /// resized.
    pub fn set_limit(&mut self, limit: u32) {
        self.undo
            .push(Undo::Limit(self.holds.limit, self.holds.resized));
        self.holds.set_limit(limit);
        self.changes.push(Change::Limit { limit });
    }

    /// Ends `token`'s hold (`end`: released or revoked); whether it held.
    pub fn drop_hold(&mut self, token: &[u8], end: End) -> bool {
        let Some((hold, seq)) = self.holds.take(token) else {
            return false;
        };
        let kind = Kind::of(hold.mode, self.holds.limit);
        self.ended.push((kind, hold.fence, self.now_us, end));
        if let Some(s) = &hold.session {
            self.unbound.push((token.into(), s.clone()));
        }
        self.freed = true;
        self.undo.push(Undo::Restore(hold, seq));
        self.changes.push(Change::Drop {
            token: token.into(),
        });
        true
    }

    /// Writes the holds back with their effects, if anything changed;
    /// returns when the queue must next look at them. On an error nothing
    /// changed: the holds are back as they were.
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
            self.put_back(key);
            return Ok(deadlines);
        }
        if let Err(e) =
            hold_effects::propagate(ctx, name, self.was_plain, &self.holds, &self.changes)
        {
            self.abandon(key);
            return Err(e);
        }
        self.changes.clear();
        self.undo.clear();
        self.taken = false;
        hold_guards::put_holds(ctx, key, name, std::mem::take(&mut self.holds))?;
        key.signal_modified()?;
        self.tell_sessions(ctx, name);
        if std::mem::take(&mut self.ended_with_session) {
            stats::notify(ctx, c"dlock.released", name);
        }
        let ended = std::mem::take(&mut self.ended);
        if !ended.is_empty() && figures::enabled() {
            if let Ok(res) = Resource::of(ctx, name) {
                for (kind, fence, end_us, end) in ended {
                    figures::hold_ended(&res, kind, fence, end_us, end);
                }
            }
        }
        Ok(deadlines)
    }

    fn tell_sessions(&mut self, ctx: Ctx, name: *mut raw::RedisModuleString) {
        let (bound, unbound) = (
            std::mem::take(&mut self.bound),
            std::mem::take(&mut self.unbound),
        );
        if bound.is_empty() && unbound.is_empty() {
            return;
        }
        let (Ok(key), Some(db_of)) = (api::bytes(name), unsafe { raw::RedisModule_GetSelectedDb })
        else {
            return;
        };
        let db = unsafe { db_of(ctx.0) };
        sessions::note_holds(db, key, &bound, &unbound);
    }

    /// Ends the work without finishing it: every change undone, the holds
    /// back in the key as they were.
    pub fn abandon(&mut self, key: &mut LockKey) {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Remove(token) => {
                    self.holds.take(&token);
                }
                Undo::Restore(hold, seq) => self.holds.restore(hold, seq),
                Undo::Deadline(token, old) => {
                    self.holds.set_deadline(&token, old);
                }
                Undo::Limit(limit, resized) => {
                    self.holds.limit = limit;
                    self.holds.resized = resized;
                }
            }
        }
        self.changes.clear();
        self.bound.clear();
        self.unbound.clear();
        self.ended_with_session = false;
        self.ended.clear();
        self.put_back(key);
    }

    /// Moves the holds back into the key they were taken from.
    fn put_back(&mut self, key: &mut LockKey) {
        if !std::mem::take(&mut self.taken) {
            return;
        }
        if let Ok(Some(stored)) = key.holds_in_place() {
            *stored = std::mem::take(&mut self.holds);
        }
    }
}

/// The earliest and latest hold deadlines after a command.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    pub earliest: Option<u64>,
    pub latest: Option<u64>,
}
