//! `position`, `waiters` and `resize` through the async API.

use super::runtime;
use crate::common::{server::wait_until, waiters, Server, SEC};
use dlock_client::aio::Locker;
use dlock_client::Error;
use std::time::Duration;

#[test]
fn positions_and_waiters_through_the_async_api() {
    let server = Server::start();
    let mut c = server.conn();
    let blocking = dlock_client::Locker::new(&server.url()).unwrap();
    let holder = blocking.try_lock("job", 30 * SEC).unwrap().unwrap();
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let l = dlock_client::Locker::new(&url).unwrap();
        let r = l.request("job").token("w").ttl(30 * SEC);
        let g = r.wait(Duration::from_secs(3600)).acquire().unwrap();
        g.map(|g| g.release().unwrap())
    });
    wait_until(SEC * 5, "queued", || waiters(&mut c, "job") == 1);
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        assert_eq!(locker.position("job", "w").await.unwrap(), Some(1));
        assert_eq!(locker.position("job", "x").await.unwrap(), None);
        let page = locker.waiters("job", 0, 10).await.unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!((page[0].position, page[0].token.as_str()), (1, "w"));
        assert_eq!(
            page[0].timeout.map(|t| t <= Duration::from_secs(3600)),
            Some(true)
        );
        assert!(locker.waiters("job", 1, 10).await.unwrap().is_empty());
        let bad = locker.waiters("job", 0, 0).await;
        assert!(matches!(bad, Err(Error::Invalid(_))), "{bad:?}");
        let bad = locker.position("job", "").await;
        assert!(matches!(bad, Err(Error::Invalid(_))), "{bad:?}");
    });
    holder.release().unwrap();
    waiter.join().unwrap();
}

#[test]
fn resize_through_the_async_api_grows_a_held_semaphore() {
    let server = Server::start();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let request = || locker.request("pool").ttl(30 * SEC).limit(2);
        let a = request().acquire().await.unwrap().expect("free");
        let b = request().acquire().await.unwrap().expect("2 of 2");
        assert!(request().acquire().await.unwrap().is_none(), "full");
        assert_eq!(locker.resize("pool", 3).await.unwrap(), Some(2));
        let c = request()
            .acquire()
            .await
            .unwrap()
            .expect("3 of 3, under the old limit");
        assert_eq!(locker.resize("free", 3).await.unwrap(), None);
        for n in [0, 1, dlock_client::MAX_LIMIT + 1] {
            let e = locker.resize("pool", n).await.unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{n}: {e}");
        }
        assert!(a.release().await.unwrap());
        assert!(b.release().await.unwrap());
        assert!(c.release().await.unwrap());
    });
}
