//! Stress: twenty clients, a hundred rounds of blocking handoffs.
use super::*;

// ---------------------------------------------------------------- stress

#[test]
fn stress_twenty_clients_hundred_rounds() {
    let _quiet = crate::quiet();
    const CLIENTS: usize = 20;
    const ROUNDS: usize = 100;
    let s = Server::start();
    let deadline = Instant::now() + Duration::from_secs(60);
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let (tx, rx) = channel();
    for id in 0..CLIENTS {
        let (url, barrier, tx) = (s.url(), barrier.clone(), tx.clone());
        thread::spawn(move || {
            let r = (|| -> Result<Vec<(i64, Instant, Instant)>, String> {
                let mut c = connect_within(&url, Duration::from_secs(10))
                    .map_err(|e| format!("connect: {e}"))?;
                c.set_read_timeout(Some(Duration::from_secs(35))).unwrap();
                barrier.wait();
                let mut holds = Vec::with_capacity(ROUNDS);
                for round in 0..ROUNDS {
                    if Instant::now() > deadline {
                        return Err(format!("round {round}: past the 60 s deadline"));
                    }
                    let tok = format!("c{id}-r{round}");
                    let f = acquire_wait(&mut c, "lock", &tok, 10_000, 30_000)
                        .map_err(|e| format!("round {round}: ACQUIRE: {e}"))?
                        .ok_or_else(|| format!("round {round}: WAIT 30000 timed out"))?;
                    let start = Instant::now();
                    let v: Option<i64> = redis::cmd("GET")
                        .arg("counter")
                        .query(&mut c)
                        .map_err(|e| format!("GET: {e}"))?;
                    let _: () = redis::cmd("SET")
                        .arg("counter")
                        .arg(v.unwrap_or(0) + 1)
                        .query(&mut c)
                        .map_err(|e| format!("SET: {e}"))?;
                    let end = Instant::now();
                    let n: i64 = redis::cmd("DLOCK.RELEASE")
                        .arg("lock")
                        .arg(&tok)
                        .query(&mut c)
                        .map_err(|e| format!("RELEASE: {e}"))?;
                    if n != 1 {
                        return Err(format!("round {round}: RELEASE replied {n}"));
                    }
                    holds.push((f, start, end));
                }
                Ok(holds)
            })();
            let _ = tx.send((id, r));
        });
    }
    drop(tx);
    let t0 = Instant::now();
    let mut all = Vec::new();
    for _ in 0..CLIENTS {
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        let (id, r) = rx
            .recv_timeout(left)
            .expect("a client did not finish within 60 s");
        let holds = r.unwrap_or_else(|e| panic!("client {id}: {e}"));
        assert_eq!(holds.len(), ROUNDS, "client {id}");
        all.extend(holds);
    }
    eprintln!("stress: {} grants in {:?}", CLIENTS * ROUNDS, t0.elapsed());
    let mut c = s.conn();
    let v: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(v, (CLIENTS * ROUNDS) as i64, "lost updates");
    all.sort_by_key(|h| h.1);
    for w in all.windows(2) {
        assert!(w[0].0 < w[1].0, "fences out of grant order: {w:?}");
        assert!(w[0].2 < w[1].1, "holds overlap: {w:?}");
    }
    assert_eq!(info(&mut c, "lock"), None);
    assert_eq!(blocked_clients(&mut c), 0);
}
