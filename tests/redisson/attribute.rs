//! `#[distributed_lock(kind = "redisson" | "redisson_fenced" | "redisson_read" |
//! "redisson_write")]`: the bodies run under Redisson's locks, which the Java side sees and
//! respects.

use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError};

use crate::common;
use crate::java::{JavaClient, Side};
use crate::lock::{assert_redisson_field, hgetall, only_redisson_keys};

#[distributed_lock(key = "order:{id}", kind = "redisson", client = locks, wait = "5s")]
async fn pay(locks: &LockClient, java: &JavaClient, url: &str, id: u32) -> Result<(), LockError> {
    let mut conn = common::raw(url).await;
    let fields = hgetall(&mut conn, &format!("order:{id}")).await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_redisson_field(&fields[0].0);
    let name = format!("order:{id}");
    assert!(
        !java
            .try_lock(&name, 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    Ok(())
}

#[distributed_lock(key = "ledger:{id}", kind = "redisson_fenced", client = locks, wait = "5s")]
async fn post(locks: &LockClient, id: u32) -> Result<u64, LockError> {
    Ok(dlock::current_lock().unwrap().fencing_token())
}

#[distributed_lock(key = "doc:{id}", kind = "redisson_read", client = locks, wait = "5s")]
async fn read_doc(locks: &LockClient, java: &JavaClient, id: u32) -> Result<(), LockError> {
    let name = format!("doc:{id}");
    // A Java reader joins; a Java writer is refused.
    assert!(
        java.try_lock(&name, 1, Side::Read, Duration::ZERO, None)
            .await
    );
    assert!(
        !java
            .try_lock(&name, 2, Side::Write, Duration::ZERO, None)
            .await
    );
    assert_eq!(java.unlock(&name, 1, Side::Read).await, Ok(false));
    Ok(())
}

#[distributed_lock(key = "doc:{id}", kind = "redisson_write", client = locks, wait = "5s")]
async fn write_doc(locks: &LockClient, java: &JavaClient, id: u32) -> Result<(), LockError> {
    let name = format!("doc:{id}");
    assert!(
        !java
            .try_lock(&name, 1, Side::Read, Duration::ZERO, None)
            .await
    );
    assert!(
        !java
            .try_lock(&name, 2, Side::Write, Duration::ZERO, None)
            .await
    );
    // A redisson_read body on the same key inside the write body: a downgrade, as Redisson
    // lets the write holder read.
    read_doc_inside(locks, id).await
}

#[distributed_lock(key = "doc:{id}", kind = "redisson_read", client = locks, wait = "0s")]
async fn read_doc_inside(locks: &LockClient, id: u32) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn the_redisson_kinds_of_the_attribute_take_redissons_locks() {
    let server = common::server();
    let client = common::client(&server).await;
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    pay(&client, &java, &server.url(), 7).await.unwrap();
    read_doc(&client, &java, 3).await.unwrap();
    write_doc(&client, &java, 3).await.unwrap();
    let mut conn = common::raw(&server.url()).await;
    // The attribute returns once the release is written on the client's connection (its reply
    // is awaited in the background): this other connection sees it once Redis has applied it.
    for key in ["order:7", "doc:3"] {
        common::eventually(Duration::from_secs(5), &format!("{key} released"), || {
            let mut conn = conn.clone();
            async move { hgetall(&mut conn, key).await.is_empty() }
        })
        .await;
    }
    only_redisson_keys(&mut conn, &["order:7", "doc:3"]).await;
    // kind = "redisson_fenced": RFencedLock's counter, one more per grant.
    let first = post(&client, 9).await.unwrap();
    assert_eq!(post(&client, 9).await.unwrap(), first + 1);
    let stored: u64 = dlock::redis::cmd("GET")
        .arg("redisson_lock_token:{ledger:9}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, first + 1);
    // Java takes both once the bodies are done.
    assert!(
        java.try_lock("order:7", 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    assert!(
        java.try_lock("doc:3", 1, Side::Write, Duration::ZERO, None)
            .await
    );
}
