//! A set command that fails changes nothing, on any member: `MRELEASE` and
//! `MEXTEND` decide every member (the fences of every handoff they cause
//! included) before the first write. Here the first member would change
//! fine and a later member's handoff needs a fence the clock no longer has
//! (a lock restored from elsewhere carries fence 2^63-1): the command
//! answers the error, and the keys, the queues and waiters, `INFO dlock`,
//! keyspace events, the AOF and the replica are as they were.
use super::aof::Tail;
use super::*;
use common::dump::{payload_with_fence, restore};
use common::waiter::Waiter;

const EXHAUSTED: &str = "ERR fence counter exhausted: no fence above 2^63-1";

/// A master writing every effect to its AOF at once (no RDB preamble), and
/// its replica in sync.
fn aof_pair() -> (Server, Server) {
    let master = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(SYNC);
    (master, replica)
}

/// Pushes the fence clock to `left` fences below its ceiling.
fn exhaust_fences(c: &mut Connection, left: i64) {
    let _: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["tmpl", "x", "600000"])
        .query(c)
        .unwrap();
    let p = payload_with_fence(c, "tmpl", i64::MAX - left);
    restore(c, "maxed", 0, &p).unwrap();
    wait_until(SOON, "the fence clock near its ceiling", || {
        dlock_counter(c, "last_fence") == i64::MAX - left
    });
}

/// `INFO dlock`, every field.
fn dlock_info(c: &mut Connection) -> String {
    let text: String = redis::cmd("INFO").arg("dlock").query(c).unwrap();
    text.lines()
        .filter(|l| l.starts_with("dlock_"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn repl_offset(c: &mut Connection) -> i64 {
    counter(c, "replication", "master_repl_offset")
}

/// Lock and key events on every key, read with a short timeout.
fn all_events(s: &Server) -> Connection {
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "notify-keyspace-events", "KA"])
        .query(&mut s.conn())
        .unwrap();
    let mut sub = s.conn();
    sub.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let _: () = redis::cmd("PSUBSCRIBE")
        .arg("__keyspace@0__:*")
        .query(&mut sub)
        .unwrap();
    sub
}

/// Everything a failed command must leave as it was.
#[derive(Debug, PartialEq)]
struct World {
    keys: Vec<Snapshot>,
    queued: Vec<i64>,
    info: String,
}

fn world(c: &mut Connection, keys: &[&str]) -> World {
    World {
        keys: snapshots(c, &strings(keys)),
        queued: keys.iter().map(|k| queued(c, k)).collect(),
        info: dlock_info(c),
    }
}

/// Runs `failing` (which must answer the fence error) and checks that it
/// changed nothing on `keys`, in `INFO dlock`, in the events, the AOF and
/// on the replica, and that `waiters` still wait.
fn assert_fails_changing_nothing(
    s: &Server,
    r: &Server,
    c: &mut Connection,
    keys: &[&str],
    waiters: &[&Waiter],
    failing: redis::Cmd,
) {
    let mut t = Tail::new(s);
    let before = world(c, keys);
    let offset = repl_offset(c);
    let mut events = all_events(s);

    let e = failing.query::<Value>(c).unwrap_err();
    assert_eq!(err_text(&e), EXHAUSTED);

    assert_eq!(world(c, keys), before, "the failed command changed state");
    assert!(
        next_lock_event(&mut events).is_err(),
        "the failed command published an event"
    );
    assert_eq!(repl_offset(c), offset, "the failed command replicated");
    assert_eq!(t.fresh(), [], "the failed command reached the AOF");
    for w in waiters {
        assert!(w.pending(), "a waiter was answered");
    }
    assert_eq!(blocked_clients(c), waiters.len() as i64);
    sync_replica(c);
    let mut rc = r.conn();
    assert_same("replica", &snapshots(&mut rc, &strings(keys)), &before.keys);
}

fn mrelease_cmd(members: &[&str], tok: &str) -> redis::Cmd {
    redis::cmd("DLOCK.MRELEASE")
        .arg(members.len())
        .arg(members)
        .arg(tok)
        .clone()
}

#[test]
fn an_mrelease_whose_second_handoff_has_no_fence_changes_nothing() {
    // Both members hand over to a queued waiter; one fence is left: `a`'s
    // handoff would get it, `b`'s none.
    let (s, r) = aof_pair();
    let mut c = s.conn();
    let set = ["a", "b"];
    macquire(&mut c, &set, "t", 60_000, &[]);
    let wa = Waiter::single(&s, &mut c, "a", "wa", 1);
    let wb = Waiter::single(&s, &mut c, "b", "wb", 1);
    exhaust_fences(&mut c, 1);
    let cmd = mrelease_cmd(&set, "t");
    assert_fails_changing_nothing(&s, &r, &mut c, &set, &[&wa, &wb], cmd);
    // The fence left is still there, for one handoff.
    assert_eq!(mrelease(&mut c, &set[..1], "t"), 1);
    assert_eq!(wa.granted().0, i64::MAX);
    assert!(wb.pending());
}

#[test]
fn an_mrelease_whose_set_handoff_has_no_fence_changes_nothing() {
    // `a` releases fine (nobody waits); `b`'s queue holds a set request
    // (`b`, `c`): freed, the set would be granted, with a fence.
    let (s, r) = aof_pair();
    let mut c = s.conn();
    let set = ["a", "b"];
    macquire(&mut c, &set, "t", 60_000, &[]);
    let w = Waiter::set(&s, &mut c, &["b", "c"], "w", &[], 1);
    exhaust_fences(&mut c, 0);
    let cmd = mrelease_cmd(&set, "t");
    assert_fails_changing_nothing(&s, &r, &mut c, &["a", "b", "c"], &[&w], cmd);
}

#[test]
fn an_mrelease_with_just_the_fences_it_needs_hands_over_everything() {
    // A single waiter, a set waiter and a shared run of two readers: four
    // grants, a fence each, exactly the four fences left.
    let s = Server::start();
    let mut c = s.conn();
    let set = ["a", "b", "c"];
    macquire(&mut c, &set, "t", 60_000, &[]);
    let wa = Waiter::single(&s, &mut c, "a", "wa", 1);
    let wb = Waiter::set(&s, &mut c, &["b", "x"], "wb", &[], 1);
    let r1 = Waiter::set(&s, &mut c, &["c"], "r1", &["SHARED"], 1);
    let r2 = Waiter::set(&s, &mut c, &["c"], "r2", &["SHARED"], 2);
    exhaust_fences(&mut c, 4);
    assert_eq!(mrelease(&mut c, &set, "t"), 3);
    let mut fences = vec![
        wa.granted().0,
        wb.granted().0,
        r1.granted().0,
        r2.granted().0,
    ];
    fences.sort();
    assert_eq!(fences, [i64::MAX - 3, i64::MAX - 2, i64::MAX - 1, i64::MAX]);
    assert_eq!(dlock_counter(&mut c, "waiters"), 0);
}

/// A plain lock `a` and a semaphore `b` of two permits, both held by `t`;
/// `b`'s other permit held by `d` for `d_ttl` ms, and `w` queued for a
/// permit.
fn semaphore_with_waiter(s: &Server, c: &mut Connection, d_ttl: u64) -> Waiter {
    let acquire = |c: &mut Connection, key: &str, tok: &str, ttl: u64| {
        let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(key)
            .arg(tok)
            .arg(ttl)
            .arg(if key == "a" {
                &[][..]
            } else {
                &["LIMIT", "2"][..]
            })
            .query(c)
            .unwrap();
        assert!(f.is_some(), "{key} {tok}: granted");
    };
    acquire(c, "a", "t", 60_000);
    acquire(c, "b", "t", 60_000);
    acquire(c, "b", "d", d_ttl);
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(&["b", "w", "60000", "LIMIT", "2", "WAIT", "30000"]);
    let w = Waiter::send(s, cmd);
    wait_queued(c, "b", 1);
    w
}

fn refresh_cmd(ttl: u64) -> redis::Cmd {
    redis::cmd("DLOCK.ACQUIRE")
        .arg("b")
        .arg("d")
        .arg(ttl)
        .arg(&["LIMIT", "2"])
        .clone()
}

/// `d` refreshes its hold of `b` to end in `ttl` ms.
fn refresh_d(c: &mut Connection, ttl: u64) {
    let f: Option<i64> = refresh_cmd(ttl).query(c).unwrap();
    assert!(f.is_some(), "d's refresh");
}

fn mextend_cmd(members: &[&str], tok: &str, ttl: u64) -> redis::Cmd {
    redis::cmd("DLOCK.MEXTEND")
        .arg(members.len())
        .arg(members)
        .arg(tok)
        .arg(ttl)
        .clone()
}

#[test]
fn an_mextend_that_frees_a_queue_without_a_fence_changes_nothing() {
    // `MEXTEND` extends `a`, then prunes `d`'s dead hold of `b`, which lets
    // `w` in: a grant, with a fence.
    let (s, r) = aof_pair();
    let mut c = s.conn();
    let w = semaphore_with_waiter(&s, &mut c, 60_000);
    exhaust_fences(&mut c, 0);
    // `d` refreshes its hold (no fence needed) to end at once. The queue's
    // wake-up at its end finds no fence for `w` and changes nothing.
    refresh_d(&mut c, 20);
    wait_until(SYNC, "the wake-up at d's end failed", || {
        s.log().contains("handoff failed")
    });
    assert!(w.pending(), "w was granted without a fence");
    let cmd = mextend_cmd(&["a", "b"], "t", 90_000);
    assert_fails_changing_nothing(&s, &r, &mut c, &["a", "b"], &[&w], cmd);
    // The single-resource path fails the same way, counting nothing.
    let mut cmd = redis::cmd("DLOCK.EXTEND");
    cmd.arg(&["b", "t", "90000"]);
    assert_fails_changing_nothing(&s, &r, &mut c, &["a", "b"], &[&w], cmd);
}

#[test]
fn an_mextend_with_the_fence_it_needs_hands_over() {
    // As above with one fence left, and `d`'s hold ending inside the
    // transaction that then runs `MEXTEND` (no wake-up runs in between).
    let s = Server::start();
    let mut c = s.conn();
    let w = semaphore_with_waiter(&s, &mut c, 60_000);
    exhaust_fences(&mut c, 1);
    let ((), extended): ((), i64) = redis::pipe()
        .atomic()
        .add_command(refresh_cmd(20))
        .ignore()
        .cmd("DEBUG")
        .arg(&["SLEEP", "0.1"])
        .add_command(mextend_cmd(&["a", "b"], "t", 90_000))
        .query(&mut c)
        .unwrap();
    assert_eq!(extended, 1);
    assert_eq!(w.granted().0, i64::MAX);
}

/// `MRELEASE` of `set` by `t` with exactly `left` fences: either every
/// handoff it causes is done, or (the error) nothing changed.
fn mrelease_all_or_nothing(
    s: &Server,
    r: &Server,
    c: &mut Connection,
    set: &[&str],
    waiters: &[&Waiter],
    left: i64,
    needed: i64,
) {
    exhaust_fences(c, left);
    if needed > left {
        assert_fails_changing_nothing(s, r, c, set, waiters, mrelease_cmd(set, "t"));
        return;
    }
    let released = try_mrelease(c, set, "t");
    assert!(
        released.is_ok(),
        "{needed} fences needed, {left} left: {released:?}"
    );
}

#[test]
fn an_mrelease_with_a_set_waiter_on_two_members_needs_one_fence() {
    // One set grant covers both members: one fence.
    let (s, r) = aof_pair();
    let mut c = s.conn();
    let set = ["a", "b"];
    macquire(&mut c, &set, "t", 60_000, &[]);
    let w = Waiter::set(&s, &mut c, &set, "w", &[], 1);
    mrelease_all_or_nothing(&s, &r, &mut c, &set, &[&w], 1, 1);
    assert_eq!(w.granted().0, i64::MAX);
}

#[test]
fn an_mrelease_whose_members_go_to_one_token_in_two_queues_changes_nothing_short_of_fences() {
    // The same token waits on each member by a single request of its own:
    // two grants, two fences; one left.
    let (s, r) = aof_pair();
    let mut c = s.conn();
    let set = ["a", "b"];
    macquire(&mut c, &set, "t", 60_000, &[]);
    let wa = Waiter::single(&s, &mut c, "a", "w", 1);
    let wb = Waiter::single(&s, &mut c, "b", "w", 1);
    mrelease_all_or_nothing(&s, &r, &mut c, &set, &[&wa, &wb], 1, 2);
}

#[test]
fn an_mrelease_past_a_head_waiter_whose_wait_ran_out_counts_the_next() {
    // `a`'s head waiter's WAIT runs out inside the transaction (its timer
    // cannot fire there): the grant goes to the next one. Two grants in
    // all, one fence left: the error, and nothing changed.
    let (s, r) = aof_pair();
    let mut c = s.conn();
    let set = ["a", "b"];
    macquire(&mut c, &set, "t", 60_000, &[]);
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(&["a", "early", "60000", "WAIT", "300"]);
    let early = Waiter::send(&s, cmd);
    wait_queued(&mut c, "a", 1);
    let wa = Waiter::single(&s, &mut c, "a", "wa", 2);
    let wb = Waiter::single(&s, &mut c, "b", "wb", 1);
    exhaust_fences(&mut c, 1);
    let v: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DEBUG")
        .arg(&["SLEEP", "0.5"])
        .ignore()
        .add_command(mrelease_cmd(&set, "t"))
        .query(&mut c)
        .unwrap_or_else(|e| vec![Value::SimpleString(err_text(&e))]);
    eprintln!("EXEC: {v:?}");
    assert!(matches!(early.reply().0, Ok(None)), "early's WAIT ran out");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        wa.pending() && wb.pending(),
        "a failed MRELEASE handed over"
    );
    for k in set {
        assert_eq!(held(&mut c, k).token, b"t", "{k} still t's: {v:?}");
    }
    let _ = r;
}
