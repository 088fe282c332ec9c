//! `DUMP`/`RESTORE` and `MIGRATE` between a node of this build and a node
//! of the previous release, both ways.
use super::*;

/// `DUMP` on `from`, `RESTORE ... ABSTTL` on `to` with the key's absolute
/// deadline, for every kind.
fn dump_restore(from: &mut Connection, to: &mut Connection, what: &str) {
    for key in keys() {
        let payload = dump(from, &key);
        let at: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(from).unwrap();
        let r: redis::RedisResult<()> = redis::cmd("RESTORE")
            .arg(&key)
            .arg(at)
            .arg(&payload)
            .arg("ABSTTL")
            .query(to);
        if let Err(e) = r {
            panic!("{what}: RESTORE {key}: {}", err_text(&e));
        }
    }
}

#[test]
fn dump_and_restore_go_both_ways() {
    let (main, old) = (current().start(), previous().start());
    let (mut c, mut oc) = (main.conn(), old.conn());
    make_kinds(&mut c, "dump");
    let want = snapshots(&mut c);

    dump_restore(&mut c, &mut oc, "this build -> previous release");
    assert_same(
        "restored by the previous release",
        &want,
        &snapshots(&mut oc),
    );
    still_held(&mut oc, &want);

    let _: i64 = redis::cmd("DEL").arg(keys()).query(&mut c).unwrap();
    dump_restore(&mut oc, &mut c, "previous release -> this build");
    assert_same("restored back", &want, &snapshots(&mut c));
    still_held(&mut c, &want);
    fresh_grant_above(&mut c, &want, "back");
}

/// `MIGRATE ... KEYS` from `from` to `to`. It sends each key's TTL as
/// relative time, so a key's own deadline may land up to the command's
/// duration later; every other field, every hold's deadline included, is
/// exact.
fn migrate(from: &Server, to: &Server, want: &[Snapshot], what: &str) {
    let mut fc = from.conn();
    let t0 = now_ms();
    let r: redis::RedisResult<String> = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(to.port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(keys())
        .query(&mut fc);
    match r {
        Ok(ok) => assert_eq!(ok, "OK", "{what}"),
        Err(e) => panic!("{what}: MIGRATE: {}", err_text(&e)),
    }
    let elapsed = now_ms() - t0 + 1;
    for key in keys() {
        assert!(!exists(&mut fc, &key), "{what}: {key} left behind");
    }
    let got = snapshots(&mut to.conn());
    for (x, y) in want.iter().zip(&got) {
        assert_eq!((&x.key, &x.value), (&y.key, &y.value), "{what}");
        let late = y.expires_at - x.expires_at;
        assert!(
            (0..=elapsed).contains(&late),
            "{what}: {}: key deadline {late} ms later",
            x.key
        );
    }
    still_held(&mut to.conn(), want);
}

#[test]
fn migrate_goes_both_ways() {
    let (main, old) = (current().start(), previous().start());
    let mut c = main.conn();
    make_kinds(&mut c, "migrate");
    let want = snapshots(&mut c);
    migrate(&main, &old, &want, "this build -> previous release");
    let moved = snapshots(&mut old.conn());
    migrate(&old, &main, &moved, "previous release -> this build");
    fresh_grant_above(&mut c, &want, "back");
}
