//! Competing clients: never two holders at once, and no livelock when
//! several wait on the same servers.

use crate::common::{ms, SEC};
use crate::redlock::{start, urls};
use dlock_client::Redlock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn two_clients_never_hold_a_quorum_at_the_same_time() {
    let servers = start(3);
    let urls = urls(&servers);
    let holding = Arc::new(AtomicUsize::new(0));
    // (client, granted at, released from)
    let held: Arc<Mutex<Vec<(usize, Instant, Instant)>>> = Arc::default();
    let end = Instant::now() + 3 * SEC;
    let clients: Vec<_> = (0..2)
        .map(|id| {
            let (urls, holding, held) = (urls.clone(), holding.clone(), held.clone());
            thread::spawn(move || {
                let rl = Redlock::new(&urls).unwrap().with_node_timeout(ms(500));
                let mut n = 0u64;
                while Instant::now() < end {
                    n += 1;
                    // Mix waiting and non-waiting attempts.
                    let r = if n.is_multiple_of(3) {
                        rl.try_lock("res", SEC)
                    } else {
                        rl.request("res").ttl(SEC).wait(ms(300)).acquire()
                    };
                    let Some(g) = r.unwrap() else { continue };
                    let got = Instant::now();
                    assert_eq!(holding.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    thread::sleep(Duration::from_micros(n % 3 * 500));
                    holding.fetch_sub(1, Ordering::SeqCst);
                    let done = Instant::now();
                    assert!(done < g.valid_until(), "held past the validity");
                    held.lock().unwrap().push((id, got, done));
                    assert!(g.release().unwrap(), "released by a quorum");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let mut held = held.lock().unwrap().clone();
    for id in 0..2 {
        let n = held.iter().filter(|h| h.0 == id).count();
        assert!(n >= 3, "client {id} held the lock only {n} times");
    }
    held.sort_by_key(|h| h.1);
    for w in held.windows(2) {
        assert!(
            w[0].2 <= w[1].1,
            "overlapping holds: {:?} and {:?}",
            w[0],
            w[1]
        );
    }
}

#[test]
fn three_clients_waiting_on_three_nodes_all_make_progress() {
    const EACH: usize = 5;
    let servers = start(3);
    let urls = urls(&servers);
    let deadline = Instant::now() + 60 * SEC;
    let clients: Vec<_> = (0..3)
        .map(|id| {
            let urls = urls.clone();
            thread::spawn(move || {
                let rl = Redlock::new(&urls).unwrap().with_node_timeout(ms(500));
                let mut got = 0;
                while got < EACH {
                    assert!(
                        Instant::now() < deadline,
                        "client {id}: only {got} grants in 60 s"
                    );
                    if let Some(g) = rl
                        .request("res")
                        .ttl(2 * SEC)
                        .wait(5 * SEC)
                        .acquire()
                        .unwrap()
                    {
                        got += 1;
                        thread::sleep(ms(10));
                        assert!(g.release().unwrap());
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    for c in clients {
        c.join().unwrap();
    }
    eprintln!("3 x {EACH} grants in {:?}", start.elapsed());
}
