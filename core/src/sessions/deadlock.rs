//! Deadlock refusal: a bound `WAIT` that would close a cycle of sessions
//! (A holds X and waits for Y; B holds Y and asks to wait for X) is refused
//! at once. The server knows, on one node, which sessions hold each
//! resource (bound holds) and which resources each session waits for (its
//! queued requests): a wait-for graph between sessions, walked here from
//! the holders of what the new request would wait for. Holds and waits not
//! bound to a session, and anything on another node, are not in it.
//!
//! The walk is breadth-first and bounded (`budget` resources looked at), so
//! its cost per request is bounded whatever the graph; a cycle longer than
//! the budget reaches is not found (the waits then end by their timeouts,
//! as without sessions).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// The wait-for graph, as the server reads it.
pub trait WaitsFor<R> {
    /// The sessions with a bound hold on `resource`.
    fn holders(&mut self, resource: &R) -> Vec<Box<[u8]>>;
    /// The resources session `session` waits for.
    fn waits(&mut self, session: &[u8]) -> Vec<R>;
}

/// The resources of a cycle that session `me` would close by waiting for
/// `targets`, in wait order (first a target, last a resource `me` holds),
/// or `None`. At most `budget` resources are looked at.
pub fn find_cycle<R: Clone + Eq + Hash>(
    me: &[u8],
    targets: &[R],
    graph: &mut impl WaitsFor<R>,
    budget: usize,
) -> Option<Vec<R>> {
    // A session reached, and the resource path that reached it.
    let mut queue: VecDeque<(Box<[u8]>, usize)> = VecDeque::new();
    // Each path step: (resource, index of the step before it).
    let mut steps: Vec<(R, Option<usize>)> = Vec::new();
    let mut seen_sessions: HashSet<Box<[u8]>> = HashSet::new();
    let mut seen_resources: HashMap<R, ()> = HashMap::new();
    let mut looked = 0;
    for r in targets {
        looked += 1;
        steps.push((r.clone(), None));
        let at = steps.len() - 1;
        for holder in graph.holders(r) {
            // Waiting for what it holds itself (under another token) is no
            // cycle the server can judge: another of its threads may hold
            // it and let go.
            if *holder != *me && seen_sessions.insert(holder.clone()) {
                queue.push_back((holder, at));
            }
        }
    }
    while let Some((session, at)) = queue.pop_front() {
        for r in graph.waits(&session) {
            if looked >= budget {
                return None;
            }
            if seen_resources.insert(r.clone(), ()).is_some() {
                continue;
            }
            looked += 1;
            steps.push((r.clone(), Some(at)));
            let here = steps.len() - 1;
            for holder in graph.holders(&r) {
                if *holder == *me {
                    return Some(path(&steps, here));
                }
                if seen_sessions.insert(holder.clone()) {
                    queue.push_back((holder, here));
                }
            }
        }
    }
    None
}

fn path<R: Clone>(steps: &[(R, Option<usize>)], mut at: usize) -> Vec<R> {
    let mut out = Vec::new();
    while let Some((r, before)) = steps.get(at) {
        out.push(r.clone());
        match before {
            Some(b) => at = *b,
            None => break,
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds and waits as plain maps: resource -> holders, session -> waits.
    #[derive(Default)]
    struct Graph {
        holds: HashMap<&'static str, Vec<&'static str>>,
        waits: HashMap<&'static str, Vec<&'static str>>,
        asked: usize,
    }

    impl WaitsFor<&'static str> for Graph {
        fn holders(&mut self, r: &&'static str) -> Vec<Box<[u8]>> {
            self.asked += 1;
            self.holds
                .get(r)
                .into_iter()
                .flatten()
                .map(|s| Box::from(s.as_bytes()))
                .collect()
        }
        fn waits(&mut self, s: &[u8]) -> Vec<&'static str> {
            let s = std::str::from_utf8(s).unwrap();
            self.waits.get(s).cloned().unwrap_or_default()
        }
    }

    fn graph(
        holds: &[(&'static str, &'static str)],
        waits: &[(&'static str, &'static str)],
    ) -> Graph {
        let mut g = Graph::default();
        for (r, s) in holds {
            g.holds.entry(r).or_default().push(s);
        }
        for (s, r) in waits {
            g.waits.entry(s).or_default().push(r);
        }
        g
    }

    #[test]
    fn two_sessions_waiting_for_each_other() {
        // A holds X; B holds Y and waits for X; A asks to wait for Y.
        let mut g = graph(&[("X", "A"), ("Y", "B")], &[("B", "X")]);
        assert_eq!(find_cycle(b"A", &["Y"], &mut g, 100), Some(vec!["Y", "X"]));
        // B asking for X first is no cycle: A waits for nothing.
        let mut g = graph(&[("X", "A"), ("Y", "B")], &[]);
        assert_eq!(find_cycle(b"B", &["X"], &mut g, 100), None);
    }

    #[test]
    fn a_longer_cycle_names_every_resource_in_wait_order() {
        let mut g = graph(
            &[("X", "A"), ("Y", "B"), ("Z", "C")],
            &[("B", "Z"), ("C", "X")],
        );
        assert_eq!(
            find_cycle(b"A", &["Y"], &mut g, 100),
            Some(vec!["Y", "Z", "X"])
        );
    }

    #[test]
    fn no_cycle_without_a_path_back() {
        // A chain that ends (C waits for nothing), shared holders.
        let mut g = graph(
            &[("X", "A"), ("Y", "B"), ("Z", "C")],
            &[("B", "Z"), ("D", "X")],
        );
        assert_eq!(find_cycle(b"A", &["Y"], &mut g, 100), None);
    }

    #[test]
    fn waiting_for_what_the_session_holds_itself_is_not_refused() {
        // Another thread of the session may hold it and let go.
        let mut g = graph(&[("X", "A"), ("X", "B")], &[]);
        assert_eq!(find_cycle(b"A", &["X"], &mut g, 100), None);
    }

    #[test]
    fn a_cycle_not_through_the_asker_is_not_its_to_refuse() {
        // B and C wait for each other already; A only joins behind them.
        let mut g = graph(&[("Y", "B"), ("Z", "C")], &[("B", "Z"), ("C", "Y")]);
        assert_eq!(find_cycle(b"A", &["Y"], &mut g, 100), None);
    }

    #[test]
    fn the_walk_is_bounded() {
        // A long chain back to A: found with budget, not beyond it.
        let names: Vec<&'static str> = (0..50)
            .map(|i| &*Box::leak(format!("r{i}").into_boxed_str()))
            .collect();
        let sessions: Vec<&'static str> = (0..50)
            .map(|i| &*Box::leak(format!("s{i}").into_boxed_str()))
            .collect();
        let mut holds = vec![("home", "A")];
        let mut waits = Vec::new();
        for i in 0..50 {
            holds.push((names[i], sessions[i]));
            waits.push((sessions[i], if i + 1 < 50 { names[i + 1] } else { "home" }));
        }
        let mut g = graph(&holds, &waits);
        assert!(find_cycle(b"A", &[names[0]], &mut g, 100).is_some());
        let mut g = graph(&holds, &waits);
        assert_eq!(find_cycle(b"A", &[names[0]], &mut g, 20), None);
        assert!(g.asked <= 21);
    }
}
