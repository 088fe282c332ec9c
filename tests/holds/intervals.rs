//! Hold intervals as clients see them, and the checks run on them.
use std::time::{Duration, Instant};

/// A hold as its client saw it: live on the server at least from `start`
/// (grant reply received) to `end` (RELEASE sent, answered 1).
#[derive(Debug, Clone)]
pub struct Span {
    pub client: usize,
    pub token: String,
    pub exclusive: bool,
    pub fence: i64,
    pub start: Instant,
    pub end: Instant,
}

/// No exclusive hold overlaps any other hold, and a hold that ended before
/// an exclusive one began (or began after it ended) has a smaller (larger)
/// fence. Returns how many shared holds overlapped an earlier shared hold.
pub fn check_exclusion(spans: &[Span]) -> usize {
    let mut by_start: Vec<&Span> = spans.iter().collect();
    by_start.sort_by_key(|s| s.start);
    let mut by_end: Vec<&Span> = spans.iter().collect();
    by_end.sort_by_key(|s| s.end);
    // Highest fence among the holds ending at or before each position.
    let max_fence_ended: Vec<i64> = by_end
        .iter()
        .scan(i64::MIN, |m, s| {
            *m = (*m).max(s.fence);
            Some(*m)
        })
        .collect();
    // Lowest fence among the holds starting at or after each position.
    let mut min_fence_after = vec![i64::MAX; by_start.len() + 1];
    for i in (0..by_start.len()).rev() {
        min_fence_after[i] = min_fence_after[i + 1].min(by_start[i].fence);
    }
    let (mut max_end, mut max_shared_end) = (None::<Instant>, None::<Instant>);
    let mut shared_overlaps = 0;
    for (i, s) in by_start.iter().enumerate() {
        if s.exclusive {
            if let Some(prev) = max_end.filter(|e| *e >= s.start) {
                panic!("exclusive hold {s:?} began before an earlier hold ended ({prev:?})");
            }
            if let Some(next) = by_start.get(i + 1).filter(|n| n.start <= s.end) {
                panic!("hold {next:?} began inside exclusive hold {s:?}");
            }
            let ended = by_end.partition_point(|x| x.end < s.start);
            if ended > 0 {
                assert!(
                    max_fence_ended[ended - 1] < s.fence,
                    "a hold ended before {s:?} has a higher fence"
                );
            }
            let after = by_start.partition_point(|x| x.start <= s.end);
            assert!(
                min_fence_after[after] > s.fence,
                "a hold begun after {s:?} has a lower fence"
            );
        } else if max_shared_end.is_some_and(|e| e > s.start) {
            shared_overlaps += 1;
        }
        max_end = max_end.max(Some(s.end));
        if !s.exclusive {
            max_shared_end = max_shared_end.max(Some(s.end));
        }
    }
    shared_overlaps
}

/// Most intervals live at one instant (an interval includes both ends).
pub fn max_concurrency(spans: &[(Instant, Instant)]) -> usize {
    let mut events: Vec<(Instant, i32)> = Vec::with_capacity(spans.len() * 2);
    for (a, b) in spans.iter().filter(|(a, b)| a <= b) {
        events.push((*a, 1));
        events.push((*b, -1));
    }
    // At equal instants, starts first: touching intervals count as overlap.
    events.sort_by_key(|&(t, d)| (t, -d));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// The overlap check can fail: a writer inside readers' holds is found.
#[test]
fn the_checks_find_overlaps() {
    let t = Instant::now();
    let at = |ms: u64| t + Duration::from_millis(ms);
    let span = |client, exclusive, fence, a, b| Span {
        client,
        token: format!("t{client}"),
        exclusive,
        fence,
        start: at(a),
        end: at(b),
    };
    let ok = [span(0, false, 1, 0, 10), span(1, false, 2, 5, 15)];
    assert_eq!(check_exclusion(&ok), 1);
    let bad = [span(0, false, 1, 0, 10), span(1, true, 2, 9, 15)];
    assert!(std::panic::catch_unwind(|| check_exclusion(&bad)).is_err());
    let bad = [span(0, true, 1, 0, 10), span(1, false, 2, 3, 4)];
    assert!(std::panic::catch_unwind(|| check_exclusion(&bad)).is_err());
    let bad_fence = [span(0, true, 5, 0, 10), span(1, false, 2, 12, 14)];
    assert!(std::panic::catch_unwind(|| check_exclusion(&bad_fence)).is_err());
    assert_eq!(max_concurrency(&[(at(0), at(5)), (at(5), at(9))]), 2);
}
