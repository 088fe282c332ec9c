//! All or nothing: 12 clients send random set requests (2-4 of 6
//! resources, with and without `WAIT`, some `SHARED`) and single
//! `DLOCK.ACQUIRE`s, while a checker takes `MULTI` + `DLOCK.INFO` of every
//! resource + `EXEC` snapshots: no snapshot shows a set's token on some but
//! not all of its members, and every member shows the same fence and mode.
use super::*;
use intervals::{check_exclusion, Span};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

const CLIENTS: usize = 12;
const RUN: Duration = Duration::from_secs(5);

/// Set tokens and their members, registered before the request is sent.
type SetTokens = Mutex<HashMap<String, Vec<usize>>>;

/// What one client did.
#[derive(Default)]
struct Tally {
    /// One per member of every grant, for the exclusion check.
    spans: Vec<(usize, Span)>,
    set_grants: usize,
    shared_set_grants: usize,
    single_grants: usize,
    /// Nil answers (busy without `WAIT`, or the `WAIT` ran out).
    nils: usize,
}

fn index(res: &str) -> usize {
    RESOURCES
        .iter()
        .position(|r| *r == res)
        .expect("a resource")
}

/// The `WAIT` of the requests that wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waits {
    /// 10-20 s: clients that hold nothing while they wait are served long
    /// before, so no wait runs out.
    Long,
    /// 1-200 ms: many run out while queued.
    Short,
}

fn client(
    id: usize,
    url: &str,
    until: Instant,
    sets: &SetTokens,
    waits: Waits,
) -> Result<Tally, String> {
    let mut rng = proxy::Rng::new(seed() ^ ((id as u64 + 1) << 16));
    let mut c = connect(url);
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut t = Tally::default();
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let token = format!("c{id}-{n}");
        let is_set = rng.below(2) == 0;
        let mut req = if is_set {
            let k = 2 + rng.below(3) as usize;
            let members = random_members(&mut rng, k);
            let idx = members.iter().map(|m| index(m)).collect();
            sets.lock().unwrap().insert(token.clone(), idx);
            Req {
                members,
                ..set(&[], &token)
            }
        } else {
            let members = random_members(&mut rng, 1);
            one(&members[0], &token)
        };
        if rng.below(3) == 0 {
            req = req.shared();
        }
        // A third without WAIT.
        if rng.below(3) != 0 {
            req = req.wait(match waits {
                Waits::Long => 10_000 + rng.below(10_000),
                Waits::Short => 1 + rng.below(200),
            });
        }
        let fence = match req.send(&mut c) {
            Ok(Some(f)) => f,
            Ok(None) => {
                t.nils += 1;
                continue;
            }
            Err(e) => return Err(format!("{req:?}: {e}")),
        };
        let start = Instant::now();
        thread::sleep(micros(&mut rng, 3000));
        let end = Instant::now();
        let released: i64 = req
            .release_cmd()
            .query(&mut c)
            .map_err(|e| format!("{token}: release: {e}"))?;
        if released as usize != req.members.len() {
            return Err(format!("{req:?}: released {released}"));
        }
        match (is_set, req.shared) {
            (true, false) => t.set_grants += 1,
            (true, true) => t.shared_set_grants += 1,
            (false, _) => t.single_grants += 1,
        }
        for m in &req.members {
            let span = Span {
                client: id,
                token: token.clone(),
                exclusive: !req.shared,
                fence,
                start,
                end,
            };
            t.spans.push((index(m), span));
        }
        thread::sleep(micros(&mut rng, 1000));
    }
    Ok(t)
}

/// Checks one snapshot; returns how many set holds it showed.
fn check(snap: &[Shown], sets: &SetTokens) -> usize {
    let sets = sets.lock().unwrap();
    let mut seen = 0;
    for (i, s) in snap.iter().enumerate() {
        for (token, fence, mode) in s.holds() {
            let Some(members) = sets.get(token) else {
                continue;
            };
            seen += 1;
            assert!(members.contains(&i), "{token} on a non-member: {snap:?}");
            for &m in members {
                let other = snap[m].holds().iter().find(|h| h.0 == *token);
                match other {
                    Some((_, f, md)) if f == fence && md == mode => {}
                    other => panic!(
                        "partial set: {token} (members {members:?}) holds {} with fence \
                         {fence} ({mode}) but {} shows {other:?}\nsnapshot: {snap:#?}",
                        RESOURCES[i], RESOURCES[m]
                    ),
                }
            }
        }
    }
    seen
}

#[test]
fn no_snapshot_shows_part_of_a_set() {
    contention(Waits::Long);
}

/// Waits that run out during the run, also between two `DLOCK.INFO`s of
/// one snapshot: inside a transaction `DLOCK.INFO` only reads, so the
/// snapshot still reads one instant (see `transactions.rs`).
#[test]
fn no_snapshot_shows_part_of_a_set_while_waits_run_out() {
    contention(Waits::Short);
}

fn contention(waits: Waits) {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    let grants_before = counter(&mut c, "grants");
    let sets: SetTokens = Mutex::new(HashMap::new());
    let stop = AtomicBool::new(false);
    let until = Instant::now() + RUN;
    let (tallies, snaps, set_snaps, reserved) = thread::scope(|sc| {
        let hs: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (url, sets) = (s.url(), &sets);
                sc.spawn(move || client(id, &url, until, sets, waits))
            })
            .collect();
        let checker = sc.spawn(|| {
            let mut c = s.conn();
            let (mut snaps, mut set_snaps, mut reserved) = (0, 0, 0);
            while !stop.load(Ordering::Relaxed) {
                let snap = snapshot(&mut c, &RESOURCES);
                snaps += 1;
                if check(&snap, &sets) > 0 {
                    set_snaps += 1;
                }
                if snap.iter().any(|s| matches!(s, Shown::Reserved { .. })) {
                    reserved += 1;
                }
            }
            (snaps, set_snaps, reserved)
        });
        let tallies: Vec<Tally> = hs
            .into_iter()
            .enumerate()
            .map(|(id, h)| join(h).unwrap_or_else(|e| panic!("client {id}: {e}")))
            .collect();
        stop.store(true, Ordering::Relaxed);
        let (snaps, set_snaps, reserved) = join(checker);
        (tallies, snaps, set_snaps, reserved)
    });
    let sum = |f: fn(&Tally) -> usize| tallies.iter().map(f).sum::<usize>();
    let (sets_granted, shared_sets) = (sum(|t| t.set_grants), sum(|t| t.shared_set_grants));
    let (singles, nils) = (sum(|t| t.single_grants), sum(|t| t.nils));
    // The intervals agree: no exclusive hold overlapped another on any
    // resource, fences in order.
    let mut shared_overlaps = 0;
    for (i, _) in RESOURCES.iter().enumerate() {
        let spans: Vec<Span> = tallies
            .iter()
            .flat_map(|t| &t.spans)
            .filter(|(r, _)| *r == i)
            .map(|(_, s)| s.clone())
            .collect();
        shared_overlaps += check_exclusion(&spans);
    }
    eprintln!(
        "atomic, {waits:?} waits (seed {:#x}): {sets_granted} sets + {shared_sets} shared sets + {singles} \
         singles granted, {nils} nil; {snaps} snapshots, {set_snaps} showing a set, \
         {reserved} showing a reserved member; {shared_overlaps} shared overlaps",
        seed()
    );
    // Every grant the server counted reached its client.
    let received = sets_granted + shared_sets + singles;
    assert_eq!(
        counter(&mut c, "grants") - grants_before,
        received as i64,
        "dlock_grants counts the fences received"
    );
    assert_eq!(counter(&mut c, "revoked_grants"), 0);
    if waits == Waits::Long {
        assert_eq!(counter(&mut c, "wait_timeouts"), 0, "a long WAIT ran out");
    }
    // Honesty: the run had contention, sets of both kinds, and the checker
    // saw sets held.
    assert!(
        sets_granted >= 50 && shared_sets >= 20 && singles >= 50,
        "too few grants"
    );
    assert!(nils >= 20, "too little contention: {nils} nil answers");
    assert!(snaps >= 200 && set_snaps >= 50, "too few snapshots of sets");
    assert_all_free(&mut c, &RESOURCES);
}
