//! The lock moved by resharding in Redis Cluster: a guarded write sent to a
//! node that does not serve the resource's slot is redirected (MOVED; ASK
//! while the slot migrates and its keys have left) and runs nothing; once
//! the slot (lock and data) has moved, the holder's guarded writes pass on
//! the new node and a stale holder's are refused; keys of another slot than
//! the resource's are CROSSSLOT.
use super::*;
use common::cluster::{setslot, Cluster};
use common::lock::*;

const RES: &str = "{orders}";
const STOCK: &str = "{orders}:stock";
const LOG: &str = "{orders}:log";

/// The error a guarded write must get, with its code and its detail.
fn expect_error(c: &mut redis::Connection, args: &[String], code: &str) -> String {
    match cmd(args).query::<redis::Value>(c) {
        Err(e) if e.code() == Some(code) => e.detail().unwrap_or_default().to_string(),
        other => panic!("{args:?}: expected {code}, got {other:?}"),
    }
}

/// MOVED or ASK to `to`'s address.
fn expect_redirect(c: &mut redis::Connection, args: &[String], code: &str, to: &Server) {
    let detail = expect_error(c, args, code);
    assert!(
        detail.ends_with(&format!(":{}", to.port())),
        "{code} to {detail}, not to port {}",
        to.port()
    );
}

/// `CLUSTER COUNTKEYSINSLOT slot` on one node.
fn keys_in_slot(c: &mut redis::Connection, slot: u16) -> i64 {
    redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(c)
        .unwrap()
}

/// Moves every key of `slot` from `src` to `dst` (MIGRATE ... KEYS).
fn move_keys(sc: &mut redis::Connection, slot: u16, dst: &Server) {
    common::cluster::move_slot_keys(sc, slot, dst.port());
}

#[test]
fn a_lock_moved_by_resharding_guards_on_its_new_node_only() {
    let cl = Cluster::start(3, 0);
    let slot = cl.key_slot(RES);
    assert_eq!(cl.key_slot(STOCK), slot);
    let src = cl.node_for_slot(slot);
    let dst = *cl.masters().iter().find(|&&m| m != src).unwrap();
    let third = *cl
        .masters()
        .iter()
        .find(|&&m| m != src && m != dst)
        .unwrap();
    let elsewhere = (0..1000)
        .map(|n| format!("{{elsewhere-{n}}}:x"))
        .find(|k| cl.key_slot(k) != slot)
        .unwrap();
    let (mut sc, mut dc) = (cl.node(src).conn(), cl.node(dst).conn());

    // "old" held the lock and wrote; then "h" took it.
    let f_old = grant(&mut sc, RES, "old", 60_000);
    let old = [Proof::Token("old".into()), Proof::Fence(f_old)];
    let ok: String = cmd(&guarded(RES, &old[0], &["SET", STOCK, "10"]))
        .query(&mut sc)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(release(&mut sc, RES, "old"), 1);
    let f_h = grant(&mut sc, RES, "h", 60_000);
    let h = [Proof::Token("h".into()), Proof::Fence(f_h)];
    let n: i64 = cmd(&guarded(RES, &h[1], &["RPUSH", LOG, "h-src"]))
        .query(&mut sc)
        .unwrap();
    assert_eq!(n, 1);

    // A node that does not serve the slot redirects; nothing runs there.
    expect_redirect(
        &mut dc,
        &guarded(RES, &h[0], &["SET", STOCK, "moved"]),
        "MOVED",
        cl.node(src),
    );
    // Keys of another slot: CROSSSLOT, single or in a BATCH, nothing written.
    expect_error(
        &mut sc,
        &guarded(RES, &h[0], &["SET", &elsewhere, "x"]),
        "CROSSSLOT",
    );
    expect_error(
        &mut sc,
        &guarded_batch(
            RES,
            &h[0],
            &[&["SET", STOCK, "cross"], &["SET", &elsewhere, "x"]],
        ),
        "CROSSSLOT",
    );
    assert_eq!(get(&mut sc, STOCK).as_deref(), Some("10"));

    // The slot migrates; once its keys (lock and data) have left the source,
    // the source answers ASK (before: TRYAGAIN), and the holder's write runs on the target.
    setslot(&mut dc, slot, "IMPORTING", cl.id(src));
    setslot(&mut sc, slot, "MIGRATING", cl.id(dst));
    // The data has left, the lock not yet: the write's keys are split
    // between the nodes, so the source may run it on neither (TRYAGAIN)
    // rather than write a data key back onto a slot that is leaving.
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(cl.node(dst).port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(STOCK)
        .arg(LOG)
        .query(&mut sc)
        .unwrap();
    for w in [
        guarded(RES, &h[0], &["SET", STOCK, "split"]),
        guarded_batch(RES, &h[1], &[&["RPUSH", LOG, "split"]]),
    ] {
        expect_error(&mut sc, &w, "TRYAGAIN");
    }
    assert_eq!(
        keys_in_slot(&mut sc, slot),
        1,
        "only the lock is left on the source"
    );
    move_keys(&mut sc, slot, cl.node(dst));
    expect_redirect(
        &mut sc,
        &guarded(RES, &h[0], &["SET", STOCK, "ask"]),
        "ASK",
        cl.node(dst),
    );
    let (ok,): (String,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .add_command(cmd(&guarded(RES, &h[0], &["SET", STOCK, "9"])))
        .query(&mut dc)
        .unwrap();
    assert_eq!(ok, "OK", "the holder's write after ASKING on the target");
    // The target owns the slot first, then the others learn it.
    for node in [dst, src, third] {
        setslot(&mut cl.node(node).conn(), slot, "NODE", cl.id(dst));
    }
    cl.wait_stable();
    assert_eq!(cl.node_for_slot(slot), dst);

    // The old node redirects for good.
    for proof in &h {
        expect_redirect(
            &mut sc,
            &guarded(RES, proof, &["SET", STOCK, "moved"]),
            "MOVED",
            cl.node(dst),
        );
    }
    // On the new node: the holder's writes pass, TOKEN and FENCE, single
    // and BATCH; the stale holder's are refused, and CROSSSLOT holds there.
    let ok: String = cmd(&guarded(RES, &h[0], &["SET", STOCK, "8"]))
        .query(&mut dc)
        .unwrap();
    assert_eq!(ok, "OK");
    let (ok, n): (String, i64) = cmd(&guarded_batch(
        RES,
        &h[1],
        &[&["SET", STOCK, "7"], &["RPUSH", LOG, "h-dst"]],
    ))
    .query(&mut dc)
    .unwrap();
    assert_eq!((ok.as_str(), n), ("OK", 2));
    for proof in &old {
        for w in [
            guarded(RES, proof, &["SET", STOCK, "stale"]),
            guarded_batch(
                RES,
                proof,
                &[&["SET", STOCK, "stale"], &["RPUSH", LOG, "stale"]],
            ),
        ] {
            let e = expect_error(&mut dc, &w, "NOTHELD");
            assert!(e.starts_with("dlock: "), "{w:?}: NOTHELD {e}");
        }
    }
    expect_error(
        &mut dc,
        &guarded(RES, &h[0], &["SET", &elsewhere, "x"]),
        "CROSSSLOT",
    );
    // A cluster client routes the guarded write by its resource.
    let mut cc = cl.conn();
    let n: i64 = cmd(&guarded(RES, &h[0], &["RPUSH", LOG, "h-routed"]))
        .query(&mut cc)
        .unwrap();
    assert_eq!(n, 3);

    assert_eq!(get(&mut dc, STOCK).as_deref(), Some("7"));
    assert_eq!(list(&mut dc, LOG), ["h-src", "h-dst", "h-routed"]);
    let i = held(&mut dc, RES);
    assert_eq!((i.token.as_slice(), i.fence), (&b"h"[..], f_h));
    assert_eq!(
        keys_in_slot(&mut sc, slot),
        0,
        "a guarded write left a key on the old node"
    );
    let owner = cl.node_for_slot(cl.key_slot(&elsewhere));
    assert_eq!(
        get(&mut cl.node(owner).conn(), &elsewhere),
        None,
        "a CROSSSLOT write ran"
    );
    assert_eq!(release(&mut cc, RES, "h"), 1);
}
