//! One session with 100,000 holds, ended by `CLOSE`: every hold is released
//! and every queue served, while the server keeps answering other clients
//! (the release runs in bounded batches over later event-loop turns).
//! Nothing here is timed.
use super::*;

const HOLDS: usize = 100_000;
const CHUNK: usize = 10_000;

#[test]
fn a_session_with_100000_holds_is_released_by_close_while_others_are_served() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    open(&mut c, "big", 600_000);
    for start in (0..HOLDS).step_by(CHUNK) {
        let mut p = redis::pipe();
        for i in start..start + CHUNK {
            // Every fourth hold shared, to end more than one kind.
            let r = req(&format!("r{i}"), &format!("t{i}")).session("big");
            p.add_command(if i % 4 == 0 { r.shared() } else { r }.cmd());
        }
        let fences: Vec<i64> = p.query(&mut c).unwrap();
        assert_eq!(fences.len(), CHUNK);
    }
    let i = live(&mut c, "big");
    assert_eq!(i.holds, HOLDS as i64);
    assert_eq!(stat(&mut c, "session_holds"), HOLDS as i64);
    let (next, first) = holds_page(&mut c, "big", None, Some(3));
    assert!(next.is_some());
    assert_eq!(
        first,
        [
            bound(0, "r0", "t0"),
            bound(0, "r1", "t1"),
            bound(0, "r2", "t2")
        ]
    );
    // Queues on the first, a middle and the last resource.
    let watched = ["r0", "r50001", "r99999"];
    let waiters: Vec<Blocked> = watched
        .iter()
        .map(|res| {
            let w = req(res, "W").ttl("600000").wait(0).spawn(&s);
            wait_queued(&mut c, res, 1);
            w
        })
        .collect();

    // The command ends the session; its holds wait for later turns.
    let v = transaction(
        &mut c,
        &[session_cmd("CLOSE", &["big"]), {
            let mut info = redis::cmd("INFO");
            info.arg("dlock");
            info
        }],
    );
    assert_eq!(v[0], Value::Int(1));
    let info = text(&v[1]);
    let field = |name: &str| -> i64 {
        let prefix = format!("dlock_{name}:");
        let line = info.lines().find_map(|l| l.strip_prefix(&prefix));
        line.unwrap_or_else(|| panic!("no {prefix}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(field("sessions"), 0);
    assert_eq!(field("session_holds"), 0);
    assert_eq!(field("session_holds_ending"), HOLDS as i64);
    assert_eq!(session_info(&mut c, "big"), None, "ended in the command");

    // While the holds are released, other clients are served and the
    // session's holds go, never to come back.
    let mut other = s.conn();
    let mut pings = 0;
    let mut last_keys = i64::MAX;
    wait_until(Duration::from_secs(120), "every hold released", || {
        ping(&mut other);
        let f = req("elsewhere", "x").ttl("10000").grant(&mut other);
        assert!(f > 0);
        assert_eq!(release(&mut other, "elsewhere", "x"), 1);
        pings += 1;
        let keys = dbsize(&mut c);
        assert!(keys <= last_keys, "keys came back: {last_keys} -> {keys}");
        last_keys = keys;
        keys == watched.len() as i64
            && stat(&mut c, "session_holds") == 0
            && stat(&mut c, "session_holds_ending") == 0
    });
    assert!(pings > 0);
    for (res, w) in watched.iter().zip(&waiters) {
        let fence = w.granted();
        assert_eq!(shown(&mut c, res).hold("W").fence, fence, "{res}");
    }
    for res in ["r1", "r50000", "r99998"] {
        assert_eq!(shown(&mut c, res), Shown::Free, "{res}");
    }
    assert_eq!(stat(&mut c, "sessions"), 0);
    assert_eq!(stat(&mut c, "sessions_closed"), 1);
    ping(&mut c);
}
