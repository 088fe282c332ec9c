//! RELEASE hands off to the waiter, and waiters are granted in FIFO order.
use super::*;

// ---------------------------------------------------------------- grants

#[test]
fn release_hands_off_to_waiter() {
    let s = Server::start();
    let mut holder = s.conn();
    let mut obs = s.conn();
    let url = s.url();
    const ROUNDS: usize = 20;
    // One persistent waiter thread: per round it waits for "go", blocks,
    // releases what it was granted, then reports. How fast the handoff is
    // is a goal of the bench (`make bench`, handoff section), not a check
    // here: each round's grant must come within the deadline on the wait.
    let (go_tx, go_rx) = channel::<usize>();
    let (tx, rx) = channel::<(usize, RedisResult<Option<i64>>)>();
    let waiter = thread::spawn(move || {
        let mut c = connect_within(&url, Duration::from_secs(10)).unwrap();
        while let Ok(round) = go_rx.recv() {
            let tok = format!("waiter{round}");
            let r = acquire_wait(&mut c, "res", &tok, 10_000, 10_000);
            if let Ok(Some(_)) = r {
                assert_eq!(release(&mut c, "res", &tok), 1);
            }
            tx.send((round, r)).unwrap();
        }
    });
    for round in 0..ROUNDS {
        let htok = format!("holder{round}");
        let hf = hold(&mut holder, "res", &htok);
        go_tx.send(round).unwrap();
        wait_waiters(&mut obs, "res", 1);
        assert_eq!(release(&mut holder, "res", &htok), 1);
        let (r_round, r) = rx.recv_timeout(SOON).expect("waiter reply");
        assert_eq!(r_round, round);
        let f = r.expect("waiter reply").expect("waiter must be granted");
        assert!(f > hf, "round {round}: fence {f} must exceed holder's {hf}");
    }
    drop(go_tx);
    waiter.join().unwrap();
}

#[test]
fn fifo_order() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let ws: Vec<Waiter> = (0..6)
        .map(|i| Waiter::queue(&mut c, &s.url(), "res", &format!("w{i}"), i + 1))
        .collect();
    assert_owner(&mut c, "res", "holder", hf);
    let mut prev_tok = "holder".to_string();
    let mut prev_fence = hf;
    for (i, w) in ws.iter().enumerate() {
        assert_eq!(release(&mut c, "res", &prev_tok), 1, "release {prev_tok}");
        // Handoff happens inside RELEASE: the owner is already the head.
        let now = info(&mut c, "res").expect("lock must be handed off");
        assert_eq!(
            now.token,
            w.tok.as_bytes(),
            "grant #{i} went to the wrong waiter"
        );
        assert_eq!(now.waiters, 5 - i as i64);
        let f = w.granted().fence();
        assert_eq!(f, now.fence);
        assert!(
            f > prev_fence,
            "fences must increase: {prev_fence} then {f}"
        );
        for later in &ws[i + 1..] {
            later.assert_pending();
        }
        prev_tok = w.tok.clone();
        prev_fence = f;
    }
    assert_eq!(release(&mut c, "res", &prev_tok), 1);
    assert_eq!(info(&mut c, "res"), None);
    assert_eq!(blocked_clients(&mut c), 0);
}
