use super::*;

const T0: u64 = 1_700_000_000_000;

fn settings(ttl_ms: u64, lock_delay_ms: u64) -> Settings {
    Settings {
        ttl_ms,
        lock_delay_ms,
    }
}

fn place(key: &str, token: &str) -> Place {
    Place {
        db: 0,
        key: key.as_bytes().into(),
        token: token.as_bytes().into(),
    }
}

#[test]
fn open_creates_then_renews_and_keep_alive_moves_only_the_deadline() {
    let mut s = Sessions::new();
    assert_eq!(
        s.open(b"a", settings(1000, 0), None, T0),
        Ok(Opened::New {
            deadline_ms: T0 + 1000
        })
    );
    s.bind(b"a", place("k", "t"));
    assert_eq!(
        s.open(b"a", settings(2000, 5), None, T0 + 10),
        Ok(Opened::Renewed {
            deadline_ms: T0 + 2010
        })
    );
    assert_eq!(s.get(b"a").map(Session::holds), Some(1));
    assert_eq!(s.keep_alive(b"a", None, T0 + 100), Ok(T0 + 2100));
    assert_eq!(s.keep_alive(b"a", Some(50), T0 + 100), Ok(T0 + 150));
    // The ttl given becomes the session's own.
    assert_eq!(s.keep_alive(b"a", None, T0 + 120), Ok(T0 + 170));
    assert_eq!(s.keep_alive(b"b", None, T0), Err(Error::NoSession));
    assert_eq!(s.next_deadline(), Some(T0 + 170));
}

#[test]
fn a_session_is_live_up_to_and_including_its_deadline() {
    let mut s = Sessions::new();
    s.open(b"a", settings(100, 0), None, T0).unwrap();
    assert!(s.expired(T0 + 100, 10).is_empty());
    assert_eq!(s.keep_alive(b"a", None, T0 + 100), Ok(T0 + 200));
    assert_eq!(s.expired(T0 + 201, 10).len(), 1);
    // Past its deadline a keep-alive finds no session, timer run or not.
    assert_eq!(s.keep_alive(b"a", None, T0 + 201), Err(Error::NoSession));
}

#[test]
fn bad_settings_are_refused_changing_nothing() {
    let mut s = Sessions::new();
    assert_eq!(
        s.open(b"", settings(1, 0), None, T0),
        Err(Error::SessionIdLength)
    );
    let long = vec![b'x'; MAX_SESSION_ID + 1];
    assert_eq!(
        s.open(&long, settings(1, 0), None, T0),
        Err(Error::SessionIdLength)
    );
    assert_eq!(s.open(b"a", settings(0, 0), None, T0), Err(Error::ttl()));
    assert_eq!(
        s.open(b"a", settings(1, MAX_LOCK_DELAY_MS + 1), None, T0),
        Err(Error::LockDelay)
    );
    assert!(s.is_empty());
}

#[test]
fn lock_delay_applies_to_involuntary_ends_only() {
    for (reason, delayed) in [
        (EndReason::Expired, true),
        (EndReason::Killed, true),
        (EndReason::Disconnected, true),
        (EndReason::Closed, false),
    ] {
        let mut s = Sessions::new();
        s.open(b"a", settings(1000, 300), None, T0).unwrap();
        s.bind(b"a", place("k", "t"));
        assert_eq!(s.fate(b"a", T0 + 500), Fate::Live);
        let now = T0 + 500;
        let ended = s.end(b"a", reason, now).unwrap();
        assert_eq!(ended.holds, 1);
        let want = if delayed {
            Fate::DelayedUntil(ended.until_ms)
        } else {
            Fate::Gone
        };
        assert_eq!(s.fate(b"a", now), want, "{reason:?}");
        assert_eq!(s.fate(b"a", ended.until_ms), Fate::Gone, "{reason:?}");
    }
}

#[test]
fn an_expiry_counts_the_delay_from_the_deadline_however_late_the_timer() {
    let mut s = Sessions::new();
    s.open(b"a", settings(100, 300), None, T0).unwrap();
    s.bind(b"a", place("k", "t"));
    let ended = s.end(b"a", EndReason::Expired, T0 + 250).unwrap();
    assert_eq!(ended.until_ms, T0 + 100 + 300);
}

#[test]
fn an_ended_id_cannot_be_reopened_until_its_holds_are_settled() {
    let mut s = Sessions::new();
    s.open(b"a", settings(1000, 0), None, T0).unwrap();
    s.bind(b"a", place("k", "t"));
    s.end(b"a", EndReason::Closed, T0);
    assert_eq!(
        s.open(b"a", settings(1000, 0), None, T0),
        Err(Error::SessionEnding)
    );
    let batch = s.next_batch(10);
    assert_eq!(batch.places.len(), 1);
    // The fate holds while the batch settles; the next call forgets it.
    assert!(s.has_ending());
    let batch = s.next_batch(10);
    assert_eq!(batch.done.len(), 1);
    assert!(s.is_empty());
    assert!(s.open(b"a", settings(1000, 0), None, T0).is_ok());
}

#[test]
fn a_session_without_holds_ends_at_once() {
    let mut s = Sessions::new();
    s.open(b"a", settings(1000, 0), Some(7), T0).unwrap();
    assert_eq!(s.bound_to(7).len(), 1);
    let ended = s.end(b"a", EndReason::Disconnected, T0).unwrap();
    assert_eq!(ended.holds, 0);
    assert!(s.is_empty());
    assert!(s.bound_to(7).is_empty());
    assert_eq!(s.end(b"a", EndReason::Closed, T0), None);
}

#[test]
fn batches_are_bounded_and_in_order() {
    let mut s = Sessions::new();
    for id in [&b"a"[..], b"b"] {
        s.open(id, settings(1000, 0), None, T0).unwrap();
        for i in 0..5 {
            s.bind(id, place(&format!("k{i}"), "t"));
        }
        s.end(id, EndReason::Killed, T0);
    }
    assert_eq!(s.holds_ending(), 10);
    let mut seen = Vec::new();
    let mut rounds = 0;
    while s.has_ending() {
        let b = s.next_batch(3);
        assert!(b.places.len() <= 3);
        seen.extend(b.places.into_iter().map(|(p, id)| (id, p.key)));
        rounds += 1;
        assert!(rounds < 10);
    }
    assert_eq!(seen.len(), 10);
    assert_eq!(&*seen[0].0, b"a");
    assert_eq!(&*seen[9].0, b"b");
}

#[test]
fn unbind_removes_a_hold_and_rebinding_is_idempotent() {
    let mut s = Sessions::new();
    s.open(b"a", settings(1000, 0), None, T0).unwrap();
    s.bind(b"a", place("k", "t"));
    s.bind(b"a", place("k", "t"));
    s.bind(b"a", place("k", "u"));
    assert_eq!(s.holds_bound(), 2);
    s.unbind(b"a", &place("k", "t"));
    assert_eq!(s.holds_bound(), 1);
    // Binding to a session that is not live does nothing.
    s.bind(b"zz", place("k", "v"));
    assert_eq!(s.holds_bound(), 1);
}

#[test]
fn pages_of_ids_and_holds() {
    let mut s = Sessions::new();
    for i in 0..25 {
        s.open(format!("s{i:02}").as_bytes(), settings(1000, 0), None, T0)
            .unwrap();
    }
    let mut after: Option<Id> = None;
    let mut all = Vec::new();
    loop {
        let (ids, next) = s.page(after.as_deref(), 10, 100, |_| true);
        all.extend(ids);
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(all.len(), 25);
    let (ids, _) = s.page(None, 100, 100, |id| id.ends_with(b"7"));
    assert_eq!(ids.len(), 2);
    // Bounded by what it examines: a partial page and where to go on.
    let (ids, next) = s.page(None, 100, 5, |id| id.ends_with(b"7"));
    assert_eq!((ids.len(), next.as_deref()), (0, Some(&b"s04"[..])));

    for i in 0..7 {
        s.bind(b"s00", place(&format!("k{i}"), "t"));
    }
    let (first, next) = s.holds_page(b"s00", 0, 5).unwrap();
    assert_eq!(first.len(), 5);
    let (rest, done) = s.holds_page(b"s00", next.unwrap(), 5).unwrap();
    assert_eq!((rest.len(), done), (2, None));
    assert_eq!(&*rest[0].key, b"k5");
    assert!(s.holds_page(b"nope", 0, 5).is_none());
}

#[test]
fn the_encoding_round_trips_and_refuses_garbage() {
    let mut s = Sessions::new();
    s.open(b"a", settings(1000, 20), Some(3), T0).unwrap();
    s.bind(b"a", place("k", "t"));
    s.bind(b"a", place("", "u"));
    s.open(b"b", settings(500, 0), None, T0).unwrap();
    s.bind(b"b", place("x", "y"));
    s.end(b"b", EndReason::Killed, T0 + 1);
    let bytes = encoding::encode(&s);
    let back = encoding::decode(&bytes).unwrap();
    let a = back.get(b"a").unwrap();
    assert_eq!(
        (a.deadline_ms, a.settings, a.client),
        (T0 + 1000, settings(1000, 20), None)
    );
    assert_eq!(a.holds(), 2);
    assert_eq!(back.holds_ending(), 1);
    assert_eq!(back.fate(b"b", T0 + 1), Fate::Gone);
    assert_eq!(encoding::encode(&back), bytes);
    for cut in 0..bytes.len() {
        assert!(encoding::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut long = bytes.clone();
    long.push(0);
    assert!(encoding::decode(&long).is_err());
    let mut huge = vec![1u8];
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(encoding::decode(&huge).is_err());
}
