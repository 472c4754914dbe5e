//! Shutting a client down: every hold given back, every queued clean-up sent, the background
//! tasks stopped, before the process exits (a release queued on the client's thread would
//! otherwise die with the process and leave its lock held for the whole lease).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::machinery::release::release_all_counts;
use crate::machinery::shared::Shared;

/// Closes the client to new acquires, releases every hold the watchdog keeps (their guards
/// read as lost), waits for acquires under way to end and for queued releases and clean-ups,
/// then stops the watchdog, the failover watch and the subscriber. Each wait is bounded by
/// the response timeout.
pub(crate) async fn shutdown(shared: &Arc<Shared>) {
    shared.closed.store(true, Ordering::Release);
    // Parked waiters of this client wake, find it closed and give up.
    shared.waiters.wake_all();
    let bound = shared.response_timeout;
    let holds = shared.watchdog.take_all();
    for hold in &holds {
        hold.end_for_shutdown();
    }
    let releases =
        futures_util::future::join_all(holds.iter().map(|h| release_all_counts(shared, h)));
    if tokio::time::timeout(bound, releases).await.is_err() {
        tracing::warn!(url = %shared.url, "dlock: shutdown gave up on releases Redis did not answer in time; those locks end with their leases");
    }
    // An acquire that was under way may still be granted; it gives the grant back itself,
    // as a clean-up, before it ends.
    if !shared.acquiring.idle(bound).await {
        tracing::warn!(url = %shared.url, "dlock: shutdown gave up waiting for acquires under way (a task queued behind a hold this client still has waits for its turn)");
    }
    if !shared.bg.flushed(bound).await {
        tracing::warn!(url = %shared.url, "dlock: shutdown gave up on background releases Redis did not answer in time");
    }
    shared.stop.cancel();
    tracing::debug!(url = %shared.url, released = holds.len(), "dlock client shut down");
}
