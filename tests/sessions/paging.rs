//! `LIST` and `HOLDS` pages: `AFTER`, `MATCH`, `COUNT`, over 250 sessions
//! and 250 holds, while sessions and holds come and go between pages.
use super::*;

/// Opens `n` sessions named `prefix:000`... in one pipeline.
fn open_many(c: &mut Connection, prefix: &str, n: usize, ttl: u64) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}:{i:03}")).collect();
    let mut p = redis::pipe();
    for id in &ids {
        p.cmd("DLOCK.SESSION").arg("OPEN").arg(id).arg(ttl);
    }
    let replies: Vec<i64> = p.query(c).unwrap();
    assert!(replies.iter().all(|r| *r == 1), "{replies:?}");
    ids
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn list_pages_through_250_sessions_in_id_order() {
    let s = Server::start();
    let mut c = s.conn();
    let mut ids = open_many(&mut c, "s", 250, 60_000);
    ids.extend(open_many(&mut c, "other", 10, 60_000));
    let all = sorted(ids.clone());

    // COUNT 100: full pages, each `next` the page's last id.
    let (next, first) = list_page(&mut c, None, None, Some(100));
    assert_eq!(first, all[..100]);
    assert_eq!(next.as_deref(), Some(all[99].as_bytes()));
    let (next, second) = list_page(&mut c, next.as_deref(), None, Some(100));
    assert_eq!(second, all[100..200]);
    let (next, third) = list_page(&mut c, next.as_deref(), None, Some(100));
    assert_eq!(third, all[200..]);
    assert_eq!(next, None, "the last page says so");

    // The default page size is 100.
    let (next, page) = list_page(&mut c, None, None, None);
    assert_eq!(page.len(), 100);
    assert!(next.is_some());
    assert_eq!(list_all(&mut c, None, None), all);
    assert_eq!(list_all(&mut c, None, Some(1)), all);
    assert_eq!(list_all(&mut c, None, Some(1000)), all);

    // MATCH: pages may be short and not the last; together they are exact.
    let ones: Vec<String> = all
        .iter()
        .filter(|i| i.starts_with("s:1"))
        .cloned()
        .collect();
    assert_eq!(ones.len(), 100);
    assert_eq!(list_all(&mut c, Some("s:1*"), Some(7)), ones);
    assert_eq!(list_all(&mut c, Some("other:00?"), Some(3)), all[..10]);
    assert_eq!(
        list_all(&mut c, Some("nothing*"), Some(50)),
        Vec::<String>::new()
    );

    // AFTER an id that is no session, or past every one.
    let (_, page) = list_page(&mut c, Some(&b"s:0995"[..]), None, Some(3));
    assert_eq!(page, ["s:100", "s:101", "s:102"]);
    let (next, page) = list_page(&mut c, Some(&b"zzz"[..]), None, Some(3));
    assert_eq!((next, page), (None, vec![]));
}

#[test]
fn list_pages_stay_exact_while_sessions_come_and_go() {
    let s = Server::start();
    let mut c = s.conn();
    let ids = open_many(&mut c, "s", 250, 60_000);
    let (next, first) = list_page(&mut c, None, None, Some(100));
    assert_eq!(first, ids[..100]);
    // Between pages: one listed and one not yet listed end, one new opens.
    assert_eq!(close(&mut c, "s:050"), 1);
    assert_eq!(kill(&mut c, "s:150"), 1);
    open(&mut c, "s:2000", 60_000);
    let mut rest = Vec::new();
    let mut after = next;
    while let Some(a) = after {
        let (n, page) = list_page(&mut c, Some(&a), None, Some(100));
        rest.extend(page);
        after = n;
    }
    let mut want: Vec<String> = ids[100..]
        .iter()
        .filter(|i| *i != "s:150")
        .cloned()
        .collect();
    want.push("s:2000".into());
    assert_eq!(sorted(rest), sorted(want));
}

#[test]
fn list_options_are_checked() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "a", 60_000);
    let count = "ERR COUNT must be an integer from 1 to 1000";
    for args in [&["COUNT", "0"][..], &["COUNT", "1001"], &["COUNT", "x"]] {
        let e = err_of(session_cmd("LIST", args).query(&mut c));
        assert_eq!(e, count, "LIST {args:?}");
    }
    for args in [
        &["COUNT"][..],
        &["AFTER"],
        &["MATCH"],
        &["NOPE"],
        &["COUNT", "1", "COUNT", "1"],
    ] {
        let e = err_of(session_cmd("LIST", args).query(&mut c));
        assert_eq!(e, SYNTAX, "LIST {args:?}");
    }
    for args in [&["a", "COUNT", "0"][..], &["a", "COUNT", "1001"]] {
        let e = err_of(session_cmd("HOLDS", args).query(&mut c));
        assert_eq!(e, count, "HOLDS {args:?}");
    }
    let after = "ERR AFTER must be an integer from 0 to 18446744073709551615";
    for cursor in ["-1", "x", "1.5", "18446744073709551616"] {
        let e = err_of(session_cmd("HOLDS", &["a", "AFTER", cursor]).query(&mut c));
        assert_eq!(e, after, "HOLDS AFTER {cursor}");
    }
    let e = err_of(session_cmd("HOLDS", &["a", "NOPE"]).query(&mut c));
    assert_eq!(e, SYNTAX);
}

/// Session `w` with 250 bound holds `r000`.. (token `t<i>`), granted in
/// order in one pipeline.
fn many_holds(c: &mut Connection) -> Vec<Bound> {
    open(c, "w", 60_000);
    let want: Vec<Bound> = (0..250)
        .map(|i| bound(0, &format!("r{i:03}"), &format!("t{i}")))
        .collect();
    // Grant order differs from name order.
    let mut order = want.clone();
    order.reverse();
    let mut p = redis::pipe();
    for b in &order {
        p.add_command(req(&b.resource, &b.token).session("w").cmd());
    }
    let fences: Vec<i64> = p.query(c).unwrap();
    assert!(fences.windows(2).all(|w| w[0] < w[1]));
    order
}

#[test]
fn holds_pages_through_250_holds_in_grant_order() {
    let s = Server::start();
    let mut c = s.conn();
    let order = many_holds(&mut c);
    let (next, first) = holds_page(&mut c, "w", None, Some(100));
    assert_eq!(first, order[..100]);
    let (next, second) = holds_page(&mut c, "w", next.as_deref(), Some(100));
    assert_eq!(second, order[100..200]);
    let (next, third) = holds_page(&mut c, "w", next.as_deref(), Some(100));
    assert_eq!(third, order[200..]);
    assert_eq!(next, None);
    let (next, page) = holds_page(&mut c, "w", None, None);
    assert_eq!((page.len(), next.is_some()), (100, true));
    assert_eq!(holds_all(&mut c, "w", Some(1)), order);
    assert_eq!(holds_all(&mut c, "w", Some(1000)), order);
    assert_eq!(live(&mut c, "w").holds, 250);
}

#[test]
fn holds_pages_stay_exact_while_holds_come_and_go() {
    let s = Server::start();
    let mut c = s.conn();
    let order = many_holds(&mut c);
    let (next, first) = holds_page(&mut c, "w", None, Some(100));
    assert_eq!(first, order[..100]);
    // Between pages: a listed hold and a hold not yet listed are released,
    // and a new one is granted (it comes last).
    assert_eq!(release(&mut c, &order[10].resource, &order[10].token), 1);
    assert_eq!(release(&mut c, &order[150].resource, &order[150].token), 1);
    req("late", "tl").session("w").grant(&mut c);
    let mut rest = Vec::new();
    let mut after = next;
    while let Some(a) = after {
        let (n, page) = holds_page(&mut c, "w", Some(&a), Some(100));
        rest.extend(page);
        after = n;
    }
    let mut want: Vec<Bound> = order[100..]
        .iter()
        .filter(|b| **b != order[150])
        .cloned()
        .collect();
    want.push(bound(0, "late", "tl"));
    assert_eq!(rest, want);
    assert_eq!(live(&mut c, "w").holds, 249);
}
