//! Sessions (docs/sessions.md): a liveness lease for many holds and waits.

mod deadlock;
mod moved;
