//! A blocking call made on the client's own thread: only code the client runs can be there,
//! so the test puts it there through the client's insides.

use std::time::{Duration, Instant};

use super::LockClient;
use crate::error::LockError;
use crate::testing::RedisServer;

#[test]
fn a_blocking_call_on_the_clients_own_thread_fails_at_once() {
    let redis = RedisServer::start().expect("start redis-server");
    let locks = LockClient::connect(&redis.url()).expect("connect");
    let on_its_thread = locks.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    locks.shared().bg.spawn(async move {
        let got = (on_its_thread.lock("blocking:own-thread").acquire()).map(|g| g.fencing_token());
        let _ = tx.send((got, started.elapsed()));
    });
    // Before the check, the call waited for the thread it blocked: forever.
    let (got, took) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a blocking call on the client's own thread hung instead of failing");
    match got {
        Err(e @ LockError::BlockingCall { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`blocking:own-thread`"), "{text}");
            assert!(text.contains("the client's own thread"), "{text}");
            assert!(text.contains("tokio::task::spawn_blocking"), "{text}");
            assert_eq!(e.lock_name(), Some("blocking:own-thread"));
        }
        other => panic!("a call on the client's own thread: {other:?}"),
    }
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    // The client itself is unharmed: the same call from this thread works.
    let guard = locks
        .lock("blocking:own-thread")
        .acquire()
        .expect("acquire");
    guard.release().expect("release");
}
