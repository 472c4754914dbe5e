//! Releases this client has written but Redis has not answered yet, by key.
//!
//! A release returned once written (`LockGuard::release_written`, what the attribute does)
//! promises that this client's next acquire of the key sees it: the acquire goes on the same
//! connection, behind it. Two things break that order, and both wait here for the release's
//! reply:
//! * a replica-synced acquire goes on another connection (its script and WAIT need one of
//!   their own), so it waits before it is sent;
//! * a release that Redis could not run at once (its script missing: Redis 6.2's first use of
//!   a script, a `SCRIPT FLUSH` / `FUNCTION FLUSH`, a restart) is re-sent with the script's
//!   text after its reply, behind the acquire; so an acquire refused while a release of its
//!   key is in flight waits for it and asks again, once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Default)]
pub(crate) struct Written {
    /// Releases written and not yet answered, per lock key.
    keys: Mutex<HashMap<String, usize>>,
    answered: Notify,
}

impl Written {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a release of `key` as written until the returned value is dropped (its reply
    /// arrived, or the release gave up).
    pub(crate) fn begin(self: &Arc<Self>, key: &str) -> InFlight {
        *self.keys().entry(key.to_owned()).or_default() += 1;
        InFlight {
            written: self.clone(),
            key: key.to_owned(),
        }
    }

    /// Whether a release of `key` written by this client is waiting for its reply.
    pub(crate) fn in_flight(&self, key: &str) -> bool {
        self.keys().contains_key(key)
    }

    /// Returns once no release of `key` written by this client is waiting for its reply.
    pub(crate) async fn settled(&self, key: &str) {
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            // Registered before the check, so an answer in between is not missed.
            answered.as_mut().enable();
            if !self.keys().contains_key(key) {
                return;
            }
            answered.await;
        }
    }
}

/// One written release still waiting for its reply.
pub(crate) struct InFlight {
    written: Arc<Written>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut keys = self.written.keys();
        if let Some(n) = keys.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&self.key);
            }
        }
        drop(keys);
        self.written.answered.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_acquire_waits_only_for_releases_of_its_own_key() {
        let written = Arc::new(Written::default());
        let a = written.begin("a");
        let a2 = written.begin("a");
        // Another key's release does not hold anything up.
        tokio::time::timeout(Duration::from_secs(1), written.settled("b"))
            .await
            .expect("no release of b is in flight");
        let waiting = tokio::spawn({
            let written = written.clone();
            async move { written.settled("a").await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "one release of a is still in flight"
        );
        drop(a2);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("settled once both releases were answered")
            .unwrap();
    }
}
