//! Unit tests of queues ranked by priority with aging: random joins at
//! random priorities and arrivals (single and set requests, tokens
//! repeated), leaves, timeouts and grants, against a naive model that
//! keeps every queue sorted by rank.
use super::*;

type Q = WaitQueues<&'static str, u32>;

/// One model entry: (rank, priority, token).
type Entry = (Rank, u16, Vec<u8>);

#[test]
fn ranked_queues_match_a_naive_model() {
    const RES: [&str; 3] = ["r0", "r1", "r2"];
    let mut q = Q::default();
    let mut model: [Vec<Entry>; 3] = Default::default();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rng = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let drop_id = |model: &mut [Vec<Entry>; 3], id: u64| {
        for m in model.iter_mut() {
            m.retain(|(r, _, _)| r.id != id);
        }
    };
    let insert = |m: &mut Vec<Entry>, e: Entry| {
        let at = m.partition_point(|(r, _, _)| *r < e.0);
        m.insert(at, e);
    };
    let mut now = 0u64;
    for _ in 0..4000 {
        now += rng(3);
        let token = format!("t{}", rng(30)).into_bytes();
        let r = rng(3) as usize;
        let level = [0, 0, 1, 2, 5, 1000][rng(6) as usize];
        let priority = Priority {
            level,
            key: Rank::key(now, level, 1 + rng(4)),
        };
        match rng(10) {
            0..=3 => {
                let gives_up = (rng(2) == 0).then(|| now + rng(30));
                let w = Wants::default();
                let id = q.push_ranked(RES[r], &token, w, 10, gives_up, 0, priority);
                let rank = Rank {
                    key: priority.key,
                    id,
                };
                insert(&mut model[r], (rank, level, token));
            }
            4 => {
                let other = (r + 1 + rng(2) as usize) % 3;
                let members = vec![RES[r], RES[other]];
                let w = Wants::default();
                let id = q.push_set_ranked(members, &token, w, 10, None, 0, priority);
                let rank = Rank {
                    key: priority.key,
                    id,
                };
                insert(&mut model[r], (rank, level, token.clone()));
                insert(&mut model[other], (rank, level, token));
            }
            5 => {
                if let Some((rank, _, _)) = model[r].get(rng(model[r].len() as u64 + 1) as usize) {
                    let id = rank.id;
                    assert!(q.remove(id).is_some());
                    drop_id(&mut model, id);
                }
            }
            6 => {
                let gone = q.take_given_up(&RES[r], now);
                let ranks: Vec<Rank> = gone.iter().map(|w| w.rank).collect();
                assert!(ranks.windows(2).all(|p| p[0] < p[1]), "in queue order");
                for w in gone {
                    drop_id(&mut model, w.id);
                }
            }
            _ => {
                if q.has_sets(&RES[r]) {
                    continue;
                }
                let head = model[r].first().map(|(_, _, t)| t.clone());
                assert_eq!(q.head(&RES[r]), head.as_deref());
                assert_eq!(q.head_rank(&RES[r]), model[r].first().map(|e| e.0));
                if let Some(g) = q.pop_grantee(&RES[r]) {
                    assert_eq!(Some(&g.token[..]), head.as_deref());
                    let same: Vec<u64> = model[r]
                        .iter()
                        .filter(|(_, _, t)| Some(t) == head.as_ref())
                        .map(|(r, _, _)| r.id)
                        .collect();
                    let mut ids = g.ids.clone();
                    ids.sort_unstable();
                    let mut want = same.clone();
                    want.sort_unstable();
                    assert_eq!(ids, want, "every entry of the head's token");
                    for id in same {
                        drop_id(&mut model, id);
                    }
                }
            }
        }
        for (i, m) in model.iter().enumerate() {
            let queue = q.queues.get(&RES[i]);
            let entries: Vec<Rank> = queue
                .map(|q| q.entries.values().map(|w| w.rank).collect())
                .unwrap_or_default();
            let want: Vec<Rank> = m.iter().map(|e| e.0).collect();
            assert_eq!(entries, want, "{} served in rank order", RES[i]);
            let index: Vec<Rank> = queue
                .map(|q| q.order.iter_from(0).collect())
                .unwrap_or_default();
            assert_eq!(index, want, "{}: the rank index agrees", RES[i]);
            for rank in &want {
                assert_eq!(q.rank_of(rank.id), Some(*rank), "one rank everywhere");
            }
            let top = m.iter().map(|e| e.1).max().unwrap_or(0);
            assert_eq!(q.top_priority(&RES[i]), top);
            let mut first: HashMap<&[u8], usize> = HashMap::new();
            for (at, (_, _, t)) in m.iter().enumerate() {
                first.entry(t).or_insert(at + 1);
            }
            for t in 0..30 {
                let t = format!("t{t}").into_bytes();
                assert_eq!(q.position(&RES[i], &t), first.get(&t[..]).copied());
            }
        }
    }
}
