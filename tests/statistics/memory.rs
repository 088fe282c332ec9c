//! The statistics' memory is fixed: 1,000,000 distinct resources, each
//! granted, contended and released, leave `DLOCK.STATS`'s own figure
//! unchanged and `used_memory` where 10,000 left it.
use super::*;
use crate::quiet;

/// Resources per pipeline.
const BATCH: usize = 10_000;

fn round(c: &mut Connection, from: usize) {
    let mut p = redis::pipe();
    for i in from..from + BATCH {
        let name = format!("res:{i}");
        p.cmd("DLOCK.ACQUIRE")
            .arg(&name)
            .arg("a")
            .arg(60_000)
            .ignore();
        p.cmd("DLOCK.ACQUIRE")
            .arg(&name)
            .arg("b")
            .arg(60_000)
            .ignore();
        p.cmd("DLOCK.RELEASE").arg(&name).arg("a").ignore();
    }
    let () = p.query(c).unwrap();
}

#[test]
fn a_million_resources_leave_the_memory_where_it_was() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    round(&mut c, 0);
    let memory = as_int(&stats(&mut c)["memory"]);
    let used = used_memory_purged(&mut c);
    for r in 1..100 {
        round(&mut c, r * BATCH);
    }
    let st = stats(&mut c);
    assert_eq!(figure(&st, "total", "grants"), 1_000_000);
    assert_eq!(figure(&st, "total", "contended"), 1_000_000);
    assert_eq!(as_int(&st["memory"]), memory);
    assert_eq!(hot(&mut c, "contended", 32).len(), 32);
    let grown = used_memory_purged(&mut c) - used;
    assert!(grown < 64 * 1024, "used_memory grew {grown} bytes");
}
