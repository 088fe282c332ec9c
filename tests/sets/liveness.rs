//! Liveness of sets: 20 clients that hold nothing while they wait
//! lock random subsets of 2-4 out of 6 resources, in random order, with
//! `WAIT 0` (forever), hold times far below the TTL, for 20 s. Every
//! request is granted (a client whose reply does not come within its read
//! timeout fails the test), no two owners overlap on any resource (from
//! the replies), and grants happen in every second of the run.
use super::*;
use intervals::{check_exclusion, Span};
use std::sync::Barrier;

const CLIENTS: usize = 20;
const RUN_SECS: u64 = 20;
/// Far above any hold (a few ms): no lease can end while held, so every
/// `MRELEASE` must release every member.
const TTL: u64 = 30_000;
/// A client's read timeout. With 20 clients holding a few ms each a wait
/// is tens of ms; a wait this long means the request was not served.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

struct Grant {
    members: Vec<usize>,
    span: Span,
    /// From sending the request to its grant.
    waited: Duration,
}

fn client(id: usize, url: &str, go: &Barrier, until: &Mutex<Option<Instant>>) -> Vec<Grant> {
    let mut rng = proxy::Rng::new(seed() ^ ((id as u64 + 1) << 24));
    let mut c = connect(url);
    c.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let mut grants = Vec::new();
    go.wait();
    let until = until.lock().unwrap().expect("the run's end");
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let token = format!("c{id}-{n}");
        let k = 2 + rng.below(3) as usize;
        let req = Req {
            members: random_members(&mut rng, k),
            ttl: TTL,
            ..set(&[], &token)
        }
        .wait(0);
        let sent = Instant::now();
        let fence = match req.send(&mut c) {
            Ok(Some(f)) => f,
            Err(e) if e.is_timeout() => panic!(
                "client {id}: {req:?} not granted within {READ_TIMEOUT:?} (sent {:?} into \
                 the run)",
                sent.saturating_duration_since(until - Duration::from_secs(RUN_SECS))
            ),
            other => panic!("client {id}: {req:?} answered {other:?}"),
        };
        let start = Instant::now();
        thread::sleep(micros(&mut rng, 4000));
        let end = Instant::now();
        let released: i64 = req.release_cmd().query(&mut c).unwrap();
        assert_eq!(released as usize, k, "{req:?}: MRELEASE");
        let members = req
            .members
            .iter()
            .map(|m| RESOURCES.iter().position(|r| r == m).unwrap())
            .collect();
        grants.push(Grant {
            members,
            span: Span {
                client: id,
                token,
                exclusive: true,
                fence,
                start,
                end,
            },
            waited: start - sent,
        });
        thread::sleep(micros(&mut rng, 2000));
    }
    grants
}

#[test]
fn sets_of_clients_that_hold_nothing_are_all_granted() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    let go = Barrier::new(CLIENTS + 1);
    let until = Mutex::new(None);
    let run = Duration::from_secs(RUN_SECS);
    let (t0, grants) = thread::scope(|sc| {
        let hs: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (url, go, until) = (s.url(), &go, &until);
                sc.spawn(move || client(id, &url, go, until))
            })
            .collect();
        // Every client connected: the run starts now.
        let t0 = Instant::now();
        *until.lock().unwrap() = Some(t0 + run);
        go.wait();
        let grants: Vec<Grant> = hs.into_iter().flat_map(join).collect();
        (t0, grants)
    });
    // No two owners overlapped on any resource, and fences follow time.
    for (i, r) in RESOURCES.iter().enumerate() {
        let spans: Vec<Span> = grants
            .iter()
            .filter(|g| g.members.contains(&i))
            .map(|g| g.span.clone())
            .collect();
        check_exclusion(&spans);
        assert!(spans.len() >= 100, "{r}: only {} holds", spans.len());
    }
    // Grants in every second of the run.
    let mut per_second = vec![0usize; RUN_SECS as usize];
    for g in &grants {
        let at = g.span.start.duration_since(t0).as_secs() as usize;
        if let Some(n) = per_second.get_mut(at) {
            *n += 1;
        }
    }
    let longest = grants.iter().map(|g| g.waited).max().unwrap_or_default();
    eprintln!(
        "liveness (seed {:#x}): {} sets granted to {CLIENTS} clients, longest wait \
         {longest:?}, per second {per_second:?}",
        seed(),
        grants.len()
    );
    for (sec, n) in per_second.iter().enumerate() {
        assert!(
            *n > 0,
            "no grant in second {sec} of the run: {per_second:?}"
        );
    }
    for id in 0..CLIENTS {
        assert!(
            grants.iter().filter(|g| g.span.client == id).count() >= 20,
            "client {id} starved"
        );
    }
    assert_eq!(counter(&mut c, "wait_timeouts"), 0, "no wait ran out");
    assert_all_free(&mut c, &RESOURCES);
}
