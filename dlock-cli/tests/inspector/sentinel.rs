//! The inspector on a Sentinel-managed primary: found through the sentinels, as the client
//! finds it.

use std::time::Duration;

use dlock_runtime::testing::RedisSentinel;
use dlock_runtime::LockClient;

use crate::common::{dlock_json, entry};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_unlock_through_the_sentinels() {
    let sentinel = tokio::task::spawn_blocking(RedisSentinel::start)
        .await
        .unwrap()
        .expect("start a primary, a replica and three sentinels");
    let (urls, master) = (sentinel.sentinel_urls(), sentinel.master_name().to_owned());
    let a = LockClient::sentinel_builder(urls.clone(), master.as_str())
        .build()
        .await
        .expect("connect through the sentinels");
    let held = a
        .lock("nightly")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire");
    let urls = urls.join(",");
    let target = ["--sentinel", urls.as_str(), "--master", master.as_str()];

    let list = dlock_json(&[&["list"][..], &target].concat()).await;
    let e = entry(&list, "nightly", "plain");
    assert!(
        e["holders"][0]["owner"]
            .as_str()
            .unwrap()
            .starts_with(a.client_id()),
        "{e}"
    );

    let unlocked =
        dlock_json(&[&["unlock", "nightly", "--force", "--yes"][..], &target].concat()).await;
    assert_eq!(unlocked["unlocked"], true);
    assert!(!a.lock("nightly").is_locked().await.unwrap());
    drop(held);
}
