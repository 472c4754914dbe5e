//! Noticing a cluster failover that this client's own traffic did not run into.
//!
//! On one server or Sentinel every hold lives behind the connections the client uses, so a
//! restart or failover breaks one of them and every hold is renewed at once. On a cluster a
//! master can die, and its replica be promoted without the writes it missed, while nothing
//! this client sends goes to that node: its holds there would learn at their next scheduled
//! renewal (up to a third of the lease later), long after another client may have taken the
//! lock on the new master. So while a cluster client holds locks it asks one node for the
//! slot map every [`POLL`], and when a slot has a new master it renews every hold at once:
//! a hold the new master lacks is reported lost within a poll and a round trip of the
//! promotion.

use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use tokio::runtime::Handle;

use crate::machinery::watchdog::Watchdog;
use crate::store::redis::backend::conn::Pool;
use crate::store::redis::backend::slots::Owners;

/// How often the slot map is read while holds exist: one `CLUSTER SLOTS` per client, small
/// next to a failover's own seconds (`cluster-node-timeout` plus the election).
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Starts the watch on `rt`; it ends with the watchdog (the client).
/// Runs until the watchdog is gone or `stop` is cancelled.
pub(crate) fn start(
    watchdog: Weak<Watchdog>,
    pool: Arc<Pool>,
    rt: &Handle,
    stop: CancellationToken,
) {
    let task = run(watchdog, pool);
    rt.spawn(async move { stop.run_until_cancelled(task).await });
}

async fn run(watchdog: Weak<Watchdog>, pool: Arc<Pool>) {
    // Kept across idle spells: a failover between two holds still shows as a change.
    let mut last: Option<Owners> = None;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(dog) = watchdog.upgrade() else {
            return;
        };
        if !dog.holds_any() {
            continue;
        }
        drop(dog);
        let mut conn = pool.background();
        let Ok(Some(now)) = tokio::time::timeout(POLL, conn.slot_owners()).await else {
            // A node that does not answer (maybe the dead master): ask another next time.
            continue;
        };
        if last.as_ref().is_some_and(|before| *before != now) {
            // The read above is the slot map the renewals are grouped by (`slot_owners`).
            tracing::debug!("dlock: cluster slots changed masters; renewing every hold now");
            let renewing = watchdog.upgrade().is_some_and(|dog| dog.renew_all_now());
            if !renewing {
                // A renew-everything pass ran just now, maybe before the promotion: keep the
                // old map, so the next poll sees the change again and asks once more.
                continue;
            }
        }
        last = Some(now);
    }
}
