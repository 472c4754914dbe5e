//! The watchdog: one task per client renews every held lock at a third of its lease.
//!
//! All renewals that are due in a tick go out together: one script call per chunk of keys, the
//! calls sent concurrently on one multiplexed connection, so a tick costs one round trip however
//! many locks are held (not one timer per lock). A hold is registered before its acquire is sent
//! and removed synchronously at the start of its release, so no renewal can outlive the release
//! that ended it (Redisson #7272). A renewal that finds the lock gone marks the hold lost; so does
//! failing to reach Redis until the lease must have run out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::hold::Hold;
use crate::scripts;

/// Keys per renew script call: bounds how long one call keeps Redis busy.
const CHUNK: usize = 500;

struct Entry {
    hold: Arc<Hold>,
    /// False until the acquire reply arrived: nothing to renew yet.
    active: bool,
    due: Instant,
    /// When the lease runs out if no renewal gets through.
    valid_until: Instant,
}

#[derive(Default)]
struct Shared {
    entries: Mutex<HashMap<u64, Entry>>,
    changed: Notify,
    /// When the task will wake next on its own (`None`: it is not sleeping). An acquire only
    /// wakes the task when its renewal falls due before that, which is rare: waking a task on
    /// every acquire would cost a cross-thread wake-up on the hot path.
    planned_wake: Mutex<Option<Instant>>,
}

impl Shared {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

impl Watchdog {
    pub(crate) fn start(conn: ConnectionManager, url: String) -> Self {
        let shared = Arc::new(Shared::default());
        tokio::spawn(run(Arc::downgrade(&shared), conn, url));
        Watchdog { shared }
    }

    /// Step one, before the acquire is sent: the hold exists but is not renewed yet.
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let now = Instant::now();
        self.shared.entries().insert(
            hold.id,
            Entry {
                hold,
                active: false,
                due: now,
                valid_until: now,
            },
        );
    }

    /// Step two, when the acquire reply says we hold it: renewals start from `sent_at`.
    pub(crate) fn activate(&self, id: u64, sent_at: Instant) {
        let due = match self.shared.entries().get_mut(&id) {
            Some(e) => {
                e.active = true;
                e.due = sent_at + e.hold.lease / 3;
                e.valid_until = sent_at + e.hold.lease;
                e.due
            }
            None => return,
        };
        let planned = *self
            .shared
            .planned_wake
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if planned.is_none_or(|wake| due < wake) {
            self.shared.changed.notify_one();
        }
    }

    /// Removes a hold; after this returns no renewal of it will be sent.
    pub(crate) fn remove(&self, id: u64) {
        self.shared.entries().remove(&id);
    }
}

async fn run(shared: Weak<Shared>, mut conn: ConnectionManager, url: String) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let now = Instant::now();
        let (batch, next) = due_now(&s, now);
        if batch.is_empty() {
            // Waking at least every second lets the task notice that its client is gone.
            let wake = next.map_or(now + Duration::from_secs(1), |n| {
                n.min(now + Duration::from_secs(1))
            });
            let changed = s.changed.notified();
            tokio::pin!(changed);
            // Registered before publishing the plan, so an activate that reads the plan and
            // decides to notify cannot be missed.
            changed.as_mut().enable();
            *s.planned_wake.lock().unwrap_or_else(|e| e.into_inner()) = Some(wake);
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
            *s.planned_wake.lock().unwrap_or_else(|e| e.into_inner()) = None;
            continue;
        }
        // A hung call must not hold back the lost signal (or other renewals) for a whole
        // response timeout: give up on it after a third of the shortest lease in the batch.
        let limit = batch.iter().map(|h| h.lease / 3).min().unwrap_or_default();
        let results = tokio::time::timeout(limit, renew(&mut conn, &batch))
            .await
            .unwrap_or_else(|_| vec![None; batch.len()]);
        apply(&s, &batch, results, now, &url);
    }
}

/// Holds due now, or due within a sixth of their lease (so near-due holds share this round
/// trip instead of costing their own), and the next instant anything else falls due.
fn due_now(s: &Shared, now: Instant) -> (Vec<Arc<Hold>>, Option<Instant>) {
    let entries = s.entries();
    let mut batch = Vec::new();
    let mut next: Option<Instant> = None;
    for e in entries.values().filter(|e| e.active) {
        if e.due <= now + e.hold.lease / 6 {
            batch.push(e.hold.clone());
        } else {
            next = Some(next.map_or(e.due, |n| n.min(e.due)));
        }
    }
    (batch, next)
}

async fn renew(conn: &mut ConnectionManager, batch: &[Arc<Hold>]) -> Vec<Option<bool>> {
    let calls = batch.chunks(CHUNK).map(|chunk| {
        let mut conn = conn.clone();
        async move {
            let mut inv = scripts::RENEW.prepare_invoke();
            for h in chunk {
                inv.key(&h.keys.key)
                    .arg(&h.owner)
                    .arg(h.lease.as_millis() as u64);
            }
            let r: redis::RedisResult<Vec<i64>> = inv.invoke_async(&mut conn).await;
            match r {
                Ok(v) => v.into_iter().map(|x| Some(x == 1)).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, locks = chunk.len(), "dlock watchdog renewal failed");
                    vec![None; chunk.len()]
                }
            }
        }
    });
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn apply(s: &Shared, batch: &[Arc<Hold>], results: Vec<Option<bool>>, sent_at: Instant, url: &str) {
    let mut entries = s.entries();
    let now = Instant::now();
    for (hold, result) in batch.iter().zip(results) {
        // Released while the renewal was in flight: the release decided, not us.
        let Some(e) = entries.get_mut(&hold.id) else {
            continue;
        };
        match result {
            Some(true) => {
                e.due = sent_at + hold.lease / 3;
                e.valid_until = sent_at + hold.lease;
            }
            Some(false) => {
                hold.mark_lost("watchdog found the lock gone or owned by someone else");
                entries.remove(&hold.id);
            }
            None if now >= e.valid_until => {
                hold.mark_lost(&format!(
                    "redis at {url} unreachable until the lease ran out"
                ));
                entries.remove(&hold.id);
            }
            None => {
                // Try again after about a twelfth of the lease (due_now batches a sixth early).
                e.due = now + hold.lease / 4;
            }
        }
    }
}
