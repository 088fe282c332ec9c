//! What outlives a command's turn on this server: the effects replicas and
//! the AOF receive (never the command that caused them), and the data type's
//! callbacks that RDB, `DUMP`/`RESTORE` and the AOF rewrite use.

pub mod data_type;
pub mod effects;
pub mod hold_effects;
pub mod session_effects;
