//! Quick end-to-end check of the main paths (the detailed suites live in the other files).

use std::time::Duration;

use dlock::testing::RedisServer;
use dlock::LockClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_reenter_release_and_handoff() {
    let server = RedisServer::start().unwrap();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("smoke");
    let g = lock.acquire().await.unwrap();
    assert_eq!(g.hold_count(), 1);
    let t1 = g.fencing_token();
    let inner = g.scope(async {
        let g2 = lock.acquire().await.unwrap();
        assert_eq!(g2.hold_count(), 2);
        g2.release().await.unwrap();
    });
    inner.await;
    assert!(lock.is_locked().await.unwrap());
    let other = LockClient::connect(&server.url()).await.unwrap();
    let waiter = tokio::spawn(async move {
        let g = other
            .lock("smoke")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        g.fencing_token()
    });
    g.release().await.unwrap();
    let t2 = waiter.await.unwrap();
    assert!(t2 > t1);
}
