//! Guarded writes and the sequencer check: whether a token or a fence is a
//! live hold on a resource at one instant (`holder`), what a guarded call
//! asks (`args`), and which inner commands a guard may run, what it must
//! save to undo a batch (`inner`).

pub mod args;
pub mod inner;

use crate::resource::holds::{HoldRef, NEVER};

/// What the caller shows to prove it holds the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof<'a> {
    Token(&'a [u8]),
    Fence(u64),
}

impl Proof<'_> {
    fn names(&self, hold: &HoldRef<'_>) -> bool {
        match self {
            Proof::Token(token) => hold.token == *token,
            Proof::Fence(fence) => hold.fence == *fence,
        }
    }
}

/// Whether `proof` names a live hold among `holds` at `now_ms`: a hold up
/// to and including its deadline; a hold bound to a session while that
/// session lives (`session_live`); never a lock-delayed hold (its session
/// ended: it keeps the session's id and a finite deadline, held by nobody).
pub fn holder<'h>(
    proof: Proof<'_>,
    holds: impl IntoIterator<Item = HoldRef<'h>>,
    now_ms: u64,
    session_live: impl Fn(&[u8]) -> bool,
) -> bool {
    // The planted bug (test-only, docs/history.md): a guard that skips the
    // check lets a stale holder write.
    if cfg!(feature = "planted-guard-skips-check") {
        return true;
    }
    holds.into_iter().any(|hold| {
        proof.names(&hold)
            && hold.is_live(now_ms)
            && match hold.session {
                None => true,
                Some(session) => hold.deadline_ms == NEVER && session_live(session),
            }
    })
}

#[cfg(test)]
mod tests;
