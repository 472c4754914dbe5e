//! Who holds it: every hold says which client (the builder's `name`, `host:pid` by default)
//! and which lock label (the attribute's key template or function name) took it, on every
//! store, read back from what the store keeps with `dlock::inspect::Holder`.

use dlock::inspect::Holder;
use dlock::{distributed_lock, LockClient, LockError};

use super::both::{stores, Need, Store};

#[derive(Debug)]
struct AppError(String);

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError(e.to_string())
    }
}

/// Reads, from inside its own body, who the store says holds its lock.
#[distributed_lock(key = "stores:holder:{order}", client = locks)]
async fn pay(locks: &LockClient, store: &Store, order: u64) -> Result<Vec<Holder>, AppError> {
    let key = locks
        .lock(format!("stores:holder:{order}"))
        .key()
        .to_owned();
    Ok(store
        .owners(&key)
        .iter()
        .map(|o| Holder::parse(o))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hold_names_its_client_and_its_lock() {
    for store in stores() {
        if !store.can(Need::Owners) {
            continue;
        }
        let name = store.name();
        let named = LockClient::builder(store.url())
            .name("orders-api@web 3")
            .build()
            .await
            .expect("connect");
        let holders = (pay(&named, &store, 7).await).unwrap_or_else(|e| panic!("{name}: {}", e.0));
        assert_eq!(holders.len(), 1, "{name}: {holders:?}");
        let h = &holders[0];
        assert!(
            h.owner_id.starts_with(&format!("{}:", named.client_id())),
            "{name}: {h:?}"
        );
        assert_eq!(h.client.as_deref(), Some("orders-api@web 3"), "{name}");
        assert_eq!(h.label.as_deref(), Some("stores:holder:{order}"), "{name}");

        // Unnamed: the host and process; a lock taken without a label says none.
        let plain = store.client().await;
        let lock = plain.lock("stores:holder:api");
        let guard = lock.acquire().await.expect("acquire");
        let owners = store.owners(lock.key());
        let h = Holder::parse(&owners[0]);
        let client = h.client.expect("a client name");
        assert!(
            client.ends_with(&format!(":{}", std::process::id())),
            "{name}: {client}"
        );
        assert_eq!(h.label, None, "{name}");
        guard.release().await.expect("release");

        let bad = LockClient::builder(store.url())
            .name("a\nb")
            .build()
            .await
            .expect_err("a name with a newline was accepted");
        assert!(
            matches!(bad, LockError::InvalidArgument { .. }) && bad.to_string().contains("control"),
            "{name}: {bad}"
        );
    }
}
