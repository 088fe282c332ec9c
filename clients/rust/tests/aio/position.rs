//! `position` and `waiters` through the async API.

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
