//! Positions as the queue moves: joins, grants, every way of leaving, a
//! token queued twice, set requests.
use super::*;

/// Four waiters in line; `CLIENT UNBLOCK`, a closed connection, a grant and
/// a `WAIT` that runs out each move the ones behind up by one, and
/// `DLOCK.WAITERS` agrees with `DLOCK.POSITION` at every step.
#[test]
fn positions_follow_joins_grants_and_every_way_of_leaving() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(position(&mut c, "r", "a"), None, "no queue: nil");
    acquire(&mut c, "r", "h", LONG_TTL).expect("free");
    assert_eq!(position(&mut c, "r", "h"), None, "the holder does not wait");
    let a = join(&s, &mut c, wait_cmd("r", "a", &[], 0), "r", 1);
    let b = join(&s, &mut c, wait_cmd("r", "b", &[], 0), "r", 2);
    let gone = join(&s, &mut c, wait_cmd("r", "gone", &[], 0), "r", 3);
    let brief = join(&s, &mut c, wait_cmd("r", "brief", &[], 300), "r", 4);
    let d = join(&s, &mut c, wait_cmd("r", "d", &[], 0), "r", 5);
    let expect = |c: &mut Connection, line: &[&str]| {
        for (at, t) in line.iter().enumerate() {
            assert_eq!(position(c, "r", t), Some(at as i64 + 1), "{t} in {line:?}");
        }
        let page = waiters_page(c, "r", &[]);
        assert_eq!(tokens(&page), line);
        assert_eq!(
            positions(&page),
            (1..=line.len() as i64).collect::<Vec<_>>()
        );
    };
    expect(&mut c, &["a", "b", "gone", "brief", "d"]);
    assert_eq!(position(&mut c, "r", "x"), None);
    assert_eq!(position(&mut c, "other", "a"), None);

    let unblocked: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(b.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(unblocked, 1);
    assert!(matches!(b.reply(), (Ok(None), _)), "unblocked: nil");
    wait_waiters(&mut c, "r", 4);
    expect(&mut c, &["a", "gone", "brief", "d"]);

    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(gone.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(killed, 1);
    wait_waiters(&mut c, "r", 3);
    expect(&mut c, &["a", "brief", "d"]);

    assert!(matches!(brief.reply(), (Ok(None), _)), "its WAIT ran out");
    wait_waiters(&mut c, "r", 2);
    expect(&mut c, &["a", "d"]);

    assert_eq!(release(&mut c, "r", "h"), 1);
    let (_, mut ca) = a.granted();
    expect(&mut c, &["d"]);
    assert_eq!(position(&mut c, "r", "a"), None, "a holds now");
    assert_eq!(release(&mut ca, "r", "a"), 1);
    assert!(d.granted().0 > 0);
    assert_eq!(position(&mut c, "r", "d"), None);
    assert!(waiters_page(&mut c, "r", &[]).is_empty());
}

/// A token queued twice (a client that retried on a new connection)
/// stands where its first entry does; both are granted together.
#[test]
fn a_token_queued_twice_stands_where_it_first_joined() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "h", LONG_TTL).expect("free");
    let first = join(&s, &mut c, wait_cmd("r", "t", &[], 0), "r", 1);
    let other = join(&s, &mut c, wait_cmd("r", "o", &[], 0), "r", 2);
    let again = join(&s, &mut c, wait_cmd("r", "t", &[], 0), "r", 3);
    assert_eq!(position(&mut c, "r", "t"), Some(1));
    assert_eq!(tokens(&waiters_page(&mut c, "r", &[])), ["t", "o", "t"]);
    let _: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(first.id)
        .query(&mut c)
        .unwrap();
    assert!(matches!(first.reply(), (Ok(None), _)));
    wait_waiters(&mut c, "r", 2);
    assert_eq!(position(&mut c, "r", "t"), Some(2), "its second entry");
    assert_eq!(release(&mut c, "r", "h"), 1);
    let (_, mut co) = other.granted();
    assert_eq!(position(&mut c, "r", "t"), Some(1));
    assert_eq!(release(&mut co, "r", "o"), 1);
    assert!(again.granted().0 > 0);
}

/// A set request waits in the queue of each member, at its own place in
/// each; `DLOCK.WAITERS` shows its member count. When it is granted it
/// leaves every queue.
#[test]
fn a_set_request_has_a_place_in_each_members_queue() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "{s}:a", "x", LONG_TTL).expect("free");
    acquire(&mut c, "{s}:b", "y", LONG_TTL).expect("free");
    let plain = join(&s, &mut c, wait_cmd("{s}:b", "p", &[], 0), "{s}:b", 1);
    let mut cmd = redis::cmd("DLOCK.MACQUIRE");
    cmd.arg(2)
        .arg("{s}:a")
        .arg("{s}:b")
        .arg("set")
        .arg(LONG_TTL)
        .arg("WAIT")
        .arg(0);
    let set = join(&s, &mut c, cmd, "{s}:a", 1);
    assert_eq!(position(&mut c, "{s}:a", "set"), Some(1));
    assert_eq!(position(&mut c, "{s}:b", "set"), Some(2));
    let on_b = waiters_page(&mut c, "{s}:b", &[]);
    assert_eq!(tokens(&on_b), ["p", "set"]);
    assert!(!on_b[0].contains_key("set"), "a single request has no set");
    assert_eq!(as_int(&on_b[1]["set"]), 2);
    assert_eq!(as_int(&waiters_page(&mut c, "{s}:a", &[])[0]["set"]), 2);

    assert_eq!(release(&mut c, "{s}:b", "y"), 1);
    let (_, mut cp) = plain.granted();
    assert_eq!(position(&mut c, "{s}:b", "set"), Some(1));
    assert_eq!(release(&mut cp, "{s}:b", "p"), 1);
    assert_eq!(
        position(&mut c, "{s}:a", "set"),
        Some(1),
        "still waits for a"
    );
    assert_eq!(release(&mut c, "{s}:a", "x"), 1);
    assert!(set.granted().0 > 0);
    for r in ["{s}:a", "{s}:b"] {
        assert_eq!(position(&mut c, r, "set"), None);
        assert!(waiters_page(&mut c, r, &[]).is_empty());
    }
}
