//! Handoffs that cannot happen now: a RELEASE that fails changes nothing,
//! and a free resource whose queue waits for its handoff is never shown as
//! free.
use super::*;
use common::dump::{payload_with_fence, restore};

fn stat(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_release_that_fails_changes_and_publishes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = hold(&mut c, "res", "holder");
    let w = Waiter::queue(&mut c, &s.url(), "res", "W", 1);
    // A lock restored from elsewhere pushes the fence clock to its ceiling:
    // no fence is left for the handoff.
    hold(&mut c, "tmpl", "t");
    let p = payload_with_fence(&mut c, "tmpl", i64::MAX);
    restore(&mut c, "maxed", 0, &p).unwrap();
    wait_until(SOON, "the fence clock at its ceiling", || {
        stat(&mut c, "last_fence") == i64::MAX
    });
    let mut sub = s.lock_events("res", Duration::from_millis(300));
    let releases = stat(&mut c, "releases");

    let e = try_release(&mut c, "res", "holder").unwrap_err();
    assert_eq!(
        err_text(&e),
        "ERR fence counter exhausted: no fence above 2^63-1"
    );
    let i = assert_owner(&mut c, "res", "holder", fence);
    assert_eq!(i.waiters, 1, "the head waiter stays queued");
    assert_eq!(stat(&mut c, "releases"), releases, "no release counted");
    assert!(next_lock_event(&mut sub).is_err(), "nothing published");
    w.assert_pending();
    assert_eq!(blocked_clients(&mut c), 1);

    // Freed with no fence left for the handoff: INFO still answers, and
    // shows the resource reserved for its queue.
    let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    assert_reserved(&raw_info(&mut c), 1);
}

#[test]
fn an_acquire_refused_for_its_token_hands_nothing_over() {
    // The lock was freed where no handoff could run yet (DEL); the queue's
    // handoff is pending. An ACQUIRE that is refused (a token too long to
    // queue) must not be the one that completes it. One pipeline, read and
    // run in one go before any timer: nothing else settles the queue there.
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let _w = Waiter::queue(&mut c, &s.url(), "res", "W", 1);
    let grants = stat(&mut c, "grants");
    let long = "x".repeat(600);
    let mut pipe = redis::pipe();
    pipe.cmd("DEL")
        .arg("res")
        .cmd("DLOCK.ACQUIRE")
        .arg(&["res", long.as_str(), "1000", "WAIT", "100"])
        .cmd("EXISTS")
        .arg("res")
        .cmd("INFO")
        .arg("dlock");
    c.send_packed_command(&pipe.get_packed_pipeline()).unwrap();
    let v: Vec<redis::RedisResult<Value>> = (0..4).map(|_| c.recv_response()).collect();
    let refused = match &v[1] {
        Err(e) => err_text(e),
        Ok(Value::ServerError(e)) => format!("{e:?}"),
        other => panic!("the ACQUIRE must be refused: {other:?}"),
    };
    assert!(refused.contains("longer than"), "{refused}");
    let v: Vec<Value> = v.into_iter().map(|r| r.unwrap_or(Value::Nil)).collect();
    assert_eq!(
        v[2],
        Value::Int(0),
        "nothing granted by the refused ACQUIRE"
    );
    let info = String::from_utf8(as_bytes(&v[3])).unwrap();
    assert!(
        info.contains(&format!("dlock_grants:{grants}\r\n")),
        "{info}"
    );
}

/// `DLOCK.INFO res` as a raw reply.
fn raw_info(c: &mut Connection) -> Value {
    redis::cmd("DLOCK.INFO").arg("res").query(c).unwrap()
}

/// The reply for a free resource reserved for its queue: a map with a nil
/// token, fence 0, ttl -2 and the queue length.
fn assert_reserved(v: &Value, waiters: i64) {
    let pairs: Vec<(String, Value)> = match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| (as_text(&kv[0]), kv[1].clone()))
            .collect(),
        Value::Map(kv) => kv.iter().map(|(k, v)| (as_text(k), v.clone())).collect(),
        other => panic!("expected a map, got {other:?}"),
    };
    assert_eq!(
        pairs,
        vec![
            ("token".to_string(), Value::Nil),
            ("fence".to_string(), Value::Int(0)),
            ("ttl".to_string(), Value::Int(-2)),
            ("waiters".to_string(), Value::Int(waiters)),
        ]
    );
}

fn as_text(v: &Value) -> String {
    String::from_utf8(as_bytes(v)).unwrap()
}

#[test]
fn info_never_shows_a_queued_resource_as_free_while_writes_are_paused() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c3 = s.conn_resp3();
    assert!(acquire(&mut c, "res", "holder", 300).is_some());
    let w = Waiter::queue(&mut c, &s.url(), "res", "W", 1);
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3_000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    // The lease ends while writes are held back: nobody can be granted yet.
    thread::sleep(Duration::from_millis(600));
    assert_reserved(&raw_info(&mut c), 1);
    assert_reserved(&raw_info(&mut c3), 1);
    assert_eq!(stat(&mut c, "waiters"), 1);
    w.assert_pending();
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut c).unwrap();
    let f = w.granted().fence();
    assert_owner(&mut c, "res", "W", f);
}

#[test]
fn client_unblock_error_counts_as_a_wait_timeout() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let before = stat(&mut c, "wait_timeouts");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    for (w, extra) in [(&a, None), (&b, Some("ERROR"))] {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("UNBLOCK").arg(w.id);
        if let Some(e) = extra {
            cmd.arg(e);
        }
        let n: i64 = cmd.query(&mut c).unwrap();
        assert_eq!(n, 1);
        w.outcome(SOON);
    }
    assert_eq!(stat(&mut c, "wait_timeouts"), before + 2);
    // A closed connection is not a timeout.
    let d = Waiter::queue(&mut c, &s.url(), "res", "D", 1);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(d.id)
        .query(&mut c)
        .unwrap();
    wait_blocked_clients(&mut c, 0);
    assert_eq!(stat(&mut c, "wait_timeouts"), before + 2);
}
