//! Leased semaphores (`LIMIT n`): never more than n live permits, an
//! expired permit is gone for `EXTEND`, an abandoned permit comes back to
//! the head waiter at its deadline.
use super::*;
use proxy::Rng;
use std::sync::atomic::{AtomicBool, Ordering};

const CLIENTS: usize = 20;
const LIMIT: u32 = 3;
const RUN: Duration = Duration::from_secs(6);
/// Short, so that abandoned permits come back during the run.
const PERMIT_TTL: u64 = 400;

/// A permit as its client saw it, and how it ended.
struct Permit {
    fence: i64,
    /// Live on the server at least over this interval: from the grant's
    /// reply to the `RELEASE` that answered 1, or for an abandoned (or
    /// expired) permit to `PERMIT_TTL` after its request was sent.
    live: (Instant, Instant),
    abandoned: bool,
}

fn client(id: usize, url: &str, until: Instant) -> Vec<Permit> {
    let mut rng = Rng::new(0x5e3a ^ id as u64);
    let mut c = connect(url);
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut permits = Vec::new();
    for n in 0.. {
        if Instant::now() >= until {
            break;
        }
        let token = format!("c{id}-{n}");
        let sent = Instant::now();
        let a = acq("sem", &token, PERMIT_TTL).limit(LIMIT).wait(20_000);
        let fence = a.grant(&mut c);
        let start = Instant::now();
        let lease_end = sent + Duration::from_millis(PERMIT_TTL);
        // One permit in eight is never released.
        if rng.below(8) == 0 {
            permits.push(Permit {
                fence,
                live: (start, lease_end),
                abandoned: true,
            });
            continue;
        }
        thread::sleep(Duration::from_millis(5 + rng.below(35)));
        let end = Instant::now();
        let live = match release(&mut c, "sem", &token) {
            1 => (start, end),
            // Expired while held (a stalled machine): still live until then.
            _ => (start, lease_end),
        };
        permits.push(Permit {
            fence,
            live,
            abandoned: false,
        });
    }
    permits
}

/// Samples INFO (inside MULTI, and bare) until `stop`: the most holds seen.
fn sampler(url: &str, stop: &AtomicBool) -> (usize, usize) {
    let mut c = connect(url);
    let (mut most, mut samples) = (0, 0);
    while !stop.load(Ordering::SeqCst) {
        let v: Vec<Value> = redis::pipe()
            .atomic()
            .cmd("DLOCK.INFO")
            .arg("sem")
            .query(&mut c)
            .expect("MULTI/EXEC");
        for s in [parse_shown(v[0].clone()), shown(&mut c, "sem")] {
            samples += 1;
            let h = match s {
                Shown::Free => continue,
                Shown::Holds(h) => h,
                other => panic!("a semaphore shown as {other:?}"),
            };
            assert_eq!((h.kind.as_str(), h.limit), ("semaphore", LIMIT as i64));
            assert!(h.holds.len() <= LIMIT as usize, "too many permits: {h:?}");
            for x in &h.holds {
                assert_eq!((x.mode.as_str(), &x.owner), ("exclusive", &x.token));
                assert!((0..=PERMIT_TTL as i64).contains(&x.ttl), "{h:?}");
            }
            let mut fences: Vec<i64> = h.holds.iter().map(|x| x.fence).collect();
            fences.sort_unstable();
            fences.dedup();
            assert_eq!(fences.len(), h.holds.len(), "permits share a fence: {h:?}");
            most = most.max(h.holds.len());
        }
        thread::sleep(Duration::from_millis(2));
    }
    (most, samples)
}

#[test]
fn a_semaphore_never_has_more_live_permits_than_its_limit() {
    let _quiet = quiet();
    let s = Server::start();
    let until = Instant::now() + RUN;
    let stop = AtomicBool::new(false);
    let (permits, (most_seen, samples)) = thread::scope(|sc| {
        let smp = sc.spawn(|| sampler(&s.url(), &stop));
        let hs: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let url = s.url();
                sc.spawn(move || client(id, &url, until))
            })
            .collect();
        let permits: Vec<Permit> = hs.into_iter().flat_map(join).collect();
        stop.store(true, Ordering::SeqCst);
        (permits, join(smp))
    });
    let spans: Vec<(Instant, Instant)> = permits.iter().map(|p| p.live).collect();
    let most = max_concurrency(&spans);
    let abandoned = permits.iter().filter(|p| p.abandoned).count();
    let mut fences: Vec<i64> = permits.iter().map(|p| p.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    eprintln!(
        "semaphore: {} permits ({abandoned} abandoned), at most {most} live from the replies, \
         {most_seen} in {samples} INFO samples",
        permits.len()
    );
    assert!(most <= LIMIT as usize, "{most} permits live at once");
    assert_eq!(
        fences.len(),
        permits.len(),
        "every permit has a fresh fence"
    );
    // Honesty: the limit was reached and abandoned permits came back.
    assert_eq!(most, LIMIT as usize, "the limit was never reached");
    assert_eq!(
        most_seen, LIMIT as usize,
        "INFO never showed a full semaphore"
    );
    assert!(abandoned >= 2 && permits.len() >= 40, "too little traffic");
    let mut c = s.conn();
    wait_until(SOON, "the abandoned permits to end", || {
        shown(&mut c, "sem") == Shown::Free
    });
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn extend_of_an_expired_permit_is_0_while_a_newcomer_holds_its_place() {
    let s = Server::start();
    let mut c = s.conn();
    let f1 = acq("sem", "p1", 200).limit(2).grant(&mut c);
    let f2 = acq("sem", "p2", LONG_TTL).limit(2).grant(&mut c);
    assert!(f2 > f1);
    wait_until(SOON, "p1 to expire", || {
        holds(&mut c, "sem").tokens() == ["p2"]
    });
    let f3 = acq("sem", "p3", LONG_TTL).limit(2).grant(&mut c);
    assert!(f3 > f2, "a fresh fence for the newcomer");
    assert_eq!(extend(&mut c, "sem", "p1", LONG_TTL), 0);
    assert_eq!(release(&mut c, "sem", "p1"), 0);
    // The expired token asks for a new grant: none is left.
    acq("sem", "p1", LONG_TTL).limit(2).busy(&mut c);
    let h = holds(&mut c, "sem");
    assert_eq!(h.tokens(), ["p2", "p3"]);
    assert_eq!((h.hold("p2").fence, h.hold("p3").fence), (f2, f3));
    // Past its deadline, a permit is gone for EXTEND even before anything
    // else pruned it.
    acq("sem2", "q1", 100).limit(2).grant(&mut c);
    acq("sem2", "q2", LONG_TTL).limit(2).grant(&mut c);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(extend(&mut c, "sem2", "q1", LONG_TTL), 0);
    assert_eq!(holds(&mut c, "sem2").tokens(), ["q2"]);
}

/// `holder` (abandoned, TTL 300 ms) and maybe a long hold fill `res`;
/// `waiter` queues. Returns how many ms after the abandoned hold's deadline the
/// server granted the waiter (from its fence, unix µs at the grant) and
/// the reply arrived (client clock).
fn handover_delay(
    c: &mut Connection,
    url: &str,
    holder: Acq,
    filler: Option<Acq>,
    waiter: Acq,
) -> (i64, i64) {
    let f = holder.grant(c);
    // Fences are unix µs at the grant, and the deadline is counted from
    // that same instant: deadline = grant ms + TTL.
    let deadline = f / 1000 + holder.ttl as i64;
    let ttl = holds(c, &holder.res).hold(&holder.token).ttl;
    assert!(
        (-5..=1000).contains(&(now_ms() + ttl - deadline)),
        "the fence {f} is not the grant's unix µs (ttl {ttl})"
    );
    if let Some(filler) = filler {
        filler.grant(c);
    }
    let w = waiter.spawn(url);
    wait_queue(c, &holder.res, 1);
    let (fw, at, _) = w.granted();
    let arrived = now_ms() - at.elapsed().as_millis() as i64;
    (fw / 1000 - deadline, arrived - deadline)
}

#[test]
fn an_abandoned_hold_reaches_the_head_waiter_within_50_ms_of_its_deadline() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    let url = s.url();
    for round in 0..3 {
        let res = format!("sem{round}");
        let (server, client) = handover_delay(
            &mut c,
            &url,
            acq(&res, "abandoned", 300).limit(2),
            Some(acq(&res, "filler", LONG_TTL).limit(2)),
            acq(&res, "w", LONG_TTL).limit(2).wait(20_000),
        );
        eprintln!(
            "semaphore {round}: granted {server} ms after the deadline, reply at {client} ms"
        );
        // Live up to and including its deadline; then within 50 ms.
        assert!((1..=50).contains(&server), "granted {server} ms after");
        // The reply path on a loaded machine is not the module's doing.
        assert!((1..=50 + 1000).contains(&client), "reply {client} ms after");
    }
    // A reader's abandoned hold and a queued writer: the same.
    let (server, client) = handover_delay(
        &mut c,
        &url,
        acq("rw", "r", 300).shared(),
        None,
        acq("rw", "w", LONG_TTL).wait(20_000),
    );
    eprintln!("rwlock: granted {server} ms after the deadline, reply at {client} ms");
    assert!((1..=50).contains(&server), "granted {server} ms after");
    assert!((1..=50 + 1000).contains(&client), "reply {client} ms after");
}

/// A command refused after its step pruned a dead permit changes nothing:
/// the holds it moved out of the key go back exactly as they were (the
/// dead one included, in grant order; never an empty key). The prune and
/// the refusal meet in one turn (`DEBUG SLEEP` inside `MULTI`).
#[test]
fn a_refusal_after_a_prune_puts_every_hold_back() {
    let s = Server::start();
    let mut c = s.conn();
    let permit = |tok: &str, ttl: u64, limit: u32| {
        redis::cmd("DLOCK.ACQUIRE")
            .arg("k")
            .arg(tok)
            .arg(ttl)
            .arg("LIMIT")
            .arg(limit)
            .clone()
    };
    let _: i64 = permit("p1", 3_600_000, 3).query(&mut c).unwrap();
    let _: i64 = permit("p2", 100, 3).query(&mut c).unwrap();
    let digest = redis::cmd("DEBUG").arg("DIGEST-VALUE").arg("k").clone();
    let replies = common::transaction(
        &mut c,
        &[
            redis::cmd("DEBUG").arg("SLEEP").arg("0.3").clone(),
            digest.clone(),
            // Another limit: refused, after p2 was pruned in its step.
            permit("x", 1000, 5),
            digest.clone(),
        ],
    );
    assert!(
        matches!(replies[2], redis::Value::ServerError(_)),
        "{:?}",
        replies[2]
    );
    assert_eq!(
        replies[1], replies[3],
        "the refused command changed the value"
    );
    // The key still holds p1, and the next command drops p2 as usual.
    let fence: Option<i64> = permit("p3", 1000, 3).query(&mut c).unwrap();
    assert!(fence.is_some());
    let info: redis::Value = redis::cmd("DLOCK.INFO").arg("k").query(&mut c).unwrap();
    let text = format!("{info:?}");
    assert!(
        text.contains("p1") && text.contains("p3") && !text.contains("p2"),
        "{text}"
    );
}
