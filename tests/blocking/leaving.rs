//! Leaving the queue: WAIT timeouts, disconnected and closed waiters,
//! CLIENT UNBLOCK, demotion to replica, and the key overwritten by a string.
use super::*;

#[test]
fn wait_times_out() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let mut w = s.conn();
    let t0 = Instant::now();
    let r = acquire_wait(&mut w, "res", "waiter", 10_000, 200).unwrap();
    let took = t0.elapsed();
    eprintln!("WAIT 200 timed out after {took:?}");
    assert_eq!(r, None, "WAIT 200 on a held lock must time out with nil");
    assert!(
        took >= Duration::from_millis(190),
        "timed out early: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "timed out late: {took:?}");
    let i = assert_owner(&mut c, "res", "holder", hf);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
    // The timed-out waiter is never granted later.
    assert_eq!(release(&mut c, "res", "holder"), 1);
    assert_eq!(info(&mut c, "res"), None);

    // Free lock: WAIT n and WAIT 0 grant at once.
    for (res, wait) in [("free1", 200), ("free2", 0), ("free3", 1 << 47)] {
        let t0 = Instant::now();
        let f = acquire_wait(&mut w, res, "tok", 10_000, wait)
            .unwrap()
            .unwrap_or_else(|| panic!("WAIT {wait} on a free lock must grant"));
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "WAIT {wait} on a free lock took {:?}",
            t0.elapsed()
        );
        let i = assert_owner(&mut c, res, "tok", f);
        assert!(i.ttl > 9_000 && i.ttl <= 10_000, "ttl {}", i.ttl);
        assert_eq!(i.waiters, 0);
    }
    assert_eq!(blocked_clients(&mut c), 0);
}

/// Every `WAIT` ends at its own time, whichever waits longer or left
/// first: a shorter one queued after a longer one, on another resource
/// too, and one queued after the earliest left.
#[test]
fn waits_end_each_at_its_own_time() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    hold(&mut c, "other", "holder");
    let t0 = Instant::now();
    let long = Waiter::start(&s.url(), "res", "long", 10_000, 3_000);
    wait_waiters(&mut c, "res", 1);
    let gone = Waiter::start(&s.url(), "other", "gone", 10_000, 300);
    wait_waiters(&mut c, "other", 1);
    let short = Waiter::start(&s.url(), "res", "short", 10_000, 600);
    wait_waiters(&mut c, "res", 2);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(gone.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert!(matches!(gone.outcome(SOON).reply, Ok(None)));
    let o = short.outcome(Duration::from_secs(5));
    let took = o.at - t0;
    assert!(matches!(o.reply, Ok(None)), "short: {:?}", o.reply);
    assert!(
        took >= Duration::from_millis(590) && took < Duration::from_millis(2_500),
        "WAIT 600 ended after {took:?}"
    );
    long.assert_pending();
    let o = long.outcome(Duration::from_secs(10));
    let took = o.at - t0;
    assert!(matches!(o.reply, Ok(None)), "long: {:?}", o.reply);
    assert!(
        took >= Duration::from_millis(2_990) && took < Duration::from_secs(6),
        "WAIT 3000 ended after {took:?}"
    );
    assert_eq!(blocked_clients(&mut c), 0);
}

// ---------------------------------------------------------------- leaving the queue

#[test]
fn disconnected_waiter_is_skipped() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    assert_eq!(blocked_clients(&mut c), 2);
    let n: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(a.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    wait_waiters(&mut c, "res", 1);
    let oa = a.outcome(SOON);
    assert!(oa.reply.is_err(), "killed waiter got {:?}", oa.reply);
    wait_blocked_clients(&mut c, 1);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let fb = b.granted().fence();
    assert!(fb > hf);
    let i = assert_owner(&mut c, "res", "B", fb);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

/// RESP for one command, for clients that just vanish.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

#[test]
fn closed_waiter_connection_is_skipped() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    // A raw client queues (WAIT 0: forever), then closes its socket.
    let mut raw = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    raw.write_all(&resp(&[
        "DLOCK.ACQUIRE",
        "res",
        "gone",
        "10000",
        "WAIT",
        "0",
    ]))
    .unwrap();
    wait_waiters(&mut c, "res", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    drop(raw);
    wait_waiters(&mut c, "res", 1);
    wait_blocked_clients(&mut c, 1);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let fb = b.granted().fence();
    assert_owner(&mut c, "res", "B", fb);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn client_unblock_gives_nil_and_leaves_queue() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(a.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1, "CLIENT UNBLOCK must find the blocked waiter");
    let oa = a.outcome(SOON);
    assert!(
        matches!(oa.reply, Ok(None)),
        "CLIENT UNBLOCK (TIMEOUT) must reply nil, got {:?}",
        oa.reply
    );
    assert_eq!(waiters(&mut c, "res"), 0);
    assert_eq!(blocked_clients(&mut c), 0);
    // A never gets the lock: after the release nobody owns it.
    assert_eq!(release(&mut c, "res", "holder"), 1);
    assert_eq!(info(&mut c, "res"), None);
    // Its connection still works.
    let mut ca = oa.conn.expect("connection kept");
    let pong: String = redis::cmd("PING").query(&mut ca).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn client_unblock_error_gives_unblocked_error() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(a.id)
        .arg("ERROR")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let e = a.outcome(SOON).error();
    assert!(e.starts_with("UNBLOCKED"), "error reply {e:?}");
    wait_waiters(&mut c, "res", 1);
    assert_eq!(blocked_clients(&mut c), 1);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let fb = b.granted().fence();
    assert_owner(&mut c, "res", "B", fb);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn demotion_to_replica_errors_waiters() {
    let other = Server::start();
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    hold(&mut c, "res2", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let d = Waiter::queue(&mut c, &s.url(), "res2", "D", 1);
    assert_eq!(blocked_clients(&mut c), 3);
    // The master stays frozen, so the sync never starts: the demoted server
    // keeps its own dataset (stale data is served), and the queue counts below
    // show the waiters were removed, not that a full sync replaced the keys
    // (a server loading that sync would answer -LOADING instead).
    other.stop();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port())
        .query(&mut c)
        .unwrap();
    // Every waiter gets an error reply (none is granted or left hanging).
    let errors: Vec<String> = [&a, &b, &d]
        .iter()
        .map(|w| format!("{}: {}", w.tok, w.outcome(SOON).error()))
        .collect();
    eprintln!("errors after REPLICAOF: {errors:?}");
    wait_blocked_clients(&mut c, 0);
    assert_eq!(waiters(&mut c, "res"), 0);
    assert_eq!(waiters(&mut c, "res2"), 0);
    assert_eq!(held(&mut c, "res").token, b"holder", "the dataset was kept");
    // Redis 7.0 itself unblocks every blocked client when it turns into a
    // replica, before modules hear of the role change, with an error that
    // tells the client to retry elsewhere (docs/waiting.md#what-ends-a-wait).
    for e in &errors {
        let text = e.split_once(": ").unwrap().1;
        assert!(
            text.starts_with(
                "UNBLOCKED force unblock from blocking operation, instance state changed"
            ),
            "waiter {e:?}"
        );
    }
    other.cont();
}

#[test]
fn overwritten_with_string_gives_wrongtype() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let _: () = redis::cmd("SET").arg("res").arg("x").query(&mut c).unwrap();
    for w in [&a, &b] {
        let e = w.outcome(SOON).error();
        assert_eq!(e, WRONGTYPE_ERR, "waiter {}", w.tok);
    }
    wait_blocked_clients(&mut c, 0);
    let v: String = redis::cmd("GET").arg("res").query(&mut c).unwrap();
    assert_eq!(v, "x", "the string must be untouched");
}
