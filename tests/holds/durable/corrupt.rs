//! `RESTORE` of damaged multi-hold payloads (valid footer, so the bytes
//! reach the module's loader): truncated, a bad hold count, flipped bytes,
//! fields out of range. Each is refused with an error, nothing is stored,
//! and the server keeps running with its locks intact.
use super::kinds::Kinds;
use super::value::*;
use super::*;

/// `RESTORE` of `v` (a module value) must fail and store nothing.
fn must_refuse(c: &mut Connection, template: &[u8], v: &[u8], what: &str) {
    let r = restore(c, "bad", 0, &payload_with(template, v));
    ping(c);
    if r.is_ok() {
        panic!("{what}: accepted as {:?}", stored(c, "bad"));
    }
    assert!(!exists(c, "bad"), "{what}: stored");
}

/// `RESTORE` of `v` is refused, or stores a lock every command can read.
fn refused_or_sound(c: &mut Connection, template: &[u8], v: &[u8], what: &str) {
    let r = restore(c, "maybe", 0, &payload_with(template, v));
    ping(c);
    if r.is_ok() {
        let i: RedisResult<Value> = redis::cmd("DLOCK.INFO").arg("maybe").query(c);
        assert!(matches!(i, Ok(Value::Array(_))), "{what}: INFO {i:?}");
        let _: i64 = redis::cmd("DEL").arg("maybe").query(c).unwrap();
    } else {
        assert!(!exists(c, "maybe"), "{what}: stored");
    }
}

/// Offsets whose damage no decoder may accept.
fn structural(f: &Fields, shared: bool) -> Vec<usize> {
    let mut at = vec![8, LIMIT_AT + 2, LIMIT_AT + 3];
    if shared {
        // A limit above 1 with shared holds is a semaphore with modes.
        at.extend([LIMIT_AT, LIMIT_AT + 1]);
    }
    at.extend(COUNT_AT..COUNT_AT + 4);
    for i in 0..f.fence.len() {
        at.extend([f.fence[i] + 7, f.deadline[i] + 7, f.mode[i]]);
        at.extend(f.token_len[i]..f.token_len[i] + 4);
        at.extend(f.owner_len[i]..f.owner_len[i] + 4);
    }
    at
}

fn with_u32(v: &[u8], at: usize, n: u32) -> Vec<u8> {
    let mut b = v.to_vec();
    b[at..at + 4].copy_from_slice(&n.to_le_bytes());
    b
}

#[test]
fn restore_refuses_corrupt_multi_hold_payloads() {
    let s = Server::start();
    let mut c = s.conn();
    let k = Kinds::build(&mut c, "bad");
    let before = snapshots(&mut c, &k.keys());
    let keys_before = dbsize(&mut c);
    for key in [&k.shared, &k.sem] {
        let template = dump(&mut c, key);
        let good = module_bytes(&template);
        let (value, f) = decode(&good);
        assert_eq!(value, must_store(&mut c, key));
        let Stored::Multi { limit, holds } = &value else {
            panic!("{key}: {value:?}")
        };
        assert_eq!(encode(*limit, holds), good, "{key}: the test's encoder");
        // Untouched bytes, wrapped by the test, restore to the same value.
        restore(&mut c, "rewrapped", 0, &payload_with(&template, &good)).unwrap();
        assert_eq!(must_store(&mut c, "rewrapped"), value);
        let _: i64 = redis::cmd("DEL").arg("rewrapped").query(&mut c).unwrap();

        for n in 0..good.len() {
            must_refuse(&mut c, &template, &good[..n], &format!("{key} cut to {n}"));
        }
        let mut longer = good.clone();
        longer.push(0);
        must_refuse(&mut c, &template, &longer, &format!("{key} trailing byte"));
        let count = holds.len() as u32;
        for bad in [0, count - 1, count + 1, u32::MAX] {
            let v = with_u32(&good, COUNT_AT, bad);
            must_refuse(&mut c, &template, &v, &format!("{key} count {bad}"));
        }
        for bad in [0, (1 << 20) + 1, u32::MAX] {
            let v = with_u32(&good, LIMIT_AT, bad);
            must_refuse(&mut c, &template, &v, &format!("{key} limit {bad}"));
        }
        for version in [0, 2, 255] {
            let mut v = good.clone();
            v[8] = version;
            must_refuse(&mut c, &template, &v, &format!("{key} version {version}"));
        }
        let (tok_at, _) = f.token[0];
        let mut empty = with_u32(&good, f.token_len[0], 0);
        empty.drain(tok_at..tok_at + holds[0].token.len());
        must_refuse(&mut c, &template, &empty, &format!("{key} empty token"));

        let must = structural(&f, holds.iter().any(|h| h.shared));
        for i in 0..good.len() {
            let mut v = good.clone();
            v[i] ^= 0xff;
            let what = format!("{key} byte {i} flipped");
            if must.contains(&i) {
                must_refuse(&mut c, &template, &v, &what);
            } else {
                refused_or_sound(&mut c, &template, &v, &what);
            }
        }
    }
    // A semaphore never holds more permits than its limit, nor modes.
    let template = dump(&mut c, &k.sem);
    let mut holds = must_store(&mut c, &k.sem).holds().to_vec();
    let mut shared_permit = holds.clone();
    shared_permit[0].shared = true;
    must_refuse(
        &mut c,
        &template,
        &encode(3, &shared_permit),
        "a shared permit",
    );
    holds.push(Hold {
        token: b"p9".to_vec(),
        owner: b"p9".to_vec(),
        ..holds[0].clone()
    });
    must_refuse(&mut c, &template, &encode(2, &holds), "3 permits of 2");

    assert_eq!(dbsize(&mut c), keys_before, "nothing stored");
    assert_same("originals", &before, &snapshots(&mut c, &k.keys()));
    k.behave(&mut c);
    assert!(!s.log().contains("crashed"), "{}", s.log());
}

/// Values that decode but that no sequence of commands can make: they
/// break what every resource guarantees (one exclusive owner, one hold per
/// token, permits without owners), and their per-hold effects would not
/// rebuild them (an AOF rewrite without the preamble, a replica).
#[test]
fn restore_refuses_values_no_command_could_make() {
    let s = Server::start();
    let mut c = s.conn();
    take(&mut c, "t", "r1", 60_000, &["SHARED"]);
    let template = dump(&mut c, "t");
    let h = must_store(&mut c, "t").holds()[0].clone();
    let hold = |tok: &str, owner: &str, shared: bool| Hold {
        token: tok.as_bytes().to_vec(),
        owner: owner.as_bytes().to_vec(),
        shared,
        ..h.clone()
    };
    let cases: [(&str, u32, Vec<Hold>); 4] = [
        (
            "one token held twice",
            1,
            vec![hold("r1", "r1", true), hold("r1", "r1", true)],
        ),
        (
            "two exclusive owners",
            1,
            vec![hold("x", "X", false), hold("y", "Y", false)],
        ),
        (
            "a writer beside another owner's reader",
            1,
            vec![hold("x", "X", false), hold("y", "Y", true)],
        ),
        ("a permit with an owner", 3, vec![hold("p", "O", false)]),
    ];
    let mut accepted = Vec::new();
    for (what, limit, holds) in cases {
        let r = restore(
            &mut c,
            "odd",
            0,
            &payload_with(&template, &encode(limit, &holds)),
        );
        ping(&mut c);
        if r.is_ok() {
            accepted.push(format!("{what}: {:?}", list_info(&mut c, "odd")));
            let _: i64 = redis::cmd("DEL").arg("odd").query(&mut c).unwrap();
        }
    }
    assert!(accepted.is_empty(), "accepted:\n{}", accepted.join("\n"));
}
