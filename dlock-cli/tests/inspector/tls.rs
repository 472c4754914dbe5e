//! The inspector over TLS with a private CA (`--tls-ca`), and refused without it.

use dlock_runtime::testing::RedisServer;
use dlock_runtime::LockClient;

use crate::common::{dlock, dlock_json, entry, text};

#[tokio::test]
async fn list_and_unlock_over_tls_with_a_private_ca() {
    let server = RedisServer::start_tls().expect("start a TLS redis-server");
    let (url, ca) = (server.url(), server.ca_cert_path().unwrap().to_owned());
    assert!(url.starts_with("rediss://"));
    let pem = std::fs::read(&ca).unwrap();
    let a = LockClient::builder(&url)
        .tls_root_certificates(pem)
        .build()
        .await
        .expect("connect over TLS");
    let held = a.lock("tls-job").acquire().await.expect("acquire");
    let ca = ca.to_str().unwrap();

    let list = dlock_json(&["list", "--url", &url, "--tls-ca", ca]).await;
    assert_eq!(entry(&list, "tls-job", "plain")["held"], true);

    let other = server
        .other_ca_cert_path()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let out = dlock(&["list", "--url", &url, "--tls-ca", &other]).await;
    assert!(
        !out.status.success(),
        "an unrelated CA must not be trusted: {}",
        text(&out.stdout)
    );

    let unlocked = dlock_json(&[
        "unlock", "tls-job", "--force", "--yes", "--url", &url, "--tls-ca", ca,
    ])
    .await;
    assert_eq!(unlocked["unlocked"], true);
    assert!(!a.lock("tls-job").is_locked().await.unwrap());
    drop(held);
}
