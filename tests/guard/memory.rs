//! Thousands of guarded writes and batches, refused, undone and not: the
//! server's memory comes back flat (every call's reply and copy is freed).
use super::*;

#[test]
fn thousands_of_guarded_batches_leave_memory_flat() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 600_000);
    set(&mut c, "notint", "abc");
    let value = "v".repeat(1000);
    let round = |c: &mut Connection| {
        for i in 0..500 {
            let k = format!("k{}", i % 50);
            let _ = guard(c, "r", &token("t"), &["SET", &k, &value]).unwrap();
            let e = err_of(batch(
                c,
                "r",
                &token("t"),
                &[
                    &["SET", &k, "x"],
                    &["HSET", "h", "f", &value],
                    &["INCR", "notint"],
                ],
            ));
            assert!(e.contains("undone"), "{e}");
            assert_eq!(
                err_of(guard(c, "r", &token("no"), &["SET", &k, "x"])),
                NOTHELD
            );
            let _ = batch(c, "r", &token("t"), &[&["GET", &k], &["DEL", "h"]]).unwrap();
        }
    };
    round(&mut c);
    let before = used_memory_purged(&mut c);
    for _ in 0..4 {
        round(&mut c);
    }
    let after = used_memory_purged(&mut c);
    assert!(
        after - before < 64 * 1024,
        "used_memory grew by {} bytes over 2000 rounds",
        after - before
    );
}
