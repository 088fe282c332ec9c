//! A restart quarantine refuses every new hold: a reentrant hold, an
//! upgrade, a downgrade, an extra permit, a new reader. Only same-token
//! retries and `EXTEND` pass; a new owner with `WAIT` waits it out.
use super::*;

const TTL: u64 = 120_000;
/// Long enough for every check below on a loaded machine.
const QUARANTINE_MS: u64 = 10_000;
const REFUSED: &str = "QUARANTINE dlock: new grants are refused for ";
const REFUSED_END: &str =
    " ms more after a restart or failover that may have lost acknowledged grants";

fn ms_left(c: &mut Connection) -> u64 {
    info_field(c, "dlock", "dlock_quarantine_ms_left")
        .expect("dlock_quarantine_ms_left")
        .parse()
        .unwrap()
}

fn assert_quarantined(c: &mut Connection, a: &Acq) {
    let t = Instant::now();
    let e = a.error(c);
    assert!(
        e.starts_with(REFUSED) && e.ends_with(REFUSED_END),
        "{a:?}: {e}"
    );
    assert!(t.elapsed() < SOON, "{a:?} waited");
}

#[test]
fn quarantine_refuses_new_holds_and_passes_retries_and_extend() {
    let mut s = Server::builder()
        .aof("everysec")
        .arg("--dlock.restart-quarantine")
        .arg(QUARANTINE_MS.to_string())
        .start();
    let mut c = s.conn();
    let fa = acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    let fe = acq("ex", "e1", TTL).owner("A").grant(&mut c);
    let fp = acq("sem", "p1", TTL).limit(3).grant(&mut c);
    let fr = acq("ro", "r1", TTL).shared().grant(&mut c);
    let keys = ["rw", "ex", "sem", "ro"];
    let before: Vec<Holds> = keys.iter().map(|k| holds(&mut c, k)).collect();
    // everysec: on disk within a second, so the holds survive the crash.
    thread::sleep(Duration::from_millis(1200));
    let mut c = s.crash_and_restart();
    let left = ms_left(&mut c);
    assert!(
        left > 0 && left <= QUARANTINE_MS,
        "quarantine left {left} ms"
    );
    for (k, b) in keys.iter().zip(&before) {
        b.assert_same(&holds(&mut c, k));
    }

    // Every new hold is refused, with WAIT too.
    let refused = [
        acq("rw", "a2", TTL).shared().owner("A"),
        acq("rw", "a2", TTL).shared().owner("A").wait(30_000),
        acq("rw", "a3", TTL).owner("A"),
        acq("ex", "e2", TTL).shared().owner("A"),
        acq("ex", "e2", TTL).owner("A").wait(30_000),
        acq("sem", "p2", TTL).limit(3),
        acq("ro", "r2", TTL).shared(),
    ];
    for a in &refused {
        assert_quarantined(&mut c, a);
    }
    // Same-token retries and EXTEND pass.
    assert_eq!(acq("rw", "a1", TTL).shared().owner("A").grant(&mut c), fa);
    assert_eq!(acq("ex", "e1", TTL).owner("A").grant(&mut c), fe);
    assert_eq!(acq("sem", "p1", TTL).limit(3).grant(&mut c), fp);
    for (k, t) in [("rw", "a1"), ("ex", "e1"), ("sem", "p1"), ("ro", "r1")] {
        assert_eq!(extend(&mut c, k, t, TTL), 1, "EXTEND {k} {t}");
    }
    for (k, b) in keys.iter().zip(&before) {
        assert_eq!(holds(&mut c, k).tokens(), b.tokens(), "{k} changed");
    }
    // A new owner with WAIT waits the quarantine out in the queue.
    let r3 = acq("ro", "r3", TTL).shared().wait(60_000).spawn(&s.url());
    wait_queue(&mut c, "ro", 1);
    assert!(ms_left(&mut c) > 0, "the checks ran past the quarantine");

    wait_until(
        Duration::from_millis(QUARANTINE_MS) + SOON,
        "the quarantine to end",
        || ms_left(&mut c) == 0,
    );
    let (f3, ..) = r3.granted();
    assert!(f3 > fr);
    // The same requests now pass: nothing else stood in their way.
    assert_eq!(acq("rw", "a2", TTL).shared().owner("A").grant(&mut c), fa);
    assert_eq!(acq("rw", "a3", TTL).owner("A").grant(&mut c), fa);
    assert_eq!(acq("ex", "e2", TTL).shared().owner("A").grant(&mut c), fe);
    assert!(acq("sem", "p2", TTL).limit(3).grant(&mut c) > fp);
    assert!(acq("ro", "r2", TTL).shared().grant(&mut c) > f3);
}
