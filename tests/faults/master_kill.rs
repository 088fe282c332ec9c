//! A master SIGKILLed under load and its replica promoted: no lock
//! acknowledged with `WAIT` is lost, and fences keep rising.
use super::*;

const MK_WORKERS: usize = 4;
const MK_TTL: u64 = 30_000;

struct Acked {
    res: String,
    tok: String,
    fence: i64,
    release_sent: bool,
}

#[derive(Default)]
struct MkStats {
    acked: Vec<Acked>,
    grants: u64,
    unacked: u64,
    extends: u64,
    releases: u64,
}

fn mk_worker(t: usize, url: &str, killed: &AtomicBool, max_pre: &AtomicI64) -> MkStats {
    let mut st = MkStats::default();
    let mut rng = Rng::new(seed(3) ^ (t as u64 + 1));
    let mut c = connect(url);
    let hard_end = Instant::now() + Duration::from_secs(30);
    // Errors are expected only once the master is being killed.
    let dead = |e: RedisError| {
        assert!(
            killed.load(Ordering::SeqCst),
            "worker {t}: {e} before the kill"
        );
    };
    for i in 0.. {
        assert!(Instant::now() < hard_end, "worker {t} never saw the kill");
        let (res, tok) = (format!("k{t}-{i}"), format!("tok{t}-{i}"));
        let fence = match try_acquire(&mut c, &res, &tok, MK_TTL) {
            Ok(Some(f)) => f,
            Ok(None) => panic!("{res} is new, yet not granted"),
            Err(e) => {
                dead(e);
                return st;
            }
        };
        max_pre.fetch_max(fence, Ordering::SeqCst);
        st.grants += 1;
        match wait1(&mut c) {
            Ok(n) if n >= 1 => {}
            Ok(_) => {
                st.unacked += 1;
                continue;
            }
            Err(e) => {
                dead(e);
                return st;
            }
        }
        st.acked.push(Acked {
            res: res.clone(),
            tok: tok.clone(),
            fence,
            release_sent: false,
        });
        if rng.below(3) == 0 {
            match try_extend(&mut c, &res, &tok, MK_TTL).and_then(|n| wait1(&mut c).map(|_| n)) {
                Ok(n) => assert_eq!(n, 1, "EXTEND {res} by its owner"),
                Err(e) => {
                    dead(e);
                    return st;
                }
            }
            st.extends += 1;
        }
        if rng.below(2) == 0 {
            // From here on the lock may or may not be held after the kill.
            st.acked.last_mut().unwrap().release_sent = true;
            match try_release(&mut c, &res, &tok).and_then(|n| wait1(&mut c).map(|_| n)) {
                Ok(n) => assert_eq!(n, 1, "RELEASE {res} by its owner"),
                Err(e) => {
                    dead(e);
                    return st;
                }
            }
            st.releases += 1;
        }
    }
    unreachable!()
}

/// What one worker saw on the promoted replica.
struct PostStats {
    grants: u64,
    min_fence: i64,
    /// ACQUIREs of free locks refused by the promotion quarantine.
    quarantined: u64,
    first_grant: Option<Instant>,
}

/// New owners on fresh resources on the promoted replica: refused while the
/// promotion quarantine runs, then granted for `MK_POST` more.
fn mk_post_worker(t: usize, url: &str) -> PostStats {
    let mut c = connect(url);
    let give_up = Instant::now() + Duration::from_secs(15);
    let mut st = PostStats {
        grants: 0,
        min_fence: i64::MAX,
        quarantined: 0,
        first_grant: None,
    };
    loop {
        let n = st.grants;
        let (res, tok) = (format!("p{t}-{n}"), format!("ptok{t}-{n}"));
        match try_acquire(&mut c, &res, &tok, MK_TTL) {
            Ok(Some(f)) => {
                let first = *st.first_grant.get_or_insert_with(Instant::now);
                st.min_fence = st.min_fence.min(f);
                st.grants += 1;
                assert_eq!(try_release(&mut c, &res, &tok).unwrap(), 1);
                if first.elapsed() > MK_POST {
                    return st;
                }
            }
            Ok(None) => panic!("{res} is new, yet not granted"),
            Err(e) if e.to_string().contains("QUARANTINE") => {
                assert!(st.first_grant.is_none(), "quarantined after a grant: {e}");
                assert!(Instant::now() < give_up, "quarantine never ended: {e}");
                st.quarantined += 1;
                sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("ACQUIRE {res} on the promoted replica: {e}"),
        }
    }
}

const MK_POST: Duration = Duration::from_millis(500);
/// The promotion quarantine set on the replica, when this build has one.
const MK_QUARANTINE: Duration = Duration::from_millis(500);

#[test]
fn master_kill_loses_no_acknowledged_lock_and_fences_keep_rising() {
    let _quiet = crate::quiet();
    let mut m = Server::builder().arg("--appendonly").arg("yes").start();
    let r = Server::builder()
        .arg("--appendonly")
        .arg("yes")
        .replica_of(&m)
        .start();
    r.wait_for_sync(Duration::from_secs(20));
    // A build with a promotion quarantine refuses new grants after an
    // unplanned failover (for the longest TTL by default: 30 s here). Keep
    // it short, and check it is honoured.
    let quarantine: Option<Duration> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.restart-quarantine")
        .arg(MK_QUARANTINE.as_millis() as u64)
        .query::<()>(&mut r.conn())
        .ok()
        .map(|()| MK_QUARANTINE);
    let killed = AtomicBool::new(false);
    let max_pre = AtomicI64::new(0);
    let url = m.url();
    let t0 = Instant::now();
    let stats: Vec<MkStats> = thread::scope(|sc| {
        let handles: Vec<_> = (0..MK_WORKERS)
            .map(|t| {
                let (url, killed, max_pre) = (&url, &killed, &max_pre);
                sc.spawn(move || mk_worker(t, url, killed, max_pre))
            })
            .collect();
        sleep(Duration::from_millis(1_500));
        killed.store(true, Ordering::SeqCst);
        m.kill9();
        handles.into_iter().map(join).collect()
    });
    let max_pre = max_pre.into_inner();

    let mut c = r.conn();
    let promote_sent = Instant::now();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut c)
        .unwrap();
    let promoted_at = promote_sent - t0;
    let held: Vec<&Acked> = stats
        .iter()
        .flat_map(|s| &s.acked)
        .filter(|a| !a.release_sent)
        .collect();
    let mut lost = vec![];
    // New owners (fresh resources) start at once, while the main thread
    // checks the old owners' locks.
    let post: Vec<PostStats> = thread::scope(|sc| {
        let handles: Vec<_> = (0..MK_WORKERS)
            .map(|t| {
                let url = r.url();
                sc.spawn(move || mk_post_worker(t, &url))
            })
            .collect();
        assert_eq!(
            info_field(&mut c, "replication", "role").as_deref(),
            Some("master")
        );
        // Every acknowledged grant whose RELEASE was never sent must be
        // there: same owner, same fence, still with a deadline.
        for a in &held {
            match info(&mut c, &a.res) {
                Some(i) if i.token == a.tok.as_bytes() && i.fence == a.fence && i.ttl > 0 => {}
                other => lost.push(format!("{} {} {}: {other:?}", a.res, a.tok, a.fence)),
            }
        }
        // The owner's idempotent retry on the new master gets its fence
        // back; anyone else is refused.
        if lost.is_empty() {
            for a in held.iter().take(50) {
                let f = try_acquire(&mut c, &a.res, &a.tok, MK_TTL).unwrap();
                assert_eq!(f, Some(a.fence), "{}: owner's retry after failover", a.res);
                let other = try_acquire(&mut c, &a.res, "intruder", MK_TTL).unwrap();
                assert_eq!(other, None, "{}: granted twice after failover", a.res);
            }
        }
        handles.into_iter().map(join).collect()
    });
    let post_grants: u64 = post.iter().map(|p| p.grants).sum();
    let post_min = post.iter().map(|p| p.min_fence).min().unwrap();
    let quarantined: u64 = post.iter().map(|p| p.quarantined).sum();
    let first_grant = post.iter().filter_map(|p| p.first_grant).min().unwrap();

    let sum = |f: fn(&MkStats) -> u64| stats.iter().map(f).sum::<u64>();
    let acked: usize = stats.iter().map(|s| s.acked.len()).sum();
    eprintln!(
        "master kill (seed {:#x}): before the kill {} grants ({acked} acknowledged by the \
         replica, {} not within 1 s), {} extends, {} releases; promoted at {promoted_at:?}; \
         {} acknowledged and still held, {} of them lost on the new master; quarantine \
         {quarantine:?}: {quarantined} refusals, first new grant {:?} after promotion; \
         {post_grants} new grants, lowest fence {post_min} vs highest before {max_pre}",
        seed(3),
        sum(|s| s.grants),
        sum(|s| s.unacked),
        sum(|s| s.extends),
        sum(|s| s.releases),
        held.len(),
        lost.len(),
        first_grant - promote_sent,
    );
    assert!(
        lost.is_empty(),
        "acknowledged locks lost in failover:\n{}",
        lost.join("\n")
    );
    assert!(
        !held.is_empty(),
        "no acknowledged lock was held at the kill"
    );
    assert!(post_grants > 0, "nothing granted after promotion");
    assert!(
        post_min > max_pre,
        "new master granted {post_min}, not above {max_pre} granted before the kill"
    );
    if let Some(q) = quarantine {
        // The quarantine starts at the promotion, after `promote_sent`; the
        // module counts whole wall-clock ms (5 ms of slack for that).
        assert!(
            first_grant + Duration::from_millis(5) >= promote_sent + q,
            "a new owner was granted {:?} after promotion, inside the {q:?} quarantine",
            first_grant - promote_sent
        );
    }
}
