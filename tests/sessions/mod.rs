//! Sessions (docs/sessions.md): a liveness lease for many holds and waits.

mod deadlock;
mod delay_and_loss;
mod moved;
mod waits;
