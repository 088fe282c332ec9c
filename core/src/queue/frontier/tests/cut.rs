//! A step that stops growing its part before the part is closed (a long
//! chain of grants, cut to bound one event-loop turn): its decision is the
//! whole component's with the requests it uncovered but did not decide
//! kept waiting, and steps that start where those wait (`Frontier::grown`)
//! bring the queues to the rest the whole component's steps would.

use super::*;

/// A step cut short: the part it decided last, its plan, the requests the
/// last widening found (the next part's new ones, which the cut leaves
/// waiting) and where they wait (`Frontier::grown`).
struct Cut {
    part: Component<u8>,
    plan: Result<Plan, Error>,
    waiting: BTreeSet<u64>,
    grown: Vec<u8>,
}

/// Plans `command` on `starts` over the frontier's part, widened at most
/// `rounds` times.
fn plan_cut(world: &World, starts: &[u8], command: &Command<'_>, rounds: usize) -> Cut {
    let mut frontier = Frontier::around(starts);
    let mut round = 0;
    loop {
        let keys = frontier.resources().to_vec();
        let holds = |i: usize| Some(&world.holds[*keys.get(i)? as usize]);
        let part = world.queues.part(&mut frontier, holds);
        let plan = world.decide(&part, command);
        let decided: Vec<usize> = match &plan {
            Ok(plan) => plan
                .granted
                .iter()
                .map(|(i, _)| *i)
                .chain(plan.refused.iter().map(|(i, _)| *i))
                .collect(),
            Err(_) => Vec::new(),
        };
        let done = Cut {
            part,
            plan,
            waiting: BTreeSet::new(),
            grown: Vec::new(),
        };
        if done.plan.is_err() || !world.queues.widen(&mut frontier, &done.part, &decided) {
            return done;
        }
        // A step that decided nothing goes on (only requests of owners
        // it left out can be decided): stopping there would start over.
        if round >= rounds && !decided.is_empty() {
            let keys = frontier.resources().to_vec();
            let holds = |i: usize| Some(&world.holds[*keys.get(i)? as usize]);
            let next = world.queues.part(&mut frontier.clone(), holds);
            let before: BTreeSet<u64> = done.part.requests.iter().map(|r| r.id).collect();
            return Cut {
                waiting: next
                    .requests
                    .iter()
                    .map(|r| r.id)
                    .filter(|id| !before.contains(id))
                    .collect(),
                grown: frontier.grown().copied().collect(),
                ..done
            };
        }
        round += 1;
    }
}

/// The whole component of `starts` with the requests of `waiting` kept
/// waiting: left out, each reserving its members from where it waits.
fn whole_with_waiting(world: &World, starts: &[u8], waiting: &BTreeSet<u64>) -> Component<u8> {
    let mut whole = world.queues.component(starts);
    let mut first: Vec<Option<Rank>> = vec![None; whole.resources.len()];
    for r in whole.requests.iter().filter(|r| waiting.contains(&r.id)) {
        for m in &r.members {
            first[*m] = Some(first[*m].map_or(r.rank, |f| f.min(r.rank)));
        }
    }
    whole.requests.retain(|r| !waiting.contains(&r.id));
    let kept: Vec<Rank> = whole.requests.iter().map(|r| r.rank).collect();
    whole.reserved_from = first
        .iter()
        .zip(&whole.reserved_from)
        .map(|(f, was)| {
            let here = f.map(|f| kept.partition_point(|rank| *rank < f));
            match (here, *was) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        })
        .collect();
    whole.reserved_rank = first;
    whole
}

/// Steps cut after `rounds` widenings until none leaves anything behind,
/// from `starts` and then from wherever a cut left requests waiting, each
/// applied.
fn settle_cut(world: &mut World, starts: Vec<u8>, rounds: usize) {
    let mut todo = vec![starts];
    let mut cuts = 0;
    while let Some(starts) = todo.pop() {
        let cut = plan_cut(world, &starts, &Command::Settle, rounds);
        let plan = cut.plan.expect("a settle step is never refused");
        world.apply(&cut.part, &Command::Settle, &plan);
        if !cut.grown.is_empty() {
            cuts += 1;
            assert!(cuts < 10_000, "cut steps never ended");
        }
        // Each continuation is a step of its own (a `Settle` job).
        todo.extend(cut.grown.into_iter().map(|r| vec![r]));
    }
}

#[test]
fn a_step_cut_short_decides_as_the_whole_with_the_uncovered_kept_waiting() {
    let (mut cuts, mut steps) = (0, 0);
    for seed in 1..400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        // Without priorities: a cut leaves out requests of an owner granted
        // in the step beyond its cap (`Frontier::owners`), and with ranks
        // those can stand behind a request the cut keeps waiting, where
        // the whole component grants them as owners that hold; this
        // test's model of a cut (`Cut::waiting`) does not count them.
        let mut world = World::with_priorities(&mut rng, false);
        world.rest();
        for _ in 0..30 {
            let rounds = rng.below(3) as usize;
            let starts: Vec<u8> = if rng.one_in(2) {
                // A holder releases.
                let Some((r, token)) = world.some_holder(&mut rng) else {
                    world.enqueue(&mut rng);
                    world.rest();
                    continue;
                };
                let command = Command::Release {
                    token,
                    members: 1,
                    to: None,
                };
                let cut = plan_cut(&world, &[r], &command, rounds);
                let whole = whole_with_waiting(&world, &[r], &cut.waiting);
                let by_whole = world.decide(&whole, &command);
                assert_eq!(
                    shown(&whole, &by_whole),
                    shown(&cut.part, &cut.plan),
                    "release on {r} cut after {rounds} rounds, {:?} left waiting:\n{}",
                    cut.waiting,
                    world.shown()
                );
                steps += 1;
                let Ok(plan) = cut.plan else {
                    continue;
                };
                world.apply(&cut.part, &command, &plan);
                cut.grown
            } else {
                // A waiter leaves: its queues are settled, cut short too.
                let Some(keys) = world.some_waiter_leaves(&mut rng) else {
                    world.enqueue(&mut rng);
                    world.rest();
                    continue;
                };
                let cut = plan_cut(&world, &keys, &Command::Settle, rounds);
                let whole = whole_with_waiting(&world, &keys, &cut.waiting);
                let by_whole = world.decide(&whole, &Command::Settle);
                assert_eq!(
                    shown(&whole, &by_whole),
                    shown(&cut.part, &cut.plan),
                    "settle on {keys:?} cut after {rounds} rounds, {:?} left waiting:\n{}",
                    cut.waiting,
                    world.shown()
                );
                steps += 1;
                let plan = cut.plan.expect("a settle step is never refused");
                world.apply(&cut.part, &Command::Settle, &plan);
                cut.grown
            };
            // The continuations, each cut short as well, leave the queues
            // where the whole component's steps would: at rest.
            cuts += usize::from(!starts.is_empty());
            for r in starts {
                settle_cut(&mut world, vec![r], rounds);
            }
            world.assert_at_rest("the continuations of a cut step");
            if rng.one_in(3) {
                world.enqueue(&mut rng);
                world.rest();
            }
        }
    }
    eprintln!("{cuts} of {steps} steps cut short");
    // Cuts happened, and continued: not only steps that closed at once.
    assert!(cuts > steps / 100, "{cuts} steps cut short in {steps}");
}
