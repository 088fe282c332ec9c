//! The latency part of the `observe` section (observe.rs): the delay from
//! a change (a `RELEASE`) to the reply of an observer blocked on the
//! resource, against the delay to a `SUBSCRIBE`d keyspace notification of
//! the same change. One thread sends the `RELEASE` and reads the
//! listener's connection, so no thread's wake-up is timed; rounds alternate
//! between the two listeners, each on a resource of its own.

use std::thread;
use std::time::{Duration, Instant};

use crate::common::{self, Server};
use crate::observe_followers::FREE;
use crate::stats::Summary;

fn observers(c: &mut redis::Connection) -> u64 {
    crate::info_u64(c, "dlock", "dlock_observers")
}

/// `rounds` releases heard by an observer, and `rounds` by a subscriber
/// of the keyspace notifications, alternating.
pub fn measure(server: &Server, rounds: usize) -> (Summary, Summary) {
    let (obs_key, sub_key) = ("observe:latency", "notify:latency");
    let mut sub = server.lock_events(sub_key, Duration::from_secs(10));
    let mut holder = server.conn();
    let mut observer = server.conn();
    let mut probe = server.conn();
    let (mut observed, mut notified) = (Vec::new(), Vec::new());
    for round in 0..rounds * 2 {
        let tok = format!("t{round}");
        let key = if round % 2 == 0 { obs_key } else { sub_key };
        let fence: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(key)
            .arg(&tok)
            .arg(60_000)
            .query(&mut holder)
            .expect("ACQUIRE");
        assert!(fence.is_some(), "{key} is free between rounds");
        if round % 2 == 0 {
            let v: redis::Value = redis::cmd("DLOCK.OBSERVE")
                .arg(key)
                .query(&mut holder)
                .expect("OBSERVE");
            let held = match &v {
                redis::Value::Array(parts) => common::lock::as_bytes(&parts[0]),
                other => panic!("not a state: {other:?}"),
            };
            let cmd = redis::cmd("DLOCK.OBSERVE")
                .arg(key)
                .arg("SINCE")
                .arg(&held)
                .arg("WAIT")
                .arg(10_000)
                .get_packed_command();
            observer.send_packed_command(&cmd).expect("send OBSERVE");
            let end = Instant::now() + Duration::from_secs(10);
            while observers(&mut probe) != 1 {
                assert!(Instant::now() < end, "the observer never blocked");
                thread::sleep(Duration::from_micros(50));
            }
        } else {
            let event = common::next_lock_event(&mut sub).expect("the grant's event");
            assert_eq!(event, "dlock.acquired");
        }
        let release = redis::cmd("DLOCK.RELEASE")
            .arg(key)
            .arg(&tok)
            .get_packed_command();
        let t0 = Instant::now();
        holder.send_packed_command(&release).expect("send RELEASE");
        if round % 2 == 0 {
            let reply = observer.recv_response().expect("the observer's reply");
            observed.push(t0.elapsed());
            let packed = match reply {
                redis::Value::Array(parts) => common::lock::as_bytes(&parts[0]),
                other => panic!("not a state: {other:?}"),
            };
            assert_eq!(packed, FREE, "the observer saw the release");
        } else {
            let event = common::next_lock_event(&mut sub).expect("the release's event");
            notified.push(t0.elapsed());
            assert_eq!(event, "dlock.released");
        }
        let released = holder.recv_response().expect("RELEASE reply");
        assert_eq!(released, redis::Value::Int(1));
    }
    (Summary::of(observed), Summary::of(notified))
}

pub fn print(rounds: usize, observer: &Summary, notified: &Summary) {
    println!("### From a change to its observers (`observe`)\n");
    println!(
        "Time from sending a `DLOCK.RELEASE` to the reply of an observer blocked on the \
         resource (`DLOCK.OBSERVE res SINCE <held> WAIT 10000`), and to the keyspace \
         notification `dlock.released` of a `SUBSCRIBE`d client (`__keyspace@0__:res`, \
         `notify-keyspace-events Kd`), {rounds} releases each, alternating, on a fresh \
         server; one client thread sends and reads. No goal: the notification is the \
         server's own fire-and-forget reference.\n"
    );
    println!("| listener | rounds | p50 ms | p99 ms | max ms |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, s) in [
        ("`DLOCK.OBSERVE ... WAIT` reply", observer),
        ("`SUBSCRIBE`d keyspace notification", notified),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} |",
            s.count(),
            s.ms(0.5),
            s.ms(0.99),
            s.ms(1.0)
        );
    }
    let ratio =
        |q: f64| observer.quantile(q).as_secs_f64() / notified.quantile(q).as_secs_f64().max(1e-9);
    println!(
        "\nObserver / notification: {:.2}x at p50, {:.2}x at p99.\n",
        ratio(0.5),
        ratio(0.99)
    );
}
