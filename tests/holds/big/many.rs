//! Many resources at once, where the server queues one deferred job per
//! resource, so what each costs must not grow with their number:
//! - a dataset load of semaphores holding permits with a ttl queues one look
//!   at each (its hold guard, `hold_guards`): a queue scanned on every push
//!   made each of 100,000 resources cost 11x what each of 12,500 did;
//! - `FLUSHALL` and `SWAPDB` queue one hand-over (`Settle`) per resource
//!   with waiters: a runner that scanned the ones it had done made each of
//!   25,600 resources cost 9x what each of 3,200 did. Each waiter is one
//!   client waiting for a 64-member set (`DLOCK.MACQUIRE`), so a few hundred
//!   connections make tens of thousands of waiting resources.
use super::*;

/// Two permits each on `s<from>` .. `s<to - 1>`, pipelined.
fn fill_resources(c: &mut Connection, from: usize, to: usize) {
    for start in (from..to).step_by(BATCH) {
        let mut p = redis::pipe();
        for i in start..(start + BATCH).min(to) {
            for tok in ["a", "b"] {
                p.cmd("DLOCK.ACQUIRE")
                    .arg(format!("s{i}"))
                    .arg(tok)
                    .arg(BASE_TTL_MS)
                    .arg("LIMIT")
                    .arg(5);
            }
        }
        let fences: Vec<Option<i64>> = p.query(c).unwrap();
        assert!(fences.iter().all(Option::is_some), "a permit was refused");
    }
}

/// The fastest of two `DEBUG RELOAD`s, in seconds per resource.
fn reload_secs_per_resource(c: &mut Connection, resources: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..2 {
        let t = Instant::now();
        let _: () = redis::cmd("DEBUG").arg("RELOAD").query(c).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    let dbsize: usize = redis::cmd("DBSIZE").query(c).unwrap();
    assert_eq!(dbsize, resources, "resources after DEBUG RELOAD");
    best / resources as f64
}

#[test]
fn loading_many_semaphores_costs_the_same_per_resource_at_any_count() {
    let _quiet = crate::quiet();
    let (small, large) = (12_500, 100_000);
    let s = Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("off")
        .start();
    let mut c = big_conn(&s, 2 * large);
    fill_resources(&mut c, 0, small);
    let per_small = reload_secs_per_resource(&mut c, small);
    fill_resources(&mut c, small, large);
    let per_large = reload_secs_per_resource(&mut c, large);
    let growth = per_large / per_small;
    eprintln!(
        "DEBUG RELOAD per resource: {:.1} µs at {small}, {:.1} µs at {large} ({growth:.2}x)",
        per_small * 1e6,
        per_large * 1e6
    );
    // Linear: about 1x. A cost per resource that grows with their number
    // (quadratic in all) measured 11x here.
    assert!(
        growth < 3.0,
        "a load costs {growth:.2}x more per resource at {large} than at {small}"
    );
    // The holds are whole: each permit releases once.
    let last = format!("s{}", large - 1);
    for tok in ["a", "b"] {
        let released: i64 = redis::cmd("DLOCK.RELEASE")
            .arg(&last)
            .arg(tok)
            .query(&mut c)
            .unwrap();
        assert_eq!(released, 1, "{last}: permit {tok}");
    }
    assert!(
        !exists(&mut c, last.as_str()),
        "{last} with no permits left"
    );
}

const MEMBERS: usize = 64;

fn members(set: usize) -> Vec<String> {
    (0..MEMBERS).map(|m| format!("k{set}.{m}")).collect()
}

fn macquire(keys: &[String], token: &str, wait: bool) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.MACQUIRE");
    cmd.arg(keys.len()).arg(keys).arg(token).arg(600_000);
    if wait {
        cmd.arg("WAIT").arg(600_000);
    }
    cmd
}

/// `sets` sets of 64 resources, each held by `h` and waited for by a
/// client of its own: the waiting connections.
fn waiting_sets(s: &Server, c: &mut Connection, sets: usize) -> Vec<Connection> {
    let mut p = redis::pipe();
    for set in 0..sets {
        p.add_command(macquire(&members(set), "h", false));
    }
    let fences: Vec<Option<i64>> = p.query(c).unwrap();
    assert!(fences.iter().all(Option::is_some), "a set was refused");
    let waiters: Vec<Connection> = (0..sets)
        .map(|set| {
            let mut w = s.conn();
            w.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            let cmd = macquire(&members(set), &format!("w{set}"), true);
            w.send_packed_command(&cmd.get_packed_command()).unwrap();
            w
        })
        .collect();
    wait_until(Duration::from_secs(30), "every waiter blocked", || {
        info_field(c, "clients", "blocked_clients").as_deref() == Some(&sets.to_string())
    });
    waiters
}

/// Seconds per resource that `event` keeps the server busy (the command
/// and the jobs it queued, up to the next answered `PING`), with `sets`
/// waiting sets; every waiter must be granted afterwards.
fn secs_per_resource(sets: usize, event: &[&str]) -> f64 {
    let s = Server::start();
    let mut c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let waiters = waiting_sets(&s, &mut c, sets);
    let t = Instant::now();
    let _: redis::Value = redis::cmd(event[0]).arg(&event[1..]).query(&mut c).unwrap();
    ping(&mut c);
    let secs = t.elapsed().as_secs_f64();
    for (set, mut w) in waiters.into_iter().enumerate() {
        let fence: Option<i64> = redis::from_redis_value(&w.recv_response().unwrap()).unwrap();
        assert!(fence.is_some(), "set {set} was not granted after {event:?}");
    }
    secs / (sets * MEMBERS) as f64
}

fn costs_the_same_per_resource(event: &[&str]) {
    let (small, large) = (50, 400);
    let per_small = secs_per_resource(small, event);
    let per_large = secs_per_resource(large, event);
    let growth = per_large / per_small;
    eprintln!(
        "{event:?} per waiting resource: {:.1} µs at {}, {:.1} µs at {} ({growth:.2}x)",
        per_small * 1e6,
        small * MEMBERS,
        per_large * 1e6,
        large * MEMBERS
    );
    assert!(
        growth < 3.0,
        "{event:?} costs {growth:.2}x more per waiting resource at {} than at {}",
        large * MEMBERS,
        small * MEMBERS
    );
}

#[test]
fn a_flush_costs_the_same_per_waiting_resource_at_any_count() {
    let _quiet = crate::quiet();
    costs_the_same_per_resource(&["FLUSHALL"]);
}

#[test]
fn a_swap_costs_the_same_per_waiting_resource_at_any_count() {
    let _quiet = crate::quiet();
    costs_the_same_per_resource(&["SWAPDB", "0", "1"]);
}
