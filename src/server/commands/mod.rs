//! The command handlers: each parses its arguments, opens what it touches,
//! lets the rules decide and has the plan carried out, then replies; and what
//! `COMMAND DOCS` and `COMMAND INFO` show of them.

pub mod docs;
pub mod guard;
pub mod info;
pub mod lock;
pub mod observe;
pub mod position;
pub mod queued;
pub mod session;
pub mod sets;
pub mod stats;
pub mod wanted;
