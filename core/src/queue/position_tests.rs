//! Unit tests of the queues' positions (`WaitQueues::position`,
//! `WaitQueues::waiters_from`) against a naive model.
use super::*;
use crate::ask::Mode;

type Q = WaitQueues<&'static str, u32>;

fn tokens_from(q: &Q, resource: &'static str, from: usize) -> Vec<(usize, String)> {
    q.waiters_from(&resource, from)
        .map(|(at, w)| (at, String::from_utf8_lossy(&w.token).into_owned()))
        .collect()
}

#[test]
fn positions_follow_joins_leaves_and_grants() {
    let mut q = Q::default();
    let a = q.push("r", b"a", Wants::default(), 10, None, 1);
    let b = q.push("r", b"b", Wants::default(), 10, Some(50), 2);
    q.push("r", b"c", Wants::default(), 10, None, 3);
    let shared = Wants {
        mode: Mode::Shared,
        ..Wants::default()
    };
    q.push_set(vec!["s", "r"], b"d", shared, 10, None, 4);
    assert_eq!(
        [b"a", b"b", b"c", b"d", b"x"].map(|t| q.position(&"r", t)),
        [Some(1), Some(2), Some(3), Some(4), None]
    );
    assert_eq!(
        q.position(&"s", b"d"),
        Some(1),
        "a set waits in each member's queue"
    );
    assert_eq!(q.position(&"nowhere", b"a"), None);
    assert_eq!(
        tokens_from(&q, "r", 2),
        [(2, "b".into()), (3, "c".into()), (4, "d".into())]
    );
    assert_eq!(tokens_from(&q, "r", 0), tokens_from(&q, "r", 1));
    assert!(tokens_from(&q, "r", 5).is_empty());
    q.remove(b);
    assert_eq!(q.position(&"r", b"c"), Some(2));
    assert_eq!(q.pop_grantee(&"r").map(|g| g.ids), Some(vec![a]));
    assert_eq!(q.position(&"r", b"c"), Some(1));
    assert_eq!(q.position(&"r", b"d"), Some(2));
    q.joined_at(4, 77);
    assert!(q
        .waiters_from(&"s", 1)
        .chain(q.waiters_from(&"r", 1))
        .all(|(_, w)| w.queued_at == if w.id == 4 { 77 } else { 0 }));
}

#[test]
fn a_token_queued_twice_stands_where_its_first_entry_does() {
    let mut q = Q::default();
    q.push("r", b"a", Wants::default(), 10, None, 1);
    let first = q.push("r", b"t", Wants::default(), 10, None, 2);
    q.push("r", b"b", Wants::default(), 10, None, 3);
    q.push("r", b"t", Wants::default(), 10, None, 4);
    assert_eq!(q.position(&"r", b"t"), Some(2));
    q.remove(first);
    assert_eq!(q.position(&"r", b"t"), Some(3));
}

/// Random joins (single and set requests, some tokens repeated), leaves,
/// timeouts, grants and sets taken whole, on three resources: after every
/// step each token's position and every walk from every position equal
/// the naive model's (a list per resource, walked).
#[test]
fn positions_match_a_naive_model() {
    const RES: [&str; 3] = ["r0", "r1", "r2"];
    let mut q = Q::default();
    // Per resource: (id, token) in queue order.
    let mut model: [Vec<(u64, Vec<u8>)>; 3] = Default::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let drop_id = |model: &mut [Vec<(u64, Vec<u8>)>; 3], id: u64| {
        for m in model.iter_mut() {
            m.retain(|(i, _)| *i != id);
        }
    };
    let mut now = 0u64;
    for _ in 0..3000 {
        now += 1;
        let token = format!("t{}", rng(40)).into_bytes();
        let r = rng(3) as usize;
        match rng(10) {
            0..=3 => {
                let gives_up = (rng(2) == 0).then(|| now + rng(30));
                let id = q.push(RES[r], &token, Wants::default(), 10, gives_up, 0);
                model[r].push((id, token));
            }
            4 => {
                let other = (r + 1 + rng(2) as usize) % 3;
                let id = q.push_set(
                    vec![RES[r], RES[other]],
                    &token,
                    Wants::default(),
                    10,
                    None,
                    0,
                );
                model[r].push((id, token.clone()));
                model[other].push((id, token));
            }
            5 => {
                if let Some(&(id, _)) = model[r].get(rng(model[r].len() as u64 + 1) as usize) {
                    assert!(q.remove(id).is_some());
                    drop_id(&mut model, id);
                }
            }
            6 => {
                if let Some(&(id, _)) = model[r].get(rng(model[r].len() as u64 + 1) as usize) {
                    assert_eq!(q.take(&[id]).len(), 1);
                    drop_id(&mut model, id);
                }
            }
            7 => {
                for w in q.take_given_up(&RES[r], now) {
                    drop_id(&mut model, w.id);
                }
            }
            _ => {
                let granted = if q.has_sets(&RES[r]) {
                    None
                } else {
                    q.pop_grantee(&RES[r])
                };
                if let Some(g) = granted {
                    for id in g.ids {
                        drop_id(&mut model, id);
                    }
                }
            }
        }
        for (r, m) in model.iter().enumerate() {
            let mut first: HashMap<&[u8], usize> = HashMap::new();
            for (at, (_, t)) in m.iter().enumerate() {
                first.entry(t).or_insert(at + 1);
            }
            for t in 0..40 {
                let t = format!("t{t}").into_bytes();
                assert_eq!(q.position(&RES[r], &t), first.get(&t[..]).copied());
            }
            let from = rng(m.len() as u64 + 2) as usize + 1;
            let walked: Vec<(usize, u64)> = q
                .waiters_from(&RES[r], from)
                .map(|(at, w)| (at, w.id))
                .collect();
            let expected: Vec<(usize, u64)> = m
                .iter()
                .enumerate()
                .skip(from - 1)
                .map(|(at, (id, _))| (at + 1, *id))
                .collect();
            assert_eq!(walked, expected);
        }
    }
}
