//! The edges: the largest `LIMIT` (2^20, `core/src/limits.rs`) accepted,
//! filled and kept by `DEBUG RELOAD` and `DUMP`/`RESTORE`; and a value
//! longer than `proto-max-bulk-len`, which bounds every argument a client
//! sends. The AOF loader reads a rewritten `DLOCK.SETHOLDS` of any length,
//! but `RESTORE` (and `MIGRATE`, which sends one) of a longer payload is
//! refused by the receiving server's protocol parser: the key must then stay
//! where it was, whole.
use super::moves::migrate;
use super::persist::{aof_raw, crash_restart};
use super::*;

const MAX_LIMIT: u32 = 1 << 20;
/// The smallest `proto-max-bulk-len` a server accepts (1mb).
const BULK_LIMIT: usize = 1 << 20;
/// `MIGRATE`'s error when the target refused the payload's length...
const MIGRATE_REFUSED: &str =
    "ERR Target instance replied with error: ERR Protocol error: invalid bulk length";
/// ...or closed the connection while the source was still sending it.
const MIGRATE_CUT: &str = "IOERR error or timeout writing to target instance";

#[test]
fn the_largest_limit_is_accepted_filled_and_kept() {
    let _quiet = crate::quiet();
    let n = holds_n().min(MAX_LIMIT as usize);
    let s = Server::start();
    let mut c = big_conn(&s, n);
    let key = "max:sem";
    let over = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg("p")
        .arg(60_000)
        .arg("LIMIT")
        .arg(MAX_LIMIT + 1)
        .query::<Option<i64>>(&mut c)
        .unwrap_err();
    assert_eq!(
        err_text(&over),
        "ERR LIMIT must be an integer from 1 to 1048576"
    );
    assert!(!exists(&mut c, key), "a refused LIMIT stored nothing");

    let sem = Resource::fill(&mut c, key, MAX_LIMIT, false, &tokens("permit", n));
    sem.check(&mut c, "LIMIT 2^20", 0);
    let before = vec![snap(&mut c, key)];
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    same("DEBUG RELOAD", &before, &[snap(&mut c, key)], 0);
    let copy = "max:sem:restored";
    let payload = dump(&mut c, key);
    let at = pexpiretime(&mut c, key);
    let _: () = redis::cmd("RESTORE")
        .arg(copy)
        .arg(at)
        .arg(&payload)
        .arg("ABSTTL")
        .query(&mut c)
        .unwrap();
    let restored = Snap {
        key: key.to_string(),
        ..snap(&mut c, copy)
    };
    same("RESTORE", &before, &[restored], 0);

    // Usable: permits while any is free, every other LIMIT refused.
    let one_more = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg("one-more")
        .arg(60_000)
        .arg("LIMIT")
        .arg(MAX_LIMIT)
        .query::<Option<i64>>(&mut c)
        .unwrap();
    assert_eq!(one_more.is_some(), n < MAX_LIMIT as usize, "{one_more:?}");
    let other = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg("x")
        .arg(60_000)
        .arg("LIMIT")
        .arg(1000)
        .query::<Option<i64>>(&mut c)
        .unwrap_err();
    assert_eq!(
        err_text(&other),
        "ERR the resource is held with LIMIT 1048576: requests must ask for the same LIMIT"
    );
}

/// `n` distinct tokens of `len` printable bytes that LZF cannot shrink
/// much (an xorshift stream over 94 symbols: few repeats in its window), so
/// a `DUMP` payload is about as long as the value.
fn random_tokens(n: usize, len: usize) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|i| {
            let mut t = format!("{i:07}-").into_bytes();
            while t.len() < len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                t.push(b'!' + (x % 94) as u8);
            }
            t
        })
        .collect()
}

fn bulk_limited() -> redis::Cmd {
    let mut c = redis::cmd("CONFIG");
    c.arg("SET").arg("proto-max-bulk-len").arg(BULK_LIMIT);
    c
}

#[test]
fn a_value_over_proto_max_bulk_len_loads_from_the_aof_but_never_moves() {
    let _quiet = crate::quiet();
    // 16 to 4096 holds: the size comes from the tokens, the count
    // matters little here.
    let n = holds_n().clamp(16, 4096);
    let len = (BULK_LIMIT * 3 / 2).div_ceil(n).max(32);
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .arg("--auto-aof-rewrite-percentage")
        .arg("0")
        .arg("--proto-max-bulk-len")
        .arg(BULK_LIMIT.to_string())
        .module_arg("max-token-length")
        .module_arg("1048576")
        .start();
    let mut c = big_conn(&s, n);
    let key = "wide:sem";
    let sem = Resource::fill(&mut c, key, n as u32, false, &random_tokens(n, len));
    let before = vec![snap(&mut c, key)];

    rewrite_aof(&mut c);
    let cmds = aof_raw(&s, ".base.aof");
    let set = cmds
        .iter()
        .find(|c| c[0] == b"DLOCK.SETHOLDS" && c[1] == key.as_bytes())
        .expect("a DLOCK.SETHOLDS");
    eprintln!("DLOCK.SETHOLDS value: {} bytes", set[2].len());
    assert!(set[2].len() > BULK_LIMIT, "the value fits the limit");
    let mut c = crash_restart(&mut s, n, "SETHOLDS over proto-max-bulk-len");
    same(
        "AOF over proto-max-bulk-len",
        &before,
        &[snap(&mut c, key)],
        0,
    );
    sem.check(&mut c, "AOF over proto-max-bulk-len", 0);

    let payload = dump(&mut c, key);
    eprintln!("DUMP payload: {} bytes", payload.len());
    assert!(payload.len() > BULK_LIMIT, "the payload fits the limit");
    // The server closes a connection that sends a longer argument.
    let mut once = big_conn(&s, n);
    let r = restore(&mut once, "wide:copy", 0, &payload);
    eprintln!("RESTORE of {} bytes: {r:?}", payload.len());
    match r {
        // Closed before it had read the whole payload.
        Err(e) if e.is_io_error() => eprintln!("RESTORE: the connection ended: {e}"),
        Err(e) => assert_eq!(err_text(&e), "ERR Protocol error: invalid bulk length"),
        Ok(()) => panic!("RESTORE of {} bytes over proto-max-bulk-len", payload.len()),
    }
    assert!(!exists(&mut c, "wide:copy"));

    // MIGRATE to a server with the same limit fails and keeps the key; to
    // one with the default limit it moves it whole.
    let narrow = Server::start();
    let _: () = bulk_limited().query(&mut narrow.conn()).unwrap();
    let r = migrate(&mut c, &narrow, &[], &[key.to_string()], n);
    let refused = r.map_err(|e| err_text(&e)).unwrap_err();
    assert!(
        [MIGRATE_REFUSED, MIGRATE_CUT].contains(&refused.as_str()),
        "MIGRATE over proto-max-bulk-len: {refused}"
    );
    same(
        "the source after a failed MIGRATE",
        &before,
        &[snap(&mut c, key)],
        0,
    );
    assert_eq!(dbsize(&mut narrow.conn()), 0, "the target stored something");
    let wide = Server::start();
    let t0 = now_ms();
    assert_eq!(
        migrate(&mut c, &wide, &[], &[key.to_string()], n).unwrap(),
        "OK"
    );
    let slack = now_ms() - t0 + 1;
    assert!(!exists(&mut c, key), "moved");
    let mut w = big_conn(&wide, n);
    same(
        "MIGRATE to the default limit",
        &before,
        &[snap(&mut w, key)],
        slack,
    );
    sem.check(&mut w, "MIGRATE to the default limit", slack);
}
