//! One question for every store: may trying again later succeed? (`LockError::is_transient`,
//! what a service maps to 503 rather than 500.) Asked of the same failures on each store.

use std::time::Duration;

use super::both::{stores, Need};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_answers_whether_trying_again_can_help() {
    for mut store in stores() {
        let name = store.name();
        let a = store.client().await;
        let b = store.client().await;

        // Busy: another owner holds it for the whole wait.
        let held = a.lock("stores:errors").acquire().await.expect("acquire");
        let busy = b
            .lock("stores:errors")
            .wait(Duration::ZERO)
            .acquire()
            .await
            .expect_err("acquired a held lock");
        assert!(
            matches!(busy, dlock::LockError::Timeout { .. }) && busy.is_transient(),
            "{name}: {busy}"
        );

        // Gone: the hold was taken away; releasing it again cannot succeed.
        b.lock("stores:errors")
            .force_unlock()
            .await
            .expect("force unlock");
        let gone = held.release().await.expect_err("released a lost hold");
        assert!(
            matches!(gone, dlock::LockError::NotHeld { .. }) && !gone.is_transient(),
            "{name}: {gone}"
        );

        if store.can(Need::Semaphore) {
            // Refused: a semaphore in use with another permit count gives the same answer on
            // every try.
            let permit = a
                .semaphore("stores:errors:sem", 2)
                .acquire()
                .await
                .expect("permit");
            let refused = b
                .semaphore("stores:errors:sem", 3)
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect_err("a second permit count was accepted");
            assert!(!refused.is_transient(), "{name}: {refused}");
            // Busy, told the way a semaphore is busy.
            let second = a
                .semaphore("stores:errors:sem", 2)
                .acquire()
                .await
                .expect("second permit");
            let full = b
                .semaphore("stores:errors:sem", 2)
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect_err("a third permit of two");
            assert!(
                full.is_transient()
                    && full
                        .to_string()
                        .ends_with("waiting for lock `stores:errors:sem` (all 2 permits in use)"),
                "{name}: {full}"
            );
            second.release().await.expect("release permit");
            permit.release().await.expect("release permit");
        }

        // Down: the server is gone (killed; its port refuses), which a later try may find up.
        store.kill();
        let down = a
            .lock("stores:errors:down")
            .wait(Duration::from_millis(300))
            .acquire()
            .await
            .expect_err("acquired from a server that is down");
        assert!(down.is_transient(), "{name}: {down}");
        store.start_again();
    }
}
