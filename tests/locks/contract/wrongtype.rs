//! WRONGTYPE for every command against keys of other types, with the key
//! left untouched.
use super::*;

// ---------------------------------------------------------------- WRONGTYPE

/// A string key with a TTL; `args` must fail with WRONGTYPE and leave it.
fn check_wrongtype_string(args: &[&[u8]]) {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("v")
        .arg("PX")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let before = pttl(&mut c, b"s");
    assert_eq!(expect_err(&mut c, args), WRONGTYPE_ERR, "{:?}", show(args));
    let v: Option<String> = redis::cmd("GET").arg("s").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("v"));
    let t: String = redis::cmd("TYPE").arg("s").query(&mut c).unwrap();
    assert_eq!(t, "string");
    let after = pttl(&mut c, b"s");
    assert!(
        after > 0 && after <= before && after > before - 20_000,
        "string TTL changed: {before} -> {after}"
    );
}

/// A list key without TTL; `args` must fail with WRONGTYPE and leave it.
fn check_wrongtype_list(args: &[&[u8]]) {
    let s = Server::start();
    let mut c = s.conn();
    let _: i64 = redis::cmd("RPUSH")
        .arg("s")
        .arg("a")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(expect_err(&mut c, args), WRONGTYPE_ERR, "{:?}", show(args));
    let v: Vec<String> = redis::cmd("LRANGE")
        .arg("s")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, vec!["a", "b"]);
    assert_eq!(pttl(&mut c, b"s"), -1);
}

#[test]
fn wrongtype_acquire_on_string() {
    check_wrongtype_string(&[b"DLOCK.ACQUIRE", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_release_on_string() {
    check_wrongtype_string(&[b"DLOCK.RELEASE", b"s", b"tok"]);
}

#[test]
fn wrongtype_extend_on_string() {
    check_wrongtype_string(&[b"DLOCK.EXTEND", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_info_on_string() {
    check_wrongtype_string(&[b"DLOCK.INFO", b"s"]);
}

#[test]
fn wrongtype_acquire_on_list() {
    check_wrongtype_list(&[b"DLOCK.ACQUIRE", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_release_on_list() {
    check_wrongtype_list(&[b"DLOCK.RELEASE", b"s", b"tok"]);
}

#[test]
fn wrongtype_extend_on_list() {
    check_wrongtype_list(&[b"DLOCK.EXTEND", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_info_on_list() {
    check_wrongtype_list(&[b"DLOCK.INFO", b"s"]);
}
