//! Redis Sentinel (`redis+sentinel://`) against real sentinels: the master
//! found through them (a dead sentinel skipped, a stale one's answer
//! checked with `ROLE`, a wrong name explained), and failovers, forced and
//! after a kill, that the locker, its watchdog and the `dlock` tool follow.

use crate::common;
mod group;

use common::{dead_url, holder, pttl, SEC};
use dlock_client::{Error, Locker};
use group::{Group, Sentinel, NAME};
use std::time::Duration;

/// A sentinel address where nothing listens.
fn dead_sentinel() -> String {
    let url = dead_url();
    url.trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string()
}

#[test]
fn the_master_is_found_through_the_sentinels() {
    let group = Group::start(1, &[]);
    let dead = dead_sentinel();
    let url = group.url(&[&dead], NAME);
    let locker = Locker::new(&url).unwrap();
    let g = locker.try_lock("res", 30 * SEC).unwrap().expect("free");
    let mut master = group.servers[0].conn();
    assert_eq!(
        holder(&mut master, "res"),
        Some((g.token().to_string(), g.fence()))
    );

    // The tool, with the same URL.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["--url", &url, "status", "res"])
        .env_remove("DLOCK_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&g.fence().to_string()), "{stdout}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["list"])
        .env("DLOCK_URL", &url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("res") && stdout.contains(&g.fence().to_string()),
        "{stdout}"
    );
    assert!(g.release().unwrap());

    // A name no sentinel knows: a clear error, from the library and the tool.
    let wrong = group.url(&[], "nosuch");
    let e = Locker::new(&wrong)
        .unwrap()
        .try_lock("res", SEC)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("no master named \"nosuch\"")),
        "{e}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["--url", &wrong, "status", "res"])
        .env_remove("DLOCK_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("no master named \"nosuch\""), "{stderr}");

    // A sentinel that names a replica as the master (one that has not seen
    // a failover): its answer is checked with `ROLE` and not used.
    let stale = Sentinel::start(group.servers[1].port());
    let stale_url = format!("redis+sentinel://{}/{NAME}", stale.addr());
    let e = dlock_client::sentinel::current_master(&stale_url, 2 * SEC).unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("not a master")),
        "{e}"
    );
    let e = Locker::new(&stale_url)
        .unwrap()
        .with_retry_for(Duration::from_millis(300))
        .try_lock("res", SEC)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("not a master")),
        "{e}"
    );
}

#[cfg(feature = "tokio")]
#[test]
fn the_async_locker_finds_the_master_through_the_sentinels() {
    let group = Group::start(0, &[]);
    let url = group.url(&[&dead_sentinel()], NAME);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let locker = dlock_client::aio::Locker::new(&url).unwrap();
        let g = locker
            .try_lock("res", 30 * SEC)
            .await
            .unwrap()
            .expect("free");
        assert_eq!(
            holder(&mut group.servers[0].conn(), "res"),
            Some((g.token().to_string(), g.fence()))
        );
        assert!(g.release().await.unwrap());
    });
    let e = rt
        .block_on(async {
            let locker = dlock_client::aio::Locker::new(&group.url(&[], "nosuch")).unwrap();
            locker.try_lock("res", SEC).await
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("no master named")),
        "{e}"
    );
}

/// `SENTINEL FAILOVER`: a coordinated switch. The watchdog's renewals and
/// an extend of a replicated hold land on the new master, and a new
/// acquire is granted there at once (no promotion quarantine). Sentinel
/// demotes the old master seconds after the promotion: until then, with
/// `min-replicas-to-write 1`, it refuses writes (`NOREPLICAS`) on the
/// connections still pooled to it, and the client finds the new master.
#[test]
fn a_forced_failover_is_followed_by_renewals_and_new_acquires() {
    let group = Group::start(1, &[]);
    let url = group.url(&[], NAME);
    let locker = Locker::new(&url).unwrap().with_min_replicas(1, 5 * SEC);
    let g = locker
        .request("held")
        .ttl(15 * SEC)
        .watchdog()
        .acquire()
        .unwrap()
        .expect("free");
    // A connection of its own pooled to the old master.
    let plain = Locker::new(&url).unwrap();
    assert!(plain
        .try_lock("warm", SEC)
        .unwrap()
        .expect("free")
        .release()
        .unwrap());
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(1)
        .query(&mut group.servers[0].conn())
        .unwrap();
    let mut sentinel = group.sentinels[0].conn().unwrap();
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(NAME)
        .query(&mut sentinel)
        .unwrap();
    let new = group.wait_new_master(0, &[0, 1, 2]);
    assert_eq!(new, 1);
    let mut c = group.servers[new].conn();
    let window = plain.try_lock("window", 15 * SEC).unwrap().expect("free");
    assert_eq!(
        holder(&mut c, "window"),
        Some((window.token().to_string(), window.fence()))
    );
    assert_eq!(
        holder(&mut c, "held"),
        Some((g.token().to_string(), g.fence()))
    );
    // A renewal by the watchdog on the new master: its deadline moves up.
    let before = pttl(&mut c, "held");
    common::server::wait_until(
        group::FAILOVER_DEADLINE,
        "a renewal on the new master",
        || pttl(&mut c, "held") > before,
    );
    // `min_replicas`: once the old master replicates the new one.
    common::server::wait_until(
        group::FAILOVER_DEADLINE,
        "the old master to replicate",
        || {
            common::server::info_field(&mut c, "replication", "slave0")
                .is_some_and(|s| s.contains("state=online"))
        },
    );
    assert!(g.extend(15 * SEC).unwrap());
    assert!(!g.is_lost());

    let other = locker.try_lock("other", 15 * SEC).unwrap().expect("free");
    assert_eq!(
        holder(&mut c, "other"),
        Some((other.token().to_string(), other.fence()))
    );
    assert!(other.release().unwrap() && g.release().unwrap() && window.release().unwrap());
    assert_eq!(holder(&mut c, "held"), None);
}

/// The master killed: a hold the replica had is kept and renewed on the new
/// master; a hold it never got is lost, its holder told so by the failed
/// renewal; new grants wait out the promotion quarantine.
#[test]
fn after_the_master_dies_replicated_holds_survive_and_others_are_lost() {
    let mut group = Group::start(1, &["restart-quarantine", "60000"]);
    let url = group.url(&[], NAME);
    let durable = Locker::new(&url).unwrap().with_min_replicas(1, 5 * SEC);
    let kept = durable.try_lock("kept", 20 * SEC).unwrap().expect("free");
    // A grant the replica never receives: its link is cut while it is
    // paused (so it cannot reconnect before the master dies).
    group.servers[1].stop();
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut group.servers[0].conn())
        .unwrap();
    let plain = Locker::new(&url).unwrap();
    let lost = plain
        .request("lost")
        .ttl(20 * SEC)
        .watchdog()
        .acquire()
        .unwrap()
        .expect("free");
    group.servers[0].kill9();
    group.servers[1].cont();

    let new = group.wait_new_master(0, &[0, 1, 2]);
    let mut c = group.servers[new].conn();
    assert_eq!(
        holder(&mut c, "kept"),
        Some((kept.token().to_string(), kept.fence()))
    );
    // Renewed on the new master (by a locker without `min_replicas`: the
    // new master has no replica left).
    assert!(
        plain.extend_token("kept", kept.token(), 20 * SEC).unwrap(),
        "the replicated hold is renewed"
    );
    assert!(
        lost.wait_lost(group::FAILOVER_DEADLINE),
        "the unreplicated hold is reported lost"
    );
    assert_eq!(holder(&mut c, "lost"), None);
    let e = plain.try_lock("lost", 20 * SEC).unwrap_err();
    assert!(matches!(e, Error::Quarantined(_)), "{e}");
    assert_eq!(
        common::server::info_field(&mut c, "dlock", "dlock_quarantine_reason").as_deref(),
        Some("promotion")
    );
    assert!(plain.release_token("kept", kept.token()).unwrap());
}
