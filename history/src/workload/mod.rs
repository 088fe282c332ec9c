//! The workload: clients, the fenced sink and the fault schedule.
use crate::history::Event;
use std::path::PathBuf;

pub struct Config {
    pub secs: u64,
    pub seed: u64,
    pub clients: u32,
    /// The history is written here as it happens.
    pub out: PathBuf,
}

pub fn run(cfg: &Config) -> Result<Vec<Event>, String> {
    let _ = cfg;
    Err("the workload is not built yet".into())
}
