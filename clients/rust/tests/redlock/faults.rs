//! Dead, paused and slow nodes: a quorum still grants, too few fail within
//! the node timeout, a paused node's buffered `ACQUIRE` is undone on its
//! own connection, and a quorum that comes after the ttl is no lock.

use crate::common::{holder, ms, Server, SEC};
use crate::redlock::delay::DelayProxy;
use crate::redlock::{start, urls, wait_free};
use dlock_client::{Error, Redlock};
use std::time::{Duration, Instant};

const NODE_TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling on a loaded 2-core machine, on top of what the design allows.
const MARGIN: Duration = Duration::from_millis(700);

fn redlock(urls: &[String]) -> Redlock {
    Redlock::new(urls).unwrap().with_node_timeout(NODE_TIMEOUT)
}

/// One pooled connection per node, so the next command is written at once
/// even to a node that is paused by then.
fn warm(rl: &Redlock) {
    for (i, r) in rl.info("warm-up").into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("node {i}: {e}"));
    }
}

fn refs(servers: &[Server]) -> Vec<&Server> {
    servers.iter().collect()
}

#[test]
fn two_dead_nodes_still_grant_and_three_fail_at_once() {
    let mut servers = start(5);
    let rl = redlock(&urls(&servers));
    // Pooled connections to the nodes about to die break on first use.
    warm(&rl);
    servers[0].kill9();
    servers[3].kill9();
    let t = Instant::now();
    let g = rl.try_lock("res", 10 * SEC).unwrap().expect("3 of 5 grant");
    assert!(t.elapsed() < NODE_TIMEOUT + MARGIN, "{:?}", t.elapsed());
    let granted: Vec<bool> = g.fences().iter().map(Option::is_some).collect();
    assert_eq!(granted, [false, true, true, false, true]);
    assert!(g.release().unwrap(), "a quorum released");

    servers[4].kill9();
    let t = Instant::now();
    let e = rl.try_lock("res", 10 * SEC).unwrap_err();
    let took = t.elapsed();
    let Error::NoQuorum { granted, nodes, .. } = e else {
        panic!("{e}");
    };
    assert!(granted <= 2 && nodes == 5);
    // Refused connections are failures at once: no node timeout to wait out.
    assert!(took < NODE_TIMEOUT + MARGIN, "{took:?}");
    wait_free(&[&servers[1], &servers[2]], "res", 5 * SEC, "grants undone");

    // With a wait: attempts until it is used up, then the same error.
    let t = Instant::now();
    let e = rl
        .request("res")
        .ttl(2 * SEC)
        .wait(ms(600))
        .acquire()
        .unwrap_err();
    let took = t.elapsed();
    assert!(matches!(e, Error::NoQuorum { .. }), "{e}");
    assert!(
        took >= ms(600) && took < ms(600) + NODE_TIMEOUT + MARGIN,
        "{took:?}"
    );
    wait_free(&[&servers[1], &servers[2]], "res", 5 * SEC, "grants undone");
}

#[test]
fn three_paused_nodes_fail_within_the_node_timeout_and_keep_nothing() {
    let servers = start(5);
    let rl = redlock(&urls(&servers));
    warm(&rl);
    for s in &servers[..3] {
        s.stop();
    }
    let t = Instant::now();
    let r = rl.try_lock("res", 30 * SEC);
    let took = t.elapsed();
    // Resume before any assertion can fail (and before the servers drop).
    let live = wait_free_result(&servers[3..], "res");
    for s in &servers[..3] {
        s.cont();
    }
    let e = r.unwrap_err();
    assert!(matches!(e, Error::NoQuorum { nodes: 5, .. }), "{e}");
    assert!(
        took >= NODE_TIMEOUT,
        "the replies were due only then: {took:?}"
    );
    assert!(took < NODE_TIMEOUT + MARGIN, "{took:?}");
    live.expect("the live nodes' grants were undone");
    // The paused nodes run the buffered ACQUIRE and then the RELEASE written
    // behind it on the same connection: with a 30 s ttl, only that frees
    // them this soon.
    wait_free(&refs(&servers), "res", 5 * SEC, "paused nodes keep nothing");
}

/// `wait_free` that reports instead of panicking (nodes still paused).
fn wait_free_result(servers: &[Server], res: &str) -> Result<(), String> {
    let mut conns: Vec<_> = servers.iter().map(Server::conn).collect();
    let end = Instant::now() + 5 * SEC;
    while conns.iter_mut().any(|c| holder(c, res).is_some()) {
        if Instant::now() >= end {
            return Err(format!("{res} still held after 5 s"));
        }
        std::thread::sleep(ms(20));
    }
    Ok(())
}

#[test]
fn a_paused_node_costs_at_most_its_timeout_and_its_buffered_acquire_is_undone() {
    let servers = start(5);
    let rl = redlock(&urls(&servers));
    warm(&rl);
    let t = Instant::now();
    let healthy = rl.try_lock("base", 30 * SEC).unwrap().expect("all up");
    let baseline = t.elapsed();
    drop(healthy);

    servers[4].stop();
    let t = Instant::now();
    let r = rl.try_lock("res", 30 * SEC);
    let took = t.elapsed();
    // Long enough for the node's worker to have given up on the reply
    // (socket timeouts fire a few ms late), so the node's ACQUIRE and the
    // RELEASE written behind it are both still buffered when it resumes.
    std::thread::sleep(NODE_TIMEOUT);
    servers[4].cont();
    let g = r.unwrap().expect("4 of 5 grant");
    assert!(
        took < baseline + NODE_TIMEOUT + MARGIN,
        "{took:?} (baseline {baseline:?})"
    );
    let granted: Vec<bool> = g.fences().iter().map(Option::is_some).collect();
    assert_eq!(granted, [true, true, true, true, false]);
    // Resumed, the node runs the ACQUIRE and then the RELEASE (a 30 s ttl:
    // nothing else frees it this soon); the others keep the lock.
    wait_free(&[&servers[4]], "res", 5 * SEC, "the buffered grant undone");
    for s in &servers[..4] {
        let h = holder(&mut s.conn(), "res").map(|h| h.0);
        assert_eq!(h.as_deref(), Some(g.token()));
    }
    assert!(g.release().unwrap());
}

#[test]
fn a_grant_that_arrives_after_the_decision_is_released_on_its_connection() {
    let servers = start(5);
    let rl = redlock(&urls(&servers));
    warm(&rl);
    servers[4].stop();
    // With a wait, the paused node's reply is due only after the attempt's
    // wait (3 s here), but the attempt is decided one node timeout after
    // the quorum granted.
    let t = Instant::now();
    let r = rl.request("res").ttl(30 * SEC).wait(10 * SEC).acquire();
    let took = t.elapsed();
    servers[4].cont();
    let g = r.unwrap().expect("4 of 5 grant");
    assert!(took < NODE_TIMEOUT + MARGIN, "{took:?}");
    assert_eq!(g.fences()[4], None);
    // The node grants as soon as it runs again; the reply reaches the
    // attempt's worker, which releases on the same connection.
    wait_free(&[&servers[4]], "res", 5 * SEC, "the late grant undone");
    assert!(g.release().unwrap());
}

#[test]
fn a_quorum_that_answers_after_the_ttl_is_no_lock() {
    let delay = ms(600);
    let servers = start(5);
    // Two direct nodes; a quorum needs one of the three slow ones, whose
    // replies (not commands) arrive 600 ms late.
    let proxies: Vec<DelayProxy> = servers[2..]
        .iter()
        .map(|s| DelayProxy::start(s.port(), delay))
        .collect();
    let mut all = urls(&servers[..2]);
    all.extend(proxies.iter().map(DelayProxy::url));
    let rl = Redlock::new(&all).unwrap().with_node_timeout(3 * SEC);
    warm(&rl);

    let t = Instant::now();
    let e = rl.try_lock("res", ms(400)).unwrap_err();
    let took = t.elapsed();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(took >= delay, "decided on the slow replies: {took:?}");
    wait_free(
        &refs(&servers),
        "res",
        5 * SEC,
        "nothing held after the refusal",
    );

    // A ttl well above the delay: granted, its validity short of the ttl by
    // what the quorum took (counted from before the first send).
    let t = Instant::now();
    let g = rl.try_lock("res", 5 * SEC).unwrap().expect("granted");
    assert!(t.elapsed() >= delay);
    assert!(g.valid_until() >= t + 5 * SEC - ms(52));
    assert!(g.remaining() < 5 * SEC - delay, "{:?}", g.remaining());
    assert!(g.fences().iter().all(Option::is_some));
    assert!(g.release().unwrap());
    wait_free(&refs(&servers), "res", 5 * SEC, "released");
}

/// Takes "res" on every server and leaves it to be handled by its token.
fn held_by_token(rl: &dlock_client::Redlock) -> String {
    warm(rl);
    let g = rl.try_lock("res", 30 * SEC).unwrap().unwrap();
    let token = g.token().to_string();
    std::mem::forget(g);
    token
}

/// By token, with one server of three paused: a majority extends and
/// releases, within the node timeout.
#[test]
fn extend_token_and_release_token_with_one_of_three_paused() {
    let servers = start(3);
    let rl = redlock(&urls(&servers));
    let token = held_by_token(&rl);
    servers[0].stop();
    let t = Instant::now();
    let extended = rl.extend_token("res", &token, 60 * SEC);
    let took_extend = t.elapsed();
    let other = rl.extend_token("res", "someone-else", 60 * SEC);
    let ttls: Vec<i64> = servers[1..]
        .iter()
        .map(|s| crate::common::pttl(&mut s.conn(), "res"))
        .collect();
    let t = Instant::now();
    let released = rl.release_token("res", &token);
    let took_release = t.elapsed();
    let again = rl.release_token("res", &token);
    servers[0].cont();
    assert!(extended.unwrap());
    assert!(!other.unwrap());
    assert!(ttls.iter().all(|&t| t > 30_000), "{ttls:?}");
    assert!(released.unwrap());
    assert!(!again.unwrap());
    assert!(took_extend < NODE_TIMEOUT + MARGIN, "{took_extend:?}");
    assert!(took_release < NODE_TIMEOUT + MARGIN, "{took_release:?}");
}

/// Two of three paused: no majority answers, an error (not "lost").
#[test]
fn extend_token_with_two_of_three_paused_is_no_quorum() {
    let servers = start(3);
    let rl = redlock(&urls(&servers));
    let token = held_by_token(&rl);
    servers[0].stop();
    servers[1].stop();
    let extended = rl.extend_token("res", &token, 60 * SEC);
    let released = rl.release_token("res", &token);
    servers[0].cont();
    servers[1].cont();
    assert!(
        matches!(extended, Err(Error::NoQuorum { .. })),
        "{extended:?}"
    );
    assert!(
        matches!(released, Err(Error::NoQuorum { .. })),
        "{released:?}"
    );
}
