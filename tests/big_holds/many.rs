//! Many resources, each a semaphore holding two permits with a ttl: a
//! dataset load queues one look at each (its hold guard, `hold_guards`), so
//! what a load costs per resource must not grow with their number. A queue
//! scanned on every push made each of 100,000 resources cost 11x what each
//! of 12,500 did.
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
