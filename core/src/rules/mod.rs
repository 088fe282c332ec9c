//! Rules that stand beside admission: the fence clock, the restart and
//! promotion quarantine, risky settings, hash slots, config ranges, and the
//! RDB aux data that carries the fence clock's mark and the quarantine's facts.

pub mod aux;
pub mod cluster;
pub mod config;
pub mod policy;
pub mod quarantine;
