//! Every client connection closed by the server while a lock is held and another client waits
//! (`pg_terminate_backend` on PostgreSQL, `CLIENT KILL` on Redis): the holder's watchdog
//! reconnects and keeps its hold past a whole lease, and the waiter, whose subscriber connection
//! was replaced, is still woken by the release rather than by the lease's end.

use std::time::{Duration, Instant};

use super::both::{stores, Need, Store};

/// How long a wait for the server to show a subscribed connection may take.
const SUBSCRIBED_WITHIN: Duration = Duration::from_secs(10);

/// Polls the server (the subscription is an event inside it) until some subscribed connection
/// is not one of `old`; returns the new ones.
fn wait_for_new_listener(store: &Store, old: &[String]) -> Vec<String> {
    let started = Instant::now();
    loop {
        let new: Vec<String> = store
            .listening_connections()
            .into_iter()
            .filter(|id| !old.contains(id))
            .collect();
        if !new.is_empty() {
            return new;
        }
        assert!(
            started.elapsed() < SUBSCRIBED_WITHIN,
            "{}: no connection subscribed (other than {old:?}) within {SUBSCRIBED_WITHIN:?}",
            store.name()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_and_a_waiter_survive_every_connection_killed_by_the_server() {
    for store in stores() {
        if !store.can(Need::KillConnections) {
            continue;
        }
        let holder = store.client().await;
        let waiting = store.client().await;
        // A short lease, to be outlived after the kill, and a long one, whose end a waiter
        // woken by anything but the release would have to wait for.
        let short = (holder.lock("stores:killed:short"))
            .ttl(Duration::from_secs(2))
            .acquire()
            .await
            .expect("acquire short");
        let long = (holder.lock("stores:killed:long"))
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .expect("acquire long");
        let (short_token, long_token) = (short.fencing_token(), long.fencing_token());
        let waiter = tokio::spawn(async move {
            let got = (waiting.lock("stores:killed:long"))
                .wait(Duration::from_secs(25))
                .acquire()
                .await;
            (got, Instant::now(), waiting)
        });
        // The waiter is parked once its subscriber listens (it subscribes before it retries).
        let before = {
            let store = &store;
            tokio::task::block_in_place(|| wait_for_new_listener(store, &[]))
        };
        let killed = tokio::task::block_in_place(|| store.kill_connections());
        // Holder: its command connection(s) and its subscriber; waiter: the same.
        assert!(
            killed >= 3,
            "{}: only {killed} connections killed",
            store.name()
        );
        let killed_at = Instant::now();
        // The waiter's subscriber reconnects and subscribes again.
        let after = tokio::task::block_in_place(|| wait_for_new_listener(&store, &before));
        assert!(!after.is_empty());

        // Past a whole lease of the short hold: only renewals sent on new connections keep it.
        tokio::time::sleep(Duration::from_secs(3).saturating_sub(killed_at.elapsed())).await;
        assert!(
            !short.is_lost(),
            "{}: the hold was lost after the kill",
            store.name()
        );
        let other = store.client().await;
        assert!(
            (other.lock("stores:killed:short").try_acquire().await)
                .unwrap_or_else(|e| panic!("{}: try: {e}", store.name()))
                .is_none(),
            "{}: another client got a lock whose holder's connections were killed",
            store.name()
        );
        assert!(!waiter.is_finished(), "{}: the waiter got in", store.name());

        let released_at = Instant::now();
        long.release().await.expect("release long");
        let (got, at, _waiting) = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .unwrap_or_else(|_| panic!("{}: the waiter never returned", store.name()))
            .expect("waiter task");
        let got = got.unwrap_or_else(|e| panic!("{}: waiter: {e}", store.name()));
        let after = at.duration_since(released_at);
        // Without the release's message the waiter wakes at the 30 s lease's end; a missed
        // message is made up for at the subscriber's next reconnect, not before.
        assert!(
            after < Duration::from_secs(2),
            "{}: the waiter was woken {after:?} after the release",
            store.name()
        );
        assert!(got.fencing_token() > long_token, "{}", store.name());
        got.release().await.expect("release");
        short.release().await.expect("release short");
        let again = (other.lock("stores:killed:short"))
            .try_acquire()
            .await
            .expect("try")
            .unwrap_or_else(|| panic!("{}: released, yet held", store.name()));
        assert!(again.fencing_token() > short_token, "{}", store.name());
        again.release().await.expect("release");
    }
}
