//! The process default client: `install()` / `global()`. One test per binary touches the global
//! slot (tests in one binary share it); "nothing installed" is in global_unset.rs.

#[path = "../common/mod.rs"]
mod common;

use dlock::LockClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_then_global_round_trips_and_a_second_install_replaces_the_first() {
    let server = common::server();
    let first = common::client(&server).await;
    assert!(
        first.clone().install().is_none(),
        "nothing was installed before"
    );
    let global = LockClient::global().expect("installed");
    assert_eq!(global.client_id(), first.client_id());

    // The global client is a working clone: a lock taken through it is seen by the original.
    let g = global.lock("global").acquire().await.unwrap();
    assert!(first.lock("global").is_locked().await.unwrap());
    g.release().await.unwrap();

    let second = common::client(&server).await;
    let replaced = second
        .clone()
        .install()
        .expect("returns the client it replaces");
    assert_eq!(replaced.client_id(), first.client_id());
    assert_eq!(
        LockClient::global().unwrap().client_id(),
        second.client_id()
    );
    assert_ne!(first.client_id(), second.client_id());
}
