//! RDB and AOF files written by this build load in the previous release,
//! and the files it writes then load here again.
use super::*;

fn save(c: &mut Connection) {
    let _: () = redis::cmd("SAVE").query(c).expect("SAVE");
}

/// An RDB of every kind (values and aux data with no quarantine running):
/// this build -> previous release -> this build, exactly.
#[test]
fn an_rdb_goes_to_the_previous_release_and_back() {
    let main = current().start();
    let mut c = main.conn();
    make_kinds(&mut c, "rdb");
    let want = snapshots(&mut c);
    save(&mut c);

    let old = previous().with_data_from(main.dir()).start();
    let mut oc = old.conn();
    assert_same("loaded by the previous release", &want, &snapshots(&mut oc));
    assert_eq!(longest_ttl(&mut oc), longest_ttl(&mut c), "aux data");
    still_held(&mut oc, &want);
    fresh_grant_above(&mut oc, &want, "previous release");
    save(&mut oc);

    let back = current().with_data_from(old.dir()).start();
    let mut bc = back.conn();
    assert_same("back in this build", &want, &snapshots(&mut bc));
    still_held(&mut bc, &want);
    fresh_grant_above(&mut bc, &want, "back");
}

/// The quarantine `server` runs: its reason and the milliseconds left.
fn quarantine(c: &mut Connection) -> (String, i64) {
    let reason = info_field(c, "dlock", "dlock_quarantine_reason").unwrap_or_default();
    let left = info_field(c, "dlock", "dlock_quarantine_ms_left")
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1);
    (reason, left)
}

/// With a restart quarantine running, the RDB carries its end, marked
/// inside the aux data: the previous release (0.3.0, which knows the mark)
/// resumes the quarantine from it rather than load the file and forget it,
/// and this build resumes it from the file the previous release saves.
/// Releases before 0.3.0 refuse such a file
/// (docs/operations.md#compatibility).
#[test]
fn an_rdb_with_a_running_quarantine_resumes_it_in_the_previous_release() {
    // No AOF: a lossy run. A crash after a grant quarantines the restart.
    let mut main = current()
        .arg("--dlock.restart-quarantine")
        .arg(TTL_MS.to_string())
        .start();
    let mut c = main.conn();
    take(&mut c, "plain", "p", TTL_MS, &[]);
    save(&mut c);
    let mut c = main.crash_and_restart();
    let (_, left) = quarantine(&mut c);
    assert!(left > 0, "no quarantine after the crash");
    save(&mut c);

    let old = previous().with_data_from(main.dir()).start();
    let mut oc = old.conn();
    let (reason, left) = quarantine(&mut oc);
    assert_eq!(reason, "resumed", "the previous release did not resume it");
    assert!(left > 0, "the previous release runs no quarantine");
    save(&mut oc);

    let again = current().with_data_from(old.dir()).start();
    let mut ac = again.conn();
    let (reason, left) = quarantine(&mut ac);
    assert_eq!(reason, "resumed", "not resumed back in this build");
    assert!(left > 0, "this build runs no quarantine");
}

/// `--appendonly yes` without the RDB preamble: the AOF is the effects
/// themselves, then a rewrite (`aof_rewrite`'s effects).
fn aof_server(b: ServerBuilder) -> ServerBuilder {
    b.aof("everysec").arg("--aof-use-rdb-preamble").arg("no")
}

/// The AOF a build writes, as it appends effects and as it rewrites them,
/// loads in the other release: this build -> previous release (effects,
/// then this build's rewrite) -> this build (the previous release's
/// rewrite).
#[test]
fn an_aof_goes_to_the_previous_release_and_back() {
    let main = aof_server(current()).start();
    let mut c = main.conn();
    make_kinds(&mut c, "aof");
    // Written to the file (not yet synced) before each reply: a copy sees
    // it.
    let want = snapshots(&mut c);

    let longest = longest_ttl(&mut c);
    assert_eq!(longest, TTL_MS as i64);

    // The effects, `DLOCK.META` included: an effect the previous release
    // refused would be skipped silently (errors do not stop an AOF load).
    let old = aof_server(previous()).with_data_from(main.dir()).start();
    let mut oc = old.conn();
    assert_same(
        "effects replayed by the previous release",
        &want,
        &snapshots(&mut oc),
    );
    assert_eq!(longest_ttl(&mut oc), longest, "DLOCK.META replayed");
    drop(old);

    rewrite_aof(&mut c);
    let old = aof_server(previous()).with_data_from(main.dir()).start();
    let mut oc = old.conn();
    assert_same(
        "rewrite loaded by the previous release",
        &want,
        &snapshots(&mut oc),
    );
    assert_eq!(longest_ttl(&mut oc), longest, "DLOCK.META rewritten");
    still_held(&mut oc, &want);
    fresh_grant_above(&mut oc, &want, "previous release");
    rewrite_aof(&mut oc);

    let back = aof_server(current()).with_data_from(old.dir()).start();
    let mut bc = back.conn();
    assert_same(
        "the previous release's rewrite, back",
        &want,
        &snapshots(&mut bc),
    );
    still_held(&mut bc, &want);
}

/// An AOF written while a quarantine runs (rewritten then, so it holds
/// nothing older): the previous release loads it with the longest TTL, the
/// locks and the quarantine's end (`DLOCK.META`'s third argument, which
/// 0.3.0 reads; a release before it skips that effect and loses only the
/// end); this build resumes it.
#[test]
fn an_aof_written_during_a_quarantine_keeps_it_in_the_previous_release() {
    let mut main = aof_server(current()).start();
    let mut c = main.conn();
    take(&mut c, "plain", "p", TTL_MS, &[]);
    // everysec is lossy: the crash quarantines the restart.
    let mut c = main.crash_and_restart();
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_quarantine_reason").as_deref(),
        Some("restart")
    );
    rewrite_aof(&mut c);
    let metas: Vec<usize> = common::aof::commands(&main, ".aof")
        .iter()
        .filter(|cmd| cmd[0].eq_ignore_ascii_case("DLOCK.META"))
        .map(Vec::len)
        .collect();
    assert!(
        metas.contains(&4),
        "no quarantine end in the AOF: {metas:?}"
    );
    let want = snapshot(&mut c, "plain");

    let old = aof_server(previous()).with_data_from(main.dir()).start();
    let mut oc = old.conn();
    assert_eq!(snapshot(&mut oc, "plain"), want);
    assert_eq!(longest_ttl(&mut oc), TTL_MS as i64);
    let (reason, left) = quarantine(&mut oc);
    assert_eq!(reason, "resumed", "the previous release did not resume it");
    assert!(left > 0, "the previous release runs no quarantine");

    let again = aof_server(current()).with_data_from(main.dir()).start();
    let mut ac = again.conn();
    assert_eq!(
        info_field(&mut ac, "dlock", "dlock_quarantine_reason").as_deref(),
        Some("resumed")
    );
}
