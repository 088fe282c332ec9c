use super::*;

// ---- (3) cross-validation against consistency_model ----

/// An independent plain lock for `consistency_model`: exclusive holds by
/// token, a fresh fence any value above the last.
#[derive(Clone, Debug, Default)]
struct RefLock {
    holder: Option<(u8, u64)>,
    last: u64,
}

#[derive(Clone, Debug)]
enum RefOp {
    Acquire(u8),
    Release(u8),
    Extend(u8),
    Info,
}

#[derive(Clone, Debug, PartialEq)]
enum RefRet {
    Fence(u64),
    Nil,
    Int(i64),
    Holder(u8, u64),
}

impl consistency_model::SequentialSpec for RefLock {
    type Op = RefOp;
    type Ret = RefRet;
    fn invoke(&mut self, op: &RefOp) -> RefRet {
        match *op {
            RefOp::Acquire(t) => match self.holder {
                Some((h, f)) if h == t => RefRet::Fence(f),
                Some(_) => RefRet::Nil,
                None => {
                    self.last += 1;
                    self.holder = Some((t, self.last));
                    RefRet::Fence(self.last)
                }
            },
            RefOp::Release(t) => match self.holder {
                Some((h, _)) if h == t => {
                    self.holder = None;
                    RefRet::Int(1)
                }
                _ => RefRet::Int(0),
            },
            RefOp::Extend(t) => {
                RefRet::Int(i64::from(matches!(self.holder, Some((h, _)) if h == t)))
            }
            RefOp::Info => match self.holder {
                Some((h, f)) => RefRet::Holder(h, f),
                None => RefRet::Nil,
            },
        }
    }
    fn is_valid_step(&mut self, op: &RefOp, ret: &RefRet) -> bool {
        match (op, ret, self.holder) {
            // A fresh fence: any value above the last.
            (RefOp::Acquire(t), RefRet::Fence(f), None) => {
                if *f <= self.last {
                    return false;
                }
                self.last = *f;
                self.holder = Some((*t, *f));
                true
            }
            _ => &self.invoke(op) == ret,
        }
    }
}

/// A random plain-lock history on `l0`: `threads` processes run ops
/// against a real lock, each taking effect at a random point of its
/// interval; then, in `corrupt` of them, one reply is changed.
fn random_history(
    rng: &mut Rng,
    threads: u64,
    ops: usize,
    corrupt: bool,
) -> Vec<(u64, bool, RefOp, RefRet)> {
    // (thread, is_return, op, ret) in event order.
    let mut real = RefLock::default();
    let mut events = Vec::new();
    // Per thread: the op in flight, and its reply once applied.
    let mut flight: Vec<Option<(RefOp, Option<RefRet>)>> = vec![None; threads as usize];
    let mut started = 0;
    loop {
        let t = rng.below(threads) as usize;
        match flight[t].take() {
            None if started < ops => {
                let token = rng.below(3) as u8;
                let op = match rng.below(7) {
                    0..=2 => RefOp::Acquire(token),
                    3..=4 => RefOp::Release(token),
                    5 => RefOp::Extend(token),
                    _ => RefOp::Info,
                };
                events.push((t as u64, false, op.clone(), RefRet::Nil));
                flight[t] = Some((op, None));
                started += 1;
            }
            None => {
                if flight.iter().all(Option::is_none) {
                    break;
                }
            }
            Some((op, None)) => {
                let ret = consistency_model::SequentialSpec::invoke(&mut real, &op);
                flight[t] = Some((op, Some(ret)));
            }
            Some((op, Some(ret))) => events.push((t as u64, true, op, ret)),
        }
    }
    if corrupt {
        let returns: Vec<usize> = (0..events.len()).filter(|&i| events[i].1).collect();
        let i = returns[rng.below(returns.len() as u64) as usize];
        let e = &mut events[i];
        e.3 = match (&e.2, &e.3) {
            (RefOp::Acquire(_), RefRet::Nil) => RefRet::Fence(real.last + rng.below(3)),
            (RefOp::Acquire(_), RefRet::Fence(f)) if rng.below(2) == 0 => {
                RefRet::Fence(f.saturating_sub(1))
            }
            (RefOp::Acquire(_), _) => RefRet::Nil,
            (RefOp::Release(_) | RefOp::Extend(_), RefRet::Int(i)) => RefRet::Int(1 - i),
            (RefOp::Info, RefRet::Nil) => RefRet::Holder(rng.below(3) as u8, real.last),
            (RefOp::Info, _) => RefRet::Nil,
            (_, r) => r.clone(),
        };
    }
    events
}

fn to_events(history: &[(u64, bool, RefOp, RefRet)]) -> Vec<Event> {
    let mut h = H::new();
    let mut ids = HashMap::new();
    for (i, (thread, is_return, op, ret)) in history.iter().enumerate() {
        let t = i as u64;
        let tok = |x: &u8| format!("t{x}");
        if !is_return {
            let op = match op {
                RefOp::Acquire(x) => acq("l0", &tok(x)),
                RefOp::Release(x) => rel("l0", &tok(x)),
                RefOp::Extend(x) => ext("l0", &tok(x)),
                RefOp::Info => info("l0"),
            };
            ids.insert(*thread, h.invoke(*thread, t, op));
        } else {
            let outcome = match ret {
                RefRet::Fence(f) => fence(*f),
                RefRet::Nil => nil(),
                RefRet::Int(i) => int(*i),
                RefRet::Holder(x, f) => holds(&[(&tok(x), &tok(x), *f, false)]),
            };
            h.complete(*thread, t, ids[thread], outcome);
        }
    }
    h.events
}

#[test]
fn agrees_with_consistency_model_on_random_histories() {
    use consistency_model::{ConsistencyTester, LinearizabilityTester};
    let mut rng = Rng(7);
    let (mut agree, mut linearizable, mut not) = (0, 0, 0);
    for round in 0..600 {
        let threads = 3 + rng.below(2);
        let ops = 6 + rng.below(5) as usize;
        let history = random_history(&mut rng, threads, ops, round % 2 == 1);
        let mut tester = LinearizabilityTester::new(RefLock::default());
        for (thread, is_return, op, ret) in &history {
            if *is_return {
                tester.on_return(*thread, ret.clone()).unwrap();
            } else {
                tester.on_invoke(*thread, op.clone()).unwrap();
            }
        }
        let theirs = tester.is_consistent();
        let ours = check(&to_events(&history)).is_empty();
        assert_eq!(ours, theirs, "round {round}: {history:?}");
        agree += 1;
        if theirs {
            linearizable += 1;
        } else {
            not += 1;
        }
    }
    eprintln!("agreed on {agree} histories: {linearizable} linearizable, {not} not");
    assert!(linearizable > 100 && not > 100);
}

#[test]
fn the_search_handles_an_empty_history() {
    let s = wgl::check(&LockModel, &[], 10);
    assert!(s.linearizable);
}
