//! `Hold`: what one owner's hold of one lock shares between its guards and the watchdog.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::gate::GatePass;
use crate::names::LockKeys;

pub(crate) struct Hold {
    /// Identifies the hold inside the watchdog.
    pub(crate) id: u64,
    pub(crate) client_id: String,
    pub(crate) name: String,
    pub(crate) keys: LockKeys,
    pub(crate) owner: String,
    /// The lease set on every acquire, renewal and partial release.
    pub(crate) lease: Duration,
    /// `Some(deadline)` for a hard lease (no watchdog): the lock is gone at that instant.
    pub(crate) hard_deadline: Mutex<Option<Instant>>,
    pub(crate) token: AtomicU64,
    /// Guards alive for this hold (the first acquire plus re-entries through `scope`).
    pub(crate) local_holds: AtomicU32,
    lost: AtomicBool,
    lost_notify: Notify,
    /// This client's turn at the key; given back after the last hold's release.
    pub(crate) gate: Mutex<Option<GatePass>>,
}

impl Hold {
    pub(crate) fn new(
        id: u64,
        client_id: String,
        name: String,
        keys: LockKeys,
        owner: String,
        lease: Duration,
    ) -> Self {
        Hold {
            id,
            client_id,
            name,
            keys,
            owner,
            lease,
            hard_deadline: Mutex::new(None),
            token: AtomicU64::new(0),
            local_holds: AtomicU32::new(0),
            lost: AtomicBool::new(false),
            lost_notify: Notify::new(),
            gate: Mutex::new(None),
        }
    }

    pub(crate) fn hard_deadline(&self) -> Option<Instant> {
        *self.hard_deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
            || self.hard_deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// Records that this owner no longer holds the lock and wakes everyone watching `lost()`.
    pub(crate) fn mark_lost(&self, why: &str) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(lock = %self.name, key = %self.keys.key, reason = why, "dlock: lock lost");
            self.lost_notify.notify_waiters();
        }
    }

    /// Completes when the hold is lost (or its hard lease ran out).
    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.lost_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            match self.hard_deadline() {
                Some(deadline) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    pub(crate) fn release_gate(&self) {
        self.gate.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
