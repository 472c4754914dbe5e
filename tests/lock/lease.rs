//! Hard leases (`.lease()`, no watchdog): they end when they end.

use crate::common;

use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_release_does_not_stretch_a_hard_lease() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("hard").lease(Duration::from_secs(3));
    let outer = lock.acquire().await.unwrap();
    outer
        .scope(async {
            let inner = lock.acquire().await.unwrap();
            assert_eq!(inner.hold_count(), 2);
            // Time is the subject here: let a known part of the lease pass.
            tokio::time::sleep(Duration::from_millis(1000)).await;
            inner.release().await.unwrap();
        })
        .await;
    let left = lock.remaining_ttl().await.unwrap().expect("still held");
    // About 2 s are left; a release that re-applied the lease would show about 3 s.
    assert!(
        left <= Duration::from_millis(2300),
        "lease stretched: {left:?} left"
    );
    assert!(
        left >= Duration::from_millis(1000),
        "lease cut short: {left:?} left"
    );
    assert!(!outer.is_lost());
    outer.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}
