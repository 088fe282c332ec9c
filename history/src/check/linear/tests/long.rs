use super::*;

// ---- (4) performance ----

/// A long linearizable history of every kind: `procs` processes, each op
/// taking effect at a random instant of its interval against the model
/// itself (with fences drawn as last + 1..10), some replies lost.
fn long_history(rng: &mut Rng, procs: u64, ops: usize, lost_per_mille: u64) -> Vec<Event> {
    let mut h = H::new();
    let mut states: HashMap<&str, State> = HashMap::new();
    let mut names = Names::default();
    type InFlight<'a> = Option<(u64, &'a str, Op, Option<Outcome>)>;
    let mut flight: Vec<InFlight> = vec![None; procs as usize];
    let mut tokens = 0u64;
    let mut started = 0;
    let mut t = 0u64;
    // Each process's current tokens per resource (what it may release).
    let mut mine: Vec<Vec<(&str, String, Op)>> = vec![Vec::new(); procs as usize];
    loop {
        t += 1 + rng.below(20);
        let p = rng.below(procs) as usize;
        match flight[p].take() {
            None if started < ops => {
                let res = ["l0", "l1", "l2"][rng.below(3) as usize];
                let held: Vec<usize> = (0..mine[p].len())
                    .filter(|&i| mine[p][i].0 == res)
                    .collect();
                let op = match rng.below(10) {
                    0..=2 if !held.is_empty() => {
                        let (_, tok, _) = mine[p].remove(held[0]);
                        rel(res, &tok)
                    }
                    3 if !held.is_empty() => ext(res, &mine[p][held[0]].1),
                    4 if !held.is_empty() => mine[p][held[0]].2.clone(), // a retry
                    5 => info(res),
                    _ => {
                        tokens += 1;
                        let tok = format!("c{p}-{tokens}");
                        match res {
                            "l0" => acq(res, &tok),
                            "l1" => match rng.below(4) {
                                0 => shared(acq(res, &tok)),
                                1 => shared(owner(acq(res, &tok), &format!("o{p}"))),
                                2 => owner(acq(res, &tok), &format!("o{p}")),
                                _ => acq(res, &tok),
                            },
                            _ => limit(acq(res, &tok), 2),
                        }
                    }
                };
                let id = h.invoke(p as u64, t, op.clone());
                flight[p] = Some((id, res, op, None));
                started += 1;
            }
            None => {
                if flight.iter().all(Option::is_none) {
                    break;
                }
            }
            Some((id, res, op, None)) => {
                // Takes effect now.
                let s = states.entry(res).or_default();
                let token = names.id(&op.token);
                let owner_id = op.owner.as_deref().map(|o| names.id(o));
                let out = match op.command {
                    Command::Acquire => {
                        match s.decide(token, owner_id, op.mode == Mode::Shared, op.limit) {
                            Decision::Busy => nil(),
                            Decision::Error(_) => fail("ERR upgrade refused: other owners hold"),
                            Decision::Retry(model::Fence::Known(f))
                            | Decision::Grant(Some(model::Fence::Known(f))) => {
                                let input = to_input(&op, &mut names);
                                *s = LockModel.step(s, &input, &Output::Fence(f)).remove(0);
                                if !mine[p].iter().any(|m| m.1 == op.token) {
                                    mine[p].push((res, op.token.clone(), op.clone()));
                                }
                                fence(f)
                            }
                            Decision::Grant(None) => {
                                let f = s.last + 1 + rng.below(10);
                                let input = to_input(&op, &mut names);
                                *s = LockModel.step(s, &input, &Output::Fence(f)).remove(0);
                                mine[p].push((res, op.token.clone(), op.clone()));
                                fence(f)
                            }
                            Decision::Retry(_) | Decision::Grant(Some(_)) => unreachable!(),
                        }
                    }
                    Command::Info => {
                        let mut shown: Vec<(&str, &str, u64, bool)> = Vec::new();
                        let by_id: HashMap<u32, &str> =
                            names.0.iter().map(|(k, v)| (*v, k.as_str())).collect();
                        for hd in &s.holds {
                            let model::Fence::Known(f) = hd.fence else {
                                unreachable!()
                            };
                            shown.push((by_id[&hd.token], by_id[&hd.owner], f, hd.shared));
                        }
                        if shown.is_empty() {
                            nil()
                        } else {
                            holds(&shown)
                        }
                    }
                    _ => {
                        let input = to_input(&op, &mut names);
                        let held = s.holds.iter().any(|hd| hd.token == token);
                        let out = Output::Int(i64::from(held));
                        *s = LockModel.step(s, &input, &out).remove(0);
                        int(i64::from(held))
                    }
                };
                flight[p] = Some((id, res, op, Some(out)));
            }
            Some((id, _, _, Some(out))) => {
                let out = if rng.below(1000) < lost_per_mille {
                    lost()
                } else {
                    out
                };
                h.complete(p as u64, t, id, out);
            }
        }
    }
    h.events
}

fn to_input(op: &Op, names: &mut Names) -> Input {
    let token = names.id(&op.token);
    match op.command {
        Command::Acquire => Input::Acquire {
            token,
            owner: op.owner.as_deref().map(|o| names.id(o)),
            shared: op.mode == Mode::Shared,
            limit: op.limit,
        },
        Command::Release => Input::Release { token },
        Command::Extend => Input::Extend { token },
        _ => Input::Info,
    }
}

#[test]
fn a_long_history_is_checked_in_seconds() {
    let mut rng = Rng(42);
    // About 20k ops per resource, 16 processes, ~1% of replies lost.
    let mut events = long_history(&mut rng, 16, 60_000, 10);
    // And on each resource an acquire and a release that never completed
    // (pending to the end: the search keeps trying them).
    for (i, op) in [
        acq("l0", "dangling"),
        shared(acq("l1", "dangling")),
        limit(acq("l2", "dangling"), 2),
        rel("l1", "c3-1"),
    ]
    .into_iter()
    .enumerate()
    {
        events.push(Event::Invoke {
            t: 0,
            process: 100 + i as u64,
            client: 100,
            id: 1_000_000 + i as u64,
            op,
        });
    }
    let start = Instant::now();
    let (v, stats) = check_with_stats(&events);
    let took = start.elapsed();
    for s in &stats {
        eprintln!(
            "{}: {} ops ({} lost replies, {} left out), {} steps, {} cached, \
             at most {} states, {:?}",
            s.resource, s.ops, s.unknown, s.left_out, s.steps, s.cache, s.max_states, s.took
        );
    }
    eprintln!("total {took:?}");
    assert!(v.is_empty(), "{:?}", v.first().map(|v| &v.what));
    assert!(stats
        .iter()
        .all(|s| s.linearizable && s.unmodeled == 0 && s.ops > 15_000 && s.unknown > 100));
    assert!(took < Duration::from_secs(30));
}

#[test]
fn a_planted_double_grant_in_a_long_history_is_found() {
    let mut rng = Rng(43);
    let mut events = long_history(&mut rng, 16, 6_000, 10);
    // Make the first nil of l0 a fresh grant with a huge fence: someone
    // else held it (or the nil was an acquire's refusal).
    let nil_ids: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Invoke { id, op, .. }
                if op.resources[0] == "l0" && op.command == Command::Acquire =>
            {
                Some(*id)
            }
            _ => None,
        })
        .collect();
    let mut changed = false;
    for e in &mut events {
        if let Event::Complete { id, outcome, .. } = e {
            if nil_ids.contains(id) && *outcome == nil() && !changed {
                *outcome = fence(u64::MAX / 2);
                changed = true;
            }
        }
    }
    assert!(changed);
    let v = check(&events);
    assert_eq!(v.len(), 1);
    assert!(v[0].what.starts_with("l0"));
}
