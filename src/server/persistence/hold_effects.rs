//! The effects of resources with several holds (the formats are
//! in `dlock_core::resource::changes`): emitted by the master for each hold it adds, moves
//! or drops, and applied by replicas and the AOF loader. A change between
//! plain locks (or to and from a free key) keeps the plain effects, so a
//! deployment that uses only plain locks sends only plain effects.

use std::ffi::{c_char, c_longlong, CStr};

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx, OK};
use crate::server::edge::ffi::Argv;
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::persistence::effects;
use crate::server::sessions::{self, Binding};
use crate::server::{keyspace::hold_guards, notify::watchers, state};
use dlock_core::decimal::Decimal;
use dlock_core::resource::changes::{self, mode_name, Change};
use dlock_core::resource::holds::{Holds, NEVER};
use dlock_core::sessions::Fate;
use dlock_core::Error;

pub const ADDHOLD: &CStr = c"DLOCK.ADDHOLD";
pub const MOVEHOLD: &CStr = c"DLOCK.MOVEHOLD";
pub const DROPHOLD: &CStr = c"DLOCK.DROPHOLD";
pub const SETHOLDS: &CStr = c"DLOCK.SETHOLDS";
pub const SETLIMIT: &CStr = c"DLOCK.SETLIMIT";

/// `DLOCK.ADDHOLD`'s formats by how many optional arguments follow the
/// fixed ones (`emit`).
const ADDHOLD_FORMATS: [&CStr; 6] = [
    c"sbbbbbbb",
    c"sbbbbbbbb",
    c"sbbbbbbbbb",
    c"sbbbbbbbbbb",
    c"sbbbbbbbbbbb",
    c"sbbbbbbbbbbbb",
];

/// Propagates `changes`, which turned holds that were plain (or none:
/// `was_plain`) into `after`.
pub fn propagate(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    was_plain: bool,
    after: &Holds,
    changes: &[Change],
) -> Result<(), Error> {
    if changes.is_empty() {
        return Ok(());
    }
    if was_plain {
        if after.is_empty() {
            return effects::released(ctx, name);
        }
        if let Some(h) = after.as_plain() {
            let added = changes.iter().any(|c| matches!(c, Change::Add { .. }));
            // A plain lock persisted by an admin keeps no deadline: the
            // effect then leaves the replica's expiry as it is.
            return match (added, h.deadline_ms >= NEVER) {
                (true, no_ttl) => {
                    let deadline = if no_ttl { 0 } else { h.deadline_ms };
                    effects::granted(ctx, name, h.token, h.fence, deadline)
                }
                (false, true) => Ok(()),
                (false, false) => effects::deadline_moved(ctx, name, h.deadline_ms),
            };
        }
    }
    effects::meta_if_changed(ctx)?;
    for change in changes {
        emit(ctx, name, change)?;
    }
    Ok(())
}

fn emit(ctx: Ctx, name: *mut raw::RedisModuleString, change: &Change) -> Result<(), Error> {
    let replicate = rm!(RedisModule_Replicate);
    let status = match change {
        Change::Add { hold, limit } => {
            let f = Decimal::new(hold.fence);
            let l = Decimal::new(u64::from(*limit));
            let d = Decimal::new(hold.deadline_ms);
            let m = Decimal::new(state::last_fence().max(hold.fence));
            let mode = mode_name(hold.mode);
            // A bound hold's session goes after the fixed arguments, or a
            // capped hold's `MAXHOLD cap_ms max_hold_ms` (never both), then
            // `PERMITS k` for a hold counting as k > 1 permits; each only
            // when used, so the format stops before what is unused (C
            // ignores unread variadic pairs).
            let (cap_at, cap_ms) = hold.cap.map_or((0, 0), |c| (c.at_ms, c.ms));
            let (cap_at, cap_ms) = (Decimal::new(cap_at), Decimal::new(cap_ms));
            let k = Decimal::new(u64::from(hold.permits));
            let mut tail: Vec<&[u8]> = Vec::with_capacity(5);
            match (&hold.session, hold.cap) {
                (_, Some(_)) => {
                    tail.extend([&b"MAXHOLD"[..], cap_at.as_bytes(), cap_ms.as_bytes()])
                }
                (Some(session), None) => tail.push(session),
                (None, None) => {}
            }
            if hold.permits > 1 {
                tail.extend([&b"PERMITS"[..], k.as_bytes()]);
            }
            let format = ADDHOLD_FORMATS
                .get(tail.len())
                .ok_or(Error::Internal("ADDHOLD arguments"))?;
            tail.resize(5, b"");
            let [t0, t1, t2, t3, t4] =
                <[&[u8]; 5]>::try_from(tail).map_err(|_| Error::Internal("ADDHOLD arguments"))?;
            unsafe {
                replicate(
                    ctx.0,
                    ADDHOLD.as_ptr(),
                    format.as_ptr(),
                    name,
                    ptr(&hold.token),
                    hold.token.len(),
                    ptr(&hold.owner),
                    hold.owner.len(),
                    ptr(f.as_bytes()),
                    f.as_bytes().len(),
                    ptr(mode),
                    mode.len(),
                    ptr(l.as_bytes()),
                    l.as_bytes().len(),
                    ptr(d.as_bytes()),
                    d.as_bytes().len(),
                    ptr(m.as_bytes()),
                    m.as_bytes().len(),
                    ptr(t0),
                    t0.len(),
                    ptr(t1),
                    t1.len(),
                    ptr(t2),
                    t2.len(),
                    ptr(t3),
                    t3.len(),
                    ptr(t4),
                    t4.len(),
                )
            }
        }
        Change::Move { token, deadline_ms } => {
            let d = Decimal::new(*deadline_ms);
            unsafe {
                replicate(
                    ctx.0,
                    MOVEHOLD.as_ptr(),
                    c"sbb".as_ptr(),
                    name,
                    ptr(token),
                    token.len(),
                    ptr(d.as_bytes()),
                    d.as_bytes().len(),
                )
            }
        }
        Change::Limit { limit } => {
            let n = Decimal::new(u64::from(*limit));
            unsafe {
                replicate(
                    ctx.0,
                    SETLIMIT.as_ptr(),
                    c"sb".as_ptr(),
                    name,
                    ptr(n.as_bytes()),
                    n.as_bytes().len(),
                )
            }
        }
        Change::Drop { token } => unsafe {
            replicate(
                ctx.0,
                DROPHOLD.as_ptr(),
                c"sb".as_ptr(),
                name,
                ptr(token),
                token.len(),
            )
        },
    };
    if status == OK {
        Ok(())
    } else {
        Err(Error::Internal("replication of the effect failed"))
    }
}

fn ptr(b: &[u8]) -> *const c_char {
    b.as_ptr().cast::<c_char>()
}

/// `DLOCK.ADDHOLD`, `DLOCK.MOVEHOLD`, `DLOCK.DROPHOLD`, `DLOCK.SETLIMIT` from the master or
/// the AOF. Refused from clients, as `DLOCK.APPLY` is.
pub fn apply_add(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    refuse_forged(ctx, "DLOCK.ADDHOLD")?;
    let (change, mark) = changes::parse_add(argv.bytes())?;
    state::observe_fence(mark);
    apply(ctx, argv, &change)
}

pub fn apply_move(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    refuse_forged(ctx, "DLOCK.MOVEHOLD")?;
    let change = changes::parse_move(argv.bytes())?;
    apply(ctx, argv, &change)
}

pub fn apply_set_limit(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    refuse_forged(ctx, "DLOCK.SETLIMIT")?;
    let change = changes::parse_limit(argv.bytes())?;
    apply(ctx, argv, &change)
}

pub fn apply_drop(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    refuse_forged(ctx, "DLOCK.DROPHOLD")?;
    let change = changes::parse_drop(argv.bytes())?;
    apply(ctx, argv, &change)
}

fn refuse_forged(ctx: Ctx, command: &'static str) -> Result<(), Error> {
    let flags = ctx.flags()?;
    if !(flags.is_replicated() || flags.is_loading()) {
        return Err(Error::ForgedEffect(command));
    }
    Ok(())
}

fn apply(ctx: Ctx, argv: &Argv, change: &Change) -> Result<(), Error> {
    let mut key = LockKey::open_write(ctx, argv.key()?)?;
    let sessions_before = bound_of(&key);
    // A multi-hold value changes in place: a replica or an AOF replay pays
    // no copy of the holds per effect.
    let mut applied = false;
    let in_place = match key.holds_in_place() {
        Ok(Some(holds)) => {
            change.apply(holds);
            applied = true;
            let stays_multi = holds.as_plain().is_none() && !holds.is_empty();
            stays_multi.then(|| (holds.deadline_ms(), hold_guards::latest_finite(holds)))
        }
        Ok(None) | Err(Error::WrongType) => None,
        Err(e) => return Err(e),
    };
    match in_place {
        Some((latest, guard_at)) => {
            key.set_holds_deadline(latest)?;
            if let Some(at) = guard_at {
                hold_guards::watch(ctx, argv.key()?, at);
            }
        }
        None => {
            // What the master changed is a lock; anything else there is
            // replaced, as `DLOCK.APPLY` does. A value that turned plain or
            // empty is stored again in its plain form (or deleted).
            let mut holds = match key.holds() {
                Ok(h) => h.unwrap_or_else(|| Holds::new(1)),
                Err(Error::WrongType) => Holds::new(1),
                Err(e) => return Err(e),
            };
            if !applied {
                change.apply(&mut holds);
            }
            hold_guards::put_holds(ctx, &mut key, argv.key()?, holds)?;
        }
    }
    tell_sessions(ctx, argv, sessions_before, bound_of(&key));
    unsafe { rm!(RedisModule_ReplicateVerbatim)(ctx.0) };
    key.signal_modified()?;
    watchers::changed_name(ctx, argv.key()?);
    ctx.reply_ok()
}

/// The bound holds of a key: (token, session).
fn bound_of(key: &LockKey) -> Vec<Binding> {
    if !sessions::any() {
        return Vec::new();
    }
    match key.stored() {
        Ok(Some(Stored::Multi(holds))) => holds
            .bound()
            .map(|(t, s)| (Box::from(t), Box::from(s)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The registry learns what an applied effect bound and unbound.
fn tell_sessions(ctx: Ctx, argv: &Argv, before: Vec<Binding>, after: Vec<Binding>) {
    if before == after {
        return;
    }
    let (Ok(name), Some(db_of)) = (argv.key(), unsafe { raw::RedisModule_GetSelectedDb }) else {
        return;
    };
    let Ok(key) = crate::server::edge::api::bytes(name) else {
        return;
    };
    let db = unsafe { db_of(ctx.0) };
    let gone: Vec<_> = before
        .iter()
        .filter(|b| !after.contains(b))
        .cloned()
        .collect();
    let new: Vec<_> = after
        .iter()
        .filter(|a| !before.contains(a))
        .cloned()
        .collect();
    sessions::note_holds(db, key, &new, &gone);
}

/// `DLOCK.SETHOLDS key value last_fence`: a whole multi-hold value, from an
/// AOF rewrite.
pub fn apply_set(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    refuse_forged(ctx, "DLOCK.SETHOLDS")?;
    let (holds, mark) = changes::parse_set(argv.bytes())?;
    state::observe_fence(mark);
    let mut key = LockKey::open_write(ctx, argv.key()?)?;
    let sessions_before = bound_of(&key);
    hold_guards::put_holds(ctx, &mut key, argv.key()?, holds)?;
    tell_sessions(ctx, argv, sessions_before, bound_of(&key));
    unsafe { rm!(RedisModule_ReplicateVerbatim)(ctx.0) };
    key.signal_modified()?;
    watchers::changed_name(ctx, argv.key()?);
    ctx.reply_ok()
}

/// A multi-hold value as one `DLOCK.SETHOLDS` (the value in its RDB
/// layout, every hold with its absolute deadline), then `PERSIST`: applying
/// the holds gives the key the latest hold's deadline, and the server
/// appends the key's own `PEXPIREAT` after us only when the key has one (an
/// admin may have removed it), so the replayed key ends with exactly the TTL
/// it had. One effect per key keeps replaying a rewritten AOF linear in the
/// holds.
pub fn rewrite(aof: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, holds: &Holds) {
    let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
        return;
    };
    let settled;
    let mut persist = true;
    let holds = if holds.bound().next().is_some() {
        // A hold of an ended session is written as what its ending makes
        // of it, and the key then keeps the deadline that gives it (no
        // `PERSIST`: a key with a bound hold has no TTL of its own). The
        // live sessions were written before the first lock.
        let changed;
        (settled, changed) = settled_for_rewrite(holds);
        persist = !changed;
        &settled
    } else {
        holds
    };
    if holds.is_empty() {
        // Every hold ended with its session: the key is not written.
        return;
    }
    let bytes = dlock_core::resource::layout::encode(holds);
    let last = state::last_fence().max(holds.max_fence());
    unsafe {
        emit(
            aof,
            SETHOLDS.as_ptr(),
            c"sbl".as_ptr(),
            key,
            bytes.as_ptr().cast::<c_char>(),
            bytes.len(),
            last as c_longlong,
        );
        if persist {
            emit(aof, c"PERSIST".as_ptr(), c"s".as_ptr(), key);
        }
    }
}

/// A copy of `holds` with the holds of sessions that are no longer live as
/// their ending leaves them: gone, or kept until the lock-delay ends.
fn settled_for_rewrite(holds: &Holds) -> (Holds, bool) {
    let mut out = Holds::new(holds.limit);
    let mut changed = false;
    let now_ms = crate::server::edge::api::now_us() / 1000;
    for h in holds.iter() {
        let mut hold = h.to_hold();
        // A hold whose delay runs already says when it ends.
        if let Some(s) = h.session.filter(|_| h.deadline_ms >= NEVER) {
            match sessions::fate(s, now_ms) {
                Fate::Live => {}
                Fate::DelayedUntil(until) => {
                    hold.deadline_ms = until;
                    changed = true;
                }
                Fate::Gone => {
                    changed = true;
                    continue;
                }
            }
        }
        out.push(hold);
    }
    (out, changed)
}
