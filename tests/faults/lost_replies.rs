//! Lost replies: a proxy drops the connection after the server executed
//! DLOCK.ACQUIRE / DLOCK.RELEASE but before the client hears the answer;
//! idempotent retries with the same token must keep mutual exclusion.
use super::*;

const LR_RES: &str = "lr-res";
const LR_TTL: u64 = 5_000;
const LR_THREADS: usize = 8;
const LR_ROUNDS: usize = 100;
/// Chance, per DLOCK.ACQUIRE / DLOCK.RELEASE through the proxy, that the
/// server's reply is withheld and the connection dropped.
const LR_DROP_PER_MILLE: u64 = 150;

fn lock_command(args: &[Vec<u8>]) -> bool {
    args.first().is_some_and(|a| {
        a.eq_ignore_ascii_case(b"DLOCK.ACQUIRE") || a.eq_ignore_ascii_case(b"DLOCK.RELEASE")
    })
}

struct Hold {
    start: Instant,
    end: Instant,
    fence: i64,
    token: String,
}

#[derive(Default)]
struct LrStats {
    holds: Vec<Hold>,
    /// ACQUIRE replies lost that carried a fence (the grant happened).
    lost_grants: u64,
    /// Rounds with at least one lost grant reply.
    rounds_with_lost_grant: u64,
    /// ...and the retry with the same token then returned that same fence.
    regrants_same_fence: u64,
    lost_nils: u64,
    /// RELEASE replies lost that carried 1 (the release happened).
    lost_releases: u64,
    /// A retried RELEASE answered 0 because the lost one had released.
    zero_after_lost_release: u64,
    polls: u64,
}

/// The replies the proxy dropped for `cmd` with this token (argument 2).
fn drops_for(p: &Proxy, cmd: &[u8], tok: &str) -> Vec<Dropped> {
    p.dropped_where(|d| d.arg(0).eq_ignore_ascii_case(cmd) && d.arg(2) == tok.as_bytes())
}

fn lost_reply_client(t: usize, p: &Proxy, direct_url: &str, deadline: Instant) -> LrStats {
    let mut st = LrStats::default();
    let mut rng = Rng::new(seed(1) ^ (t as u64 + 1));
    let mut direct = connect(direct_url);
    let mut pc: Option<redis::Connection> = None;
    for round in 0..LR_ROUNDS {
        let tok = format!("c{t}-r{round}");

        // ACQUIRE until a definite answer, always with the same token.
        let mut lost_fence: Option<i64> = None;
        let mut errors = 0;
        let fence = loop {
            assert!(Instant::now() < deadline, "{tok}: acquire loop timed out");
            let c = pc.get_or_insert_with(|| connect(&p.url()));
            match try_acquire(c, LR_RES, &tok, LR_TTL) {
                Ok(Some(f)) => {
                    if let Some(lost) = lost_fence {
                        assert_eq!(
                            f, lost,
                            "{tok}: retry after a lost grant returned another fence"
                        );
                        st.regrants_same_fence += 1;
                    }
                    break f;
                }
                Ok(None) => {
                    assert!(
                        lost_fence.is_none(),
                        "{tok}: granted fence {lost_fence:?} (reply lost), but the retry got nil"
                    );
                    st.polls += 1;
                    sleep(Duration::from_micros(500 + rng.below(1500)));
                }
                Err(e) => {
                    pc = None;
                    errors += 1;
                    let d = drops_for(p, b"DLOCK.ACQUIRE", &tok);
                    assert_eq!(
                        d.len(),
                        errors,
                        "{tok}: client error `{e}` that the proxy did not cause"
                    );
                    match d.last().unwrap().reply {
                        Frame::Int(f) => {
                            match lost_fence {
                                Some(lost) => {
                                    assert_eq!(f, lost, "{tok}: two lost grants, two fences")
                                }
                                None => st.rounds_with_lost_grant += 1,
                            }
                            lost_fence = Some(f);
                            st.lost_grants += 1;
                        }
                        Frame::Bulk(None) => {
                            assert!(lost_fence.is_none(), "{tok}: lost grant, then lost nil");
                            st.lost_nils += 1;
                        }
                        ref other => panic!("{tok}: unexpected ACQUIRE reply {other:?}"),
                    }
                }
            }
        };

        // Critical section, on a direct (never dropped) connection.
        let start = Instant::now();
        let i = info(&mut direct, LR_RES).unwrap_or_else(|| panic!("{tok}: granted, yet free"));
        assert_eq!(
            (i.token.as_slice(), i.fence),
            (tok.as_bytes(), fence),
            "{tok}: DLOCK.INFO disagrees with the grant"
        );
        let v: Option<u64> = redis::cmd("GET")
            .arg("lr-counter")
            .query(&mut direct)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg("lr-counter")
            .arg(v.unwrap_or(0) + 1)
            .query(&mut direct)
            .unwrap();
        let end = Instant::now();
        st.holds.push(Hold {
            start,
            end,
            fence,
            token: tok.clone(),
        });

        // RELEASE until a definite answer, same token.
        let mut released = false; // a lost RELEASE reply said 1
        let mut errors = 0;
        loop {
            assert!(Instant::now() < deadline, "{tok}: release loop timed out");
            let c = pc.get_or_insert_with(|| connect(&p.url()));
            match try_release(c, LR_RES, &tok) {
                Ok(1) => {
                    assert!(!released, "{tok}: released twice");
                    break;
                }
                Ok(0) => {
                    assert!(
                        released,
                        "{tok}: RELEASE answered 0 though no earlier RELEASE took effect: \
                         the lock was lost while held"
                    );
                    st.zero_after_lost_release += 1;
                    break;
                }
                Ok(n) => panic!("{tok}: RELEASE answered {n}"),
                Err(e) => {
                    pc = None;
                    errors += 1;
                    let d = drops_for(p, b"DLOCK.RELEASE", &tok);
                    assert_eq!(
                        d.len(),
                        errors,
                        "{tok}: client error `{e}` that the proxy did not cause"
                    );
                    match d.last().unwrap().reply {
                        Frame::Int(1) => {
                            assert!(!released, "{tok}: two RELEASEs answered 1");
                            released = true;
                            st.lost_releases += 1;
                        }
                        Frame::Int(0) => assert!(released, "{tok}: lost RELEASE said 0"),
                        ref other => panic!("{tok}: unexpected RELEASE reply {other:?}"),
                    }
                }
            }
        }
        if let Some(i) = info(&mut direct, LR_RES) {
            assert_ne!(i.token, tok.as_bytes(), "{tok}: still held after release");
        }
    }
    st
}

#[test]
fn lost_replies_idempotent_retries_keep_mutual_exclusion() {
    let s = Server::start();
    let p = Proxy::start(s.port(), seed(1), LR_DROP_PER_MILLE, lock_command);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(40);
    let stats: Vec<LrStats> = thread::scope(|sc| {
        let handles: Vec<_> = (0..LR_THREADS)
            .map(|t| {
                let (p, url) = (&p, s.url());
                sc.spawn(move || lost_reply_client(t, p, &url, deadline))
            })
            .collect();
        handles.into_iter().map(join).collect()
    });
    let elapsed = t0.elapsed();

    let sum = |f: fn(&LrStats) -> u64| stats.iter().map(f).sum::<u64>();
    let mut holds: Vec<&Hold> = stats.iter().flat_map(|s| &s.holds).collect();
    holds.sort_by_key(|h| h.start);
    for w in holds.windows(2) {
        assert!(
            w[0].end < w[1].start,
            "overlapping holds: {} (fence {}) and {} (fence {})",
            w[0].token,
            w[0].fence,
            w[1].token,
            w[1].fence
        );
        assert!(
            w[0].fence < w[1].fence,
            "fences not increasing in hold order: {} {} then {} {}",
            w[0].token,
            w[0].fence,
            w[1].token,
            w[1].fence
        );
    }
    let mut c = s.conn();
    let counter: u64 = redis::cmd("GET").arg("lr-counter").query(&mut c).unwrap();
    assert_eq!(holds.len(), LR_THREADS * LR_ROUNDS);
    assert_eq!(counter, holds.len() as u64, "lost or doubled increments");
    assert_eq!(info(&mut c, LR_RES), None, "lock left held at the end");

    let drops = p.drop_count();
    eprintln!(
        "lost replies (seed {:#x}): {} holds in {elapsed:?}; {drops} dropped connections \
         ({} replies delivered, {} connections); lost grant replies {} in {} rounds (the \
         retry returned the same fence in {}), lost nils {}, lost releases {} (retry answered 0: {}), nil polls {}",
        seed(1),
        holds.len(),
        p.forwarded(),
        p.connections(),
        sum(|s| s.lost_grants),
        sum(|s| s.rounds_with_lost_grant),
        sum(|s| s.regrants_same_fence),
        sum(|s| s.lost_nils),
        sum(|s| s.lost_releases),
        sum(|s| s.zero_after_lost_release),
        sum(|s| s.polls),
    );
    // Honesty: the faults happened, on both paths that matter.
    assert!(drops > 0, "no reply was dropped");
    assert!(sum(|s| s.lost_grants) > 0, "no grant reply was lost");
    assert_eq!(
        sum(|s| s.rounds_with_lost_grant),
        sum(|s| s.regrants_same_fence)
    );
    assert!(sum(|s| s.lost_releases) > 0, "no release reply was lost");
    assert_eq!(sum(|s| s.lost_releases), sum(|s| s.zero_after_lost_release));
}
