//! A frozen link between the holder and the store (a proxy that stops forwarding without closing
//! anything, as a dead NAT entry or a stuck load balancer does): the holder reads lost before
//! another client, with a working link, acquires the lock.

use std::time::{Duration, Instant};

use super::both::stores;
use super::common::proxy::Proxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_behind_a_frozen_link_reads_lost_before_another_client_acquires() {
    for store in stores() {
        let proxy = Proxy::start(store.port());
        let holder = dlock::LockClient::builder(store.url_via(proxy.port()))
            .response_timeout(Duration::from_millis(500))
            .build()
            .await
            .unwrap_or_else(|e| panic!("{}: connect through the proxy: {e}", store.name()));
        let guard = (holder.lock("stores:frozen-link"))
            .ttl(Duration::from_secs(2))
            .acquire()
            .await
            .expect("acquire");
        let token = guard.fencing_token();
        let lost = tokio::spawn({
            let lost = guard.lost();
            async move {
                lost.await;
                Instant::now()
            }
        });
        proxy.freeze();
        let frozen_at = Instant::now();
        let other = store.client().await;
        let got = (other.lock("stores:frozen-link"))
            .wait(Duration::from_secs(15))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: the other client: {e}", store.name()));
        let got_at = Instant::now();
        assert!(
            guard.is_lost(),
            "{}: another client holds the lock and the holder does not know",
            store.name()
        );
        let lost_at = lost.await.expect("lost task");
        assert!(lost_at <= got_at, "{}", store.name());
        // Its validity, counted from the last renewal it sent, ends within the 2 s lease.
        let lost_after = lost_at.duration_since(frozen_at);
        assert!(
            lost_after <= Duration::from_secs(3),
            "{}: lost {lost_after:?} into the freeze of a 2 s lease",
            store.name()
        );
        assert!(got.fencing_token() > token, "{}", store.name());
        got.release().await.expect("release");
        proxy.thaw();
        let released = tokio::time::timeout(Duration::from_secs(20), guard.release())
            .await
            .unwrap_or_else(|_| panic!("{}: the lost hold's release hung", store.name()));
        assert!(
            released.is_err(),
            "{}: a lost hold released without an error",
            store.name()
        );
    }
}
