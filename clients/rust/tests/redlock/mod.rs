//! `Redlock` against real, independent servers: grants held on every node,
//! busy, release, fences per node, server-side waiting, shared holds, sets,
//! refused requests. Faults (dead, paused and slow nodes), contention and
//! renewal have files of their own.

use crate::common;

mod contention;
mod delay;
mod faults;
mod renewal;

use crate::common::{holder, ms, Server, SEC};
use dlock_client::{Error, Redlock};
use std::time::{Duration, Instant};

/// `n` independent servers with the module.
pub fn start(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

pub fn urls(servers: &[Server]) -> Vec<String> {
    servers.iter().map(Server::url).collect()
}

/// A Redlock over `servers` with a generous node timeout: on a loaded test
/// machine every local server answers within it.
pub fn redlock(servers: &[Server]) -> Redlock {
    Redlock::new(&urls(servers)).unwrap().with_node_timeout(SEC)
}

/// Each server's holder of `resource` (token, fence), in server order.
pub fn holders(servers: &[Server], resource: &str) -> Vec<Option<(String, u64)>> {
    servers
        .iter()
        .map(|s| holder(&mut s.conn(), resource))
        .collect()
}

/// Polls until nobody holds `resource` on any of `servers`.
pub fn wait_free(servers: &[&Server], resource: &str, deadline: Duration, what: &str) {
    let mut conns: Vec<_> = servers.iter().map(|s| s.conn()).collect();
    common::server::wait_until(deadline, what, || {
        conns.iter_mut().all(|c| holder(c, resource).is_none())
    });
}

#[test]
fn grants_on_every_node_and_release_frees_them_all() {
    let servers = start(5);
    let rl = redlock(&servers);
    assert_eq!((rl.nodes(), rl.quorum()), (5, 3));
    let before = Instant::now();
    let g = rl.try_lock("res", 10 * SEC).unwrap().expect("all free");
    let ttl_less_drift = 10 * SEC - ms(102);
    assert!(g.valid_until() > before + ttl_less_drift - SEC);
    assert!(
        g.valid_until() <= Instant::now() + ttl_less_drift,
        "validity counts from before the first send, less the drift"
    );
    assert_eq!(g.fences().len(), 5);
    for (i, h) in holders(&servers, "res").into_iter().enumerate() {
        let (token, fence) = h.unwrap_or_else(|| panic!("node {i} does not hold it"));
        assert_eq!(token, g.token(), "node {i}");
        assert_eq!(Some(fence), g.fences()[i], "node {i}");
    }
    assert_eq!(Some(g.fence()), g.fences().iter().flatten().copied().max());

    // Another client: busy everywhere.
    let other = redlock(&servers);
    let t = Instant::now();
    assert!(other.try_lock("res", 10 * SEC).unwrap().is_none());
    assert!(t.elapsed() < SEC, "a busy answer waits for nobody");

    let first = g.fences().to_vec();
    assert!(g.release().unwrap());
    assert!(holders(&servers, "res").iter().all(Option::is_none));

    // Fences rise on every node.
    let g2 = other
        .try_lock("res", 10 * SEC)
        .unwrap()
        .expect("free again");
    for (i, (a, b)) in first.iter().zip(g2.fences()).enumerate() {
        assert!(b.unwrap() > a.unwrap(), "node {i}: {a:?} then {b:?}");
    }
    drop(g2);
    assert!(
        holders(&servers, "res").iter().all(Option::is_none),
        "drop releases"
    );
}

#[test]
fn lock_waits_in_the_servers_queues_and_is_handed_the_lock() {
    let servers = start(3);
    let holder_rl = redlock(&servers);
    let first = holder_rl.try_lock("res", 30 * SEC).unwrap().unwrap();
    let rl = redlock(&servers);
    // Taken before the thread starts: a thread that starts late must not
    // shorten what the test counts as waited.
    let start = Instant::now();
    let waiter = std::thread::spawn(move || {
        let g = rl
            .request("res")
            .ttl(5 * SEC)
            .wait(20 * SEC)
            .acquire()
            .unwrap();
        (Instant::now(), g)
    });
    std::thread::sleep(ms(700));
    let released_at = Instant::now();
    assert!(first.release().unwrap());
    let (got_at, g) = waiter.join().unwrap();
    let g = g.expect("granted after the release");
    assert!(got_at >= released_at);
    // Each attempt waits up to 500 ms (a tenth of the ttl) in the queues:
    // the handoff comes within that, not after a polling interval.
    assert!(
        got_at - released_at < 2 * SEC,
        "granted {:?} after the release",
        got_at - released_at
    );
    assert!(got_at - start >= ms(700));
    assert!(g.valid_until() <= got_at + 5 * SEC);
    assert!(g.remaining() > 3 * SEC, "{:?}", g.remaining());
    for (i, h) in holders(&servers, "res").into_iter().enumerate() {
        assert_eq!(h.map(|h| h.0).as_deref(), Some(g.token()), "node {i}");
    }
}

#[test]
fn lock_gives_up_with_none_when_the_wait_is_used_up() {
    let servers = start(3);
    let rl = redlock(&servers);
    let _held = rl.try_lock("res", 30 * SEC).unwrap().unwrap();
    let other = redlock(&servers).with_node_timeout(ms(200));
    let t = Instant::now();
    assert!(other
        .request("res")
        .ttl(2 * SEC)
        .wait(ms(800))
        .acquire()
        .unwrap()
        .is_none());
    let took = t.elapsed();
    // The wait, plus at most one node timeout for the last attempt.
    assert!(
        took >= ms(800) && took < ms(800) + ms(200) + SEC,
        "{took:?}"
    );
}

#[test]
fn shared_holds_and_sets_work_on_every_node() {
    let servers = start(3);
    let rl = redlock(&servers);
    let r1 = rl
        .request("rw")
        .shared()
        .acquire()
        .unwrap()
        .expect("reader 1");
    let r2 = rl
        .request("rw")
        .shared()
        .acquire()
        .unwrap()
        .expect("reader 2");
    assert!(rl.try_lock("rw", SEC).unwrap().is_none(), "readers hold it");
    assert!(r1.extend(20 * SEC).unwrap());
    drop((r1, r2));
    assert!(rl.try_lock("rw", SEC).unwrap().is_some(), "free again");

    let set = rl
        .request_set(["{o}a", "{o}b"])
        .ttl(10 * SEC)
        .acquire()
        .unwrap()
        .expect("set granted");
    for r in ["{o}a", "{o}b"] {
        for (i, h) in holders(&servers, r).into_iter().enumerate() {
            let (token, fence) = h.unwrap_or_else(|| panic!("{r} free on node {i}"));
            assert_eq!(
                (token.as_str(), Some(fence)),
                (set.token(), set.fences()[i])
            );
        }
    }
    assert!(rl.try_lock("{o}b", SEC).unwrap().is_none());
    assert!(set.extend(20 * SEC).unwrap());
    assert!(set.release().unwrap());
    assert!(holders(&servers, "{o}a").iter().all(Option::is_none));
}

#[test]
fn refused_requests_ask_no_server() {
    // Nothing listens there: a refused request must fail before connecting.
    let rl = Redlock::new(&[
        "redis://127.0.0.1:1/",
        "redis://127.0.0.1:2/",
        "redis://127.0.0.1:3/",
    ])
    .unwrap();
    let e = rl.request("sem").limit(2).acquire().unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = rl.try_lock("a", Duration::ZERO).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = rl.request_set(["a", "a"]).acquire().unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");

    let none: [&str; 0] = [];
    assert!(matches!(Redlock::new(&none), Err(Error::Invalid(_))));
    let twice = ["redis://127.0.0.1:1/", "redis://127.0.0.1:1"];
    assert!(matches!(Redlock::new(&twice), Err(Error::Invalid(_))));
    assert!(matches!(
        Redlock::new(&["nonsense"]),
        Err(Error::Invalid(_))
    ));
}

/// One server named twice (a host name and its address) would count twice
/// towards the quorum; another database on it is another lock space.
#[test]
fn the_same_server_under_two_names_is_refused() {
    let twice = [
        "redis://127.0.0.1:7/",
        "redis://127.0.0.1:8/",
        "redis://localhost:7",
    ];
    let e = Redlock::new(&twice).err().expect("refused");
    assert!(
        matches!(&e, Error::Invalid(m) if m.contains("same server")),
        "{e}"
    );
    let other_db = ["redis://127.0.0.1:7/0", "redis://localhost:7/1"];
    assert!(Redlock::new(&other_db).is_ok());
    // A name that does not resolve (yet) is compared as written.
    let unresolved = ["redis://127.0.0.1:7/", "redis://no-such-host.invalid:7/"];
    assert!(Redlock::new(&unresolved).is_ok());
}

#[test]
fn limit_one_is_a_plain_lock_and_a_single_server_takes_any_limit() {
    let servers = start(3);
    let rl = redlock(&servers);
    let g = rl
        .request("m")
        .limit(1)
        .acquire()
        .unwrap()
        .expect("LIMIT 1");
    assert!(rl.request("m").limit(1).acquire().unwrap().is_none());
    drop(g);
    let one = redlock(&servers[..1]);
    let p1 = one
        .request("sem")
        .limit(2)
        .acquire()
        .unwrap()
        .expect("permit 1");
    let p2 = one
        .request("sem")
        .limit(2)
        .acquire()
        .unwrap()
        .expect("permit 2");
    assert!(one.request("sem").limit(2).acquire().unwrap().is_none());
    drop((p1, p2));
}

#[test]
fn info_answers_per_node() {
    let servers = start(3);
    let rl = redlock(&servers);
    let g = rl.try_lock("res", 10 * SEC).unwrap().unwrap();
    let infos = rl.info("res");
    assert_eq!(infos.len(), 3);
    for i in infos {
        assert!(matches!(i, Ok(redis::Value::Array(_))), "{i:?}");
    }
    drop(g);
    assert!(rl
        .info("res")
        .iter()
        .all(|i| matches!(i, Ok(redis::Value::Nil))));
}

#[test]
fn a_redlock_is_shared_across_threads() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<Redlock>();
    let servers = start(3);
    let rl = redlock(&servers);
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let rl = rl.clone();
            std::thread::spawn(move || rl.try_lock(&format!("r{i}"), 10 * SEC).unwrap().is_some())
        })
        .collect();
    assert!(handles.into_iter().all(|h| h.join().unwrap()));
}
