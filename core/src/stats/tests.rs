use super::histogram::Histogram;
use super::*;

fn r(name: &str) -> Resource<'_> {
    Resource {
        db: 0,
        name: name.as_bytes(),
    }
}

/// Every percentile read back is within 1/16 of the value of that rank,
/// over values from 0 to days, and `max` is exact.
#[test]
fn percentiles_are_within_a_sixteenth() {
    for &(lo, step, n) in &[
        (0u64, 1u64, 1000u64),
        (1000, 997, 5000),
        (7, 123_457, 20_000),
    ] {
        let mut h = Histogram::new(3);
        let values: Vec<u64> = (0..n).map(|i| lo + i * step).collect();
        for v in values.iter().rev() {
            h.record(*v);
        }
        for q in [0.5, 0.9, 0.99, 1.0] {
            let rank = ((q * n as f64).ceil() as usize).max(1);
            let truth = values[rank - 1] as f64;
            let got = h.quantile(q) as f64;
            assert!(
                (got - truth).abs() <= truth / 16.0 + 0.5,
                "q {q}: {got} vs {truth}"
            );
        }
        assert_eq!(h.summary().max, *values.last().unwrap());
        assert_eq!(h.count(), n);
    }
}

#[test]
fn an_empty_histogram_reads_zeros_and_huge_values_stay_counted() {
    let mut h = Histogram::new(3);
    assert_eq!(h.summary(), Default::default());
    h.record(u64::MAX);
    h.record(0);
    let s = h.summary();
    assert_eq!((s.count, s.max, s.sum), (2, u64::MAX, u64::MAX));
    assert!(s.p99 > 1 << 41);
    assert_eq!(h.quantile(0.5), 0);
}

#[test]
fn merged_histograms_count_both() {
    let (mut a, mut b) = (Histogram::new(3), Histogram::new(3));
    for v in 0..100 {
        a.record(v);
        b.record(v + 1000);
    }
    a.merge(&b);
    assert_eq!(a.count(), 200);
    assert_eq!(a.summary().max, 1099);
    assert!(a.quantile(0.25) < 100 && a.quantile(0.75) >= 1000);
}

/// The memory is the same however many distinct resources came and went.
#[test]
fn memory_is_fixed_whatever_is_counted() {
    let mut s = Stats::new(0);
    let before = s.memory();
    for i in 0..100_000u64 {
        let name = format!("res:{i}");
        s.contended(&r(&name), Kind::Lock);
        s.granted_after_wait(&r(&name), Kind::Semaphore, i);
        s.hold_ended(&r(&name), Kind::Shared, i, End::Expired);
    }
    assert_eq!(s.memory(), before);
    for by in [HotBy::Contended, HotBy::Wait, HotBy::Expired] {
        assert_eq!(s.hot(by, 100).len(), HOT_ENTRIES);
    }
}

/// A resource hotter than 1/32 of the total stays in the table with its
/// true figure between `score - error` and `score`, among 10,000 cold ones.
#[test]
fn a_hot_resource_is_found_among_many_cold_ones() {
    let mut s = Stats::new(0);
    for i in 0..10_000u64 {
        s.contended(&r(&format!("cold:{i}")), Kind::Lock);
        if i % 10 == 0 {
            s.contended(&r("hot"), Kind::Lock);
        }
        if i % 50 == 0 {
            s.hold_ended(&r("dies"), Kind::Lock, 5, End::Expired);
        }
    }
    let top = s.hot(HotBy::Contended, 3);
    let hot = top[0];
    assert_eq!(&*hot.name, b"hot");
    assert!(
        hot.score >= 1000 && hot.score - hot.error <= 1000,
        "{hot:?}"
    );
    assert!(hot.figures.contended <= 1000);
    let expired = s.hot(HotBy::Expired, 1);
    assert_eq!((&*expired[0].name, expired[0].score), (&b"dies"[..], 200));
    assert_eq!(expired[0].figures.expired, 200);
    assert_eq!(s.total().contended, 11_000);
}

#[test]
fn figures_add_up_per_kind_and_in_total() {
    let mut s = Stats::new(5);
    s.granted(Kind::Lock);
    s.granted(Kind::Shared);
    s.granted_after_wait(&r("a"), Kind::Semaphore, 3000);
    s.handed_over(Kind::Semaphore);
    s.gave_up(&r("a"), Kind::Semaphore, 7000);
    s.hold_ended(&r("a"), Kind::Lock, 10, End::Released);
    s.hold_ended(&r("a"), Kind::Shared, 20, End::Revoked);
    s.hold_ended(&r("a"), Kind::Semaphore, 40_000, End::Expired);
    let total = s.total().report();
    for (name, want) in [
        ("grants", 3),
        ("waited", 1),
        ("handovers", 1),
        ("wait_timeouts", 1),
        ("releases", 1),
        ("revoked", 1),
        ("expired", 1),
        ("contended", 0),
    ] {
        assert_eq!(total.get(name), Some(want), "{name}");
    }
    assert_eq!((total.wait.count, total.wait.max), (3, 3000));
    assert_eq!((total.hold.count, total.hold.max), (3, 40_000));
    let sem = s.of(Kind::Semaphore).report();
    assert_eq!((sem.get("grants"), sem.hold.max), (Some(1), 40_000));
    assert_eq!(s.of(Kind::Lock).report().wait.max, 0);
    let wait = s.hot(HotBy::Wait, 1);
    assert_eq!((wait[0].score, wait[0].figures.wait_timeouts), (10_000, 1));
    s.reset(9);
    assert_eq!((s.since_ms(), s.total().grants), (9, 0));
    assert!(s.hot(HotBy::Wait, 5).is_empty());
}

#[test]
fn long_names_are_cut_and_kinds_follow_mode_and_limit() {
    let mut s = Stats::new(0);
    let long = "x".repeat(1000);
    s.contended(&r(&long), Kind::Lock);
    s.contended(&r(&long), Kind::Lock);
    let e = s.hot(HotBy::Contended, 1)[0];
    assert_eq!((e.name.len(), e.cut, e.score), (hot::NAME_BYTES, true, 2));
    assert_eq!(Kind::of(Mode::Exclusive, 1), Kind::Lock);
    assert_eq!(Kind::of(Mode::Shared, 1), Kind::Shared);
    assert_eq!(Kind::of(Mode::Exclusive, 5), Kind::Semaphore);
}
