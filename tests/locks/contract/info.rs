//! DLOCK.INFO: nil when free, RESP2 flat array, RESP3 map, ttl tracking
//! PTTL, and bad input.
use super::*;

// ---------------------------------------------------------------- INFO

#[test]
fn info_of_free_resource_is_nil() {
    let s = Server::start();
    let mut c = s.conn();
    let v: Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    assert_eq!(v, Value::Nil);
    let mut c3 = s.conn_resp3();
    let v: Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c3).unwrap();
    assert_eq!(v, Value::Nil);
    assert!(!exists(&mut c, b"res"));
}

/// Takes `res` with a 30 s lease and returns the raw `DLOCK.INFO` reply,
/// after checking what it decodes to.
fn fresh_lease_info(c: &mut redis::Connection) -> Value {
    let fence = acquire(c, b"res", b"tok", 30_000).unwrap();
    let v: Value = redis::cmd("DLOCK.INFO").arg("res").query(c).unwrap();
    let i = parse_info(v.clone()).unwrap();
    assert_eq!(i.token, b"tok");
    assert_eq!(i.fence, fence);
    assert!(i.ttl > 20_000 && i.ttl <= 30_000, "ttl {}", i.ttl);
    assert_eq!(i.waiters, 0);
    v
}

#[test]
fn info_resp2_is_a_flat_array() {
    let s = Server::start();
    let v = fresh_lease_info(&mut s.conn());
    let Value::Array(items) = &v else {
        panic!("RESP2 DLOCK.INFO must be an array, got {v:?}");
    };
    assert_eq!(items.len(), 8);
}

#[test]
fn info_resp3_is_a_map() {
    let s = Server::start();
    let v = fresh_lease_info(&mut s.conn_resp3());
    let Value::Map(pairs) = &v else {
        panic!("RESP3 DLOCK.INFO must be a map, got {v:?}");
    };
    assert_eq!(pairs.len(), 4);
}

#[test]
fn info_ttl_tracks_pttl_and_is_minus_one_after_persist() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", 30_000).unwrap();
    let before = pttl(&mut c, b"res");
    let i = info(&mut c, b"res").unwrap();
    let after = pttl(&mut c, b"res");
    assert!(
        i.ttl <= before && i.ttl >= after,
        "{before} {} {after}",
        i.ttl
    );
    let n: i64 = redis::cmd("PERSIST").arg("res").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert_eq!(pttl(&mut c, b"res"), -1);
    let i = info(&mut c, b"res").unwrap();
    assert_eq!(
        (i.token.as_slice(), i.fence, i.ttl),
        (&b"tok"[..], fence, -1)
    );
}

bad_input! {
    info_arity_no_arguments: ["DLOCK.INFO"] => arity_err("dlock.info");
    info_arity_extra_argument: ["DLOCK.INFO", "res", "x"] => arity_err("dlock.info");
}
