//! Runs the deferred jobs (`jobs`) from their timer, in an event-loop turn
//! of their own: whatever they replicate is dlock's own effect, never part
//! of another command. (A command on a resource with a pending revocation
//! completes it first: `revoke::before_command`.)

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use crate::server::edge::api::Ctx;
use crate::server::jobs::{self, Job, PAUSED_RETRY_MS};
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{
    commands::observe, execute::handoff, execute::hold_checks, execute::revoke, execute::sessions,
    execute::step, keyspace::restored, notify::watchers, persistence::data_type,
};
use dlock_core::Error;

/// Rounds of jobs one timer runs: what a round queues (a revocation thins a
/// queue, a waiter that left frees a place) runs in the next; whatever is
/// left after the last keeps the timer armed. Once the steps of one timer
/// have decided `step::DECIDED_PER_STEP` requests (a cascade of grants),
/// the queues left to serve wait for the next timer, in a later
/// event-loop turn: no timer serves more than a bounded part of them.
const ROUNDS: usize = 8;

pub fn init(ctx: Ctx) -> Result<(), Error> {
    jobs::init(ctx, run)
}

/// The timer's work: every job due, then the answers they decided.
fn run(ctx: Ctx) {
    if ctx.flags().is_ok_and(|f| f.in_script()) {
        // The server serves events while a slow script runs: the script's
        // keyspace must not change under it.
        for job in jobs::take_due() {
            jobs::push_after(job, PAUSED_RETRY_MS);
        }
        return;
    }
    let start = step::decided();
    let spent = || step::decided().saturating_sub(start) >= step::DECIDED_PER_STEP;
    // The settles an earlier timer left go first, in order.
    let mut last: Option<Resource> = None;
    while !spent() {
        let Some(res) = carried(|c| c.pop_front()) else {
            break;
        };
        if last.as_ref() != Some(&res) {
            handoff::settle_logged(ctx, &res);
        }
        last = Some(res);
    }
    for _ in 0..ROUNDS {
        if spent() {
            break;
        }
        let due = jobs::take_due();
        if due.is_empty() {
            break;
        }
        run_jobs(ctx, due, &spent);
    }
    if carried(|c| !c.is_empty()) {
        // Keeps the timer armed for them: the runner ends every run with
        // the hand-over anyway.
        jobs::push(Job::HandOver);
    }
    blocking::hand_over();
}

/// Settles a timer left to the next for lack of budget, in order. Kept
/// here rather than queued again: a queue of 25,600 settles (a flush)
/// taken and queued again by each timer cost each one all of them. Only
/// settles: a revocation must stay where `revoke::before_command` finds
/// it, and a settle serves whatever queue it finds, so one that waits
/// here changes nothing a command sees.
static CARRIED: Mutex<VecDeque<Resource>> = Mutex::new(VecDeque::new());

fn carried<T>(f: impl FnOnce(&mut VecDeque<Resource>) -> T) -> T {
    f(&mut CARRIED.lock().unwrap_or_else(|p| p.into_inner()))
}

fn run_jobs(ctx: Ctx, list: Vec<Job>, spent: &dyn Fn() -> bool) {
    // Settles of one resource in a row do the same work once (a flush
    // queues one per resource with waiters: a set, not a scan).
    let mut settled: HashSet<Resource> = HashSet::new();
    for job in list {
        match job {
            Job::Settle(res) => {
                if spent() {
                    carried(|c| c.push_back(res));
                } else if !settled.contains(&res) {
                    handoff::settle_logged(ctx, &res);
                    settled.insert(res);
                }
                continue;
            }
            Job::LeaseEnded { res, at_ms, timer } => {
                blocking::timer_fired(&res, at_ms, timer);
                if spent() {
                    carried(|c| c.push_back(res));
                } else {
                    handoff::settle_logged(ctx, &res);
                }
            }
            Job::Revoke(grant) => revoke::revoke(ctx, grant),
            Job::ConfirmRestored { db, key, fence } => {
                restored::confirm_logged(ctx, db, &key, fence)
            }
            Job::WriteMeta => data_type::write_meta(ctx),
            Job::CheckHolds { db, key } => hold_checks::check_logged(ctx, db, &key),
            Job::Observed(res) => observe::check_logged(ctx, &res),
            Job::ObserversGiveUp => observe::give_up(ctx),
            Job::ObservedSlots => observe::check_slots_logged(ctx),
            Job::PaceSweep => watchers::sweep(),
            Job::SessionsDue => sessions::expire_due(ctx),
            Job::SessionsEnd => sessions::settle_ending(ctx),
            Job::ClientGone(client) => sessions::client_gone(ctx, client),
            Job::EndRestoredAt {
                db,
                key,
                token,
                at_ms,
            } => hold_checks::end_at_logged(ctx, db, &key, &token, at_ms),
            // Every run ends with the hand-over.
            Job::HandOver => {}
        }
        settled.clear();
    }
}
