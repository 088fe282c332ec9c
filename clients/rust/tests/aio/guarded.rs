//! Guarded writes and the sequencer check through the async API.

use super::runtime;
use crate::common::{Server, SEC};
use dlock_client::aio::Locker;
use dlock_client::redis::{self, Value};
use dlock_client::Error;

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

#[test]
fn guarded_writes_run_while_held_and_are_refused_after() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("{o}:str")
        .arg("s")
        .query(&mut c)
        .unwrap();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let g = locker.try_lock("{o}", 30 * SEC).await.unwrap().unwrap();
        let ok: String = g
            .write(redis::cmd("SET").arg("{o}:k").arg("v"))
            .await
            .unwrap();
        assert_eq!(ok, "OK");
        let (n, m): (i64, i64) = g
            .write_batch(&[
                redis::cmd("INCR").arg("{o}:n").clone(),
                redis::cmd("INCR").arg("{o}:n").clone(),
            ])
            .await
            .unwrap();
        assert_eq!((n, m), (1, 2));
        let wrongtype = g
            .write_batch::<Value>(&[
                redis::cmd("INCR").arg("{o}:n").clone(),
                redis::cmd("LPUSH").arg("{o}:str").arg("x").clone(),
            ])
            .await;
        assert!(
            matches!(&wrongtype, Err(Error::Refused { code, .. }) if code == "WRONGTYPE"),
            "{wrongtype:?}"
        );
        assert_eq!(get(&mut c, "{o}:n").as_deref(), Some("2"), "undone");
        assert!(g.check().await.unwrap());
        assert!(locker.check("{o}", g.fence()).await.unwrap());
        assert!(!locker.check("{o}", g.fence() + 1).await.unwrap());
        assert!(!g.is_lost());

        let blocking = dlock_client::Locker::new(&server.url()).unwrap();
        assert!(blocking.release_token("{o}", g.token()).unwrap());
        let r = g
            .write::<Value>(redis::cmd("SET").arg("{o}:k").arg("late"))
            .await;
        assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
        assert!(g.is_lost());
        let r = g.write_batch::<Value>(&[]).await;
        assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
        assert!(!g.check().await.unwrap());
        assert!(!locker.check("{o}", g.fence()).await.unwrap());
    });
    assert_eq!(
        get(&mut c, "{o}:k").as_deref(),
        Some("v"),
        "nothing written"
    );
}
