//! CPU placement: with two or more cores, the server's main thread gets
//! core 0 and everything else (this load generator, redis-benchmark, the
//! server's fsync and rewrite threads) core 1, so the scheduler never puts
//! client and server on the same core for a while and a run measures the
//! server's work per command. Both sides of every comparison are placed
//! the same way. `DLOCK_BENCH_PIN=0` turns it off.

use std::sync::OnceLock;

/// Core of the server's main thread; unset when not pinning.
static SERVER_CORE: OnceLock<usize> = OnceLock::new();

/// Pins this process (and so every child it starts) to core 1; returns a
/// description for the report.
pub fn setup() -> String {
    // SAFETY: sysconf has no preconditions.
    let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let wanted = std::env::var("DLOCK_BENCH_PIN").map_or(true, |v| v != "0");
    if !wanted || cores < 2 {
        return "no CPU pinning".into();
    }
    // SAFETY: cpu_set_t is plain data; sched_setaffinity(0) is this thread,
    // and the bench is single-threaded at this point.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(1, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !ok {
        return "no CPU pinning (sched_setaffinity failed)".into();
    }
    let _ = SERVER_CORE.set(0);
    "server main thread on core 0; load generator, redis-benchmark and the server's \
     background threads on core 1"
        .into()
}

/// `redis-server` arguments that place its threads; empty when not pinning.
pub fn server_args() -> Vec<String> {
    match SERVER_CORE.get() {
        Some(core) => vec![
            "--server_cpulist".into(),
            core.to_string(),
            "--bio_cpulist".into(),
            "1".into(),
            "--aof_rewrite_cpulist".into(),
            "1".into(),
            "--bgsave_cpulist".into(),
            "1".into(),
        ],
        None => Vec::new(),
    }
}
