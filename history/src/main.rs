//! `check-history`: runs a seeded workload over every kind of dlock lock
//! and a leader election against real servers while faults are injected,
//! records the history, and checks it (docs/history.md). `make
//! check-history` is the way in.
//!
//!   check-history run [--secs N] [--seed S] [--clients C] [--out FILE]
//!                     [--workload locks,election,sessions,guard]
//!   check-history check FILE
//!
//! Both print a report whose last line is exactly
//! `history: <ops> ops, <faults> faults, <violations> violations, seed <seed>`
//! and exit 1 when there is any violation (2 on a usage or I/O error).
mod check;
#[path = "../../tests/common/mod.rs"]
mod common;
mod history;
#[path = "../../tests/proxy/mod.rs"]
mod proxy;
mod workload;

fn main() {
    std::process::exit(match cli::main(std::env::args().skip(1).collect()) {
        Ok(0) => 0,
        Ok(_) => 1,
        Err(e) => {
            eprintln!("check-history: {e}");
            2
        }
    })
}

mod cli;
