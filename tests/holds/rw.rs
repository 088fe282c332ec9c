//! Read-write lock under load: 16 clients, random shared and exclusive
//! holds, every request with `WAIT`.
use super::*;
use proxy::Rng;

const CLIENTS: usize = 16;
const RUN: Duration = Duration::from_secs(10);
/// Long enough that no hold can expire while held: every `RELEASE` must
/// answer 1, or the interval would not be proven live.
const TTL: u64 = 30_000;

fn seed() -> u64 {
    std::env::var("HOLDS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0011)
}

/// One client: until `until`, a hold of a random mode, a few ms inside
/// it, release, a short pause.
fn client(id: usize, url: &str, until: Instant) -> Result<Vec<Span>, String> {
    let mut rng = Rng::new(seed() ^ ((id as u64 + 1) << 8));
    let mut c = connect(url);
    c.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    let mut spans = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let token = format!("c{id}-{n}");
        // One request in four is a writer.
        let exclusive = rng.below(4) == 0;
        let mut a = acq("rw", &token, TTL).wait(20_000);
        if !exclusive {
            a = a.shared();
        }
        let fence = match a.send(&mut c) {
            Ok(Some(f)) => f,
            other => return Err(format!("{token}: {other:?}")),
        };
        let start = Instant::now();
        if rng.below(2) == 0 {
            thread::sleep(Duration::from_micros(rng.below(4000)));
        }
        let end = Instant::now();
        match try_release(&mut c, "rw", &token) {
            Ok(1) => {}
            other => return Err(format!("{token}: RELEASE answered {other:?}")),
        }
        spans.push(Span {
            client: id,
            token,
            exclusive,
            fence,
            start,
            end,
        });
        thread::sleep(Duration::from_micros(rng.below(3000)));
    }
    Ok(spans)
}

#[test]
fn rw_no_exclusive_hold_overlaps_and_shared_holds_do() {
    let _quiet = quiet();
    let s = Server::start();
    let until = Instant::now() + RUN;
    let spans: Vec<Span> = thread::scope(|sc| {
        let hs: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let url = s.url();
                sc.spawn(move || client(id, &url, until))
            })
            .collect();
        hs.into_iter()
            .enumerate()
            .flat_map(|(id, h)| join(h).unwrap_or_else(|e| panic!("client {id}: {e}")))
            .collect()
    });
    let exclusive = spans.iter().filter(|s| s.exclusive).count();
    let overlaps = check_exclusion(&spans);
    // Every grant went to a new owner (the token): all fences fresh.
    let mut fences: Vec<i64> = spans.iter().map(|s| s.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), spans.len(), "a fence was given twice");
    eprintln!(
        "rw (seed {:#x}): {} holds ({exclusive} exclusive) by {CLIENTS} clients, {overlaps} \
         shared holds overlapped another",
        seed(),
        spans.len()
    );
    // Honesty: both kinds happened, from every client, and readers shared.
    assert!(
        exclusive >= 20 && spans.len() - exclusive >= 60,
        "too few holds"
    );
    for id in 0..CLIENTS {
        assert!(spans.iter().any(|s| s.client == id), "client {id} idle");
    }
    assert!(overlaps > 0, "shared holds never overlapped");
    let mut c = s.conn();
    assert_eq!(shown(&mut c, "rw"), Shown::Free, "left held");
    assert_eq!(blocked_clients(&mut c), 0);
}
