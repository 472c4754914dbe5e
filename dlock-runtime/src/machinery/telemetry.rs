//! What a lock does, for operators: metrics through the `metrics` facade (feature `metrics`;
//! the application installs the recorder it wants: Prometheus, StatsD, OpenTelemetry) and
//! `tracing` spans (`dlock.acquire`, `dlock.hold`).
//!
//! Every metric is labelled with the lock's *template* (`order:{order.id}` from the
//! attribute, the handle's [`label`](crate::Lock::label) otherwise, else `other`), never the
//! rendered key, so the number of series stays bounded whatever the traffic. Without the
//! feature every function here is empty.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `dlock_acquires_total` | counter | lock, kind, outcome (acquired, timeout, busy, error) |
//! | `dlock_acquire_wait_seconds` | histogram | lock, kind, outcome |
//! | `dlock_hold_seconds` | histogram | lock, kind |
//! | `dlock_lost_total` | counter | lock, kind |
//! | `dlock_local_handoffs_total` | counter | lock, kind |
//! | `dlock_renew_calls_total` | counter | - |
//! | `dlock_renew_tick_seconds` | histogram | - |
//! | `dlock_reconnects_total` | counter | - |

use std::time::Duration;

/// The label of a lock whose handle was given none.
pub(crate) const OTHER: &str = "other";

/// An acquire ended (`outcome`: acquired, timeout, busy, error) after `waited`.
pub(crate) fn acquire_ended(
    lock: &str,
    kind: &'static str,
    outcome: &'static str,
    waited: Duration,
) {
    #[cfg(feature = "metrics")]
    {
        let labels = [
            ("lock", lock.to_owned()),
            ("kind", kind.to_owned()),
            ("outcome", outcome.to_owned()),
        ];
        metrics::counter!("dlock_acquires_total", &labels).increment(1);
        metrics::histogram!("dlock_acquire_wait_seconds", &labels).record(waited.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, kind, outcome, waited);
}

/// A hold ended (its last release) after `held`.
pub(crate) fn hold_ended(lock: &str, kind: &'static str, held: Duration) {
    #[cfg(feature = "metrics")]
    {
        let labels = [("lock", lock.to_owned()), ("kind", kind.to_owned())];
        metrics::histogram!("dlock_hold_seconds", &labels).record(held.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, kind, held);
}

/// A hold was lost (its lease ran out, or Redis no longer has it as ours).
pub(crate) fn lost(lock: &str, kind: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_lost_total", "lock" => lock.to_owned(), "kind" => kind).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, kind);
}

/// A lock went from one task of this process to the next without Redis.
pub(crate) fn local_handoff(lock: &str, kind: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_local_handoffs_total", "lock" => lock.to_owned(), "kind" => kind)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, kind);
}

/// The watchdog sent one renew script call.
pub(crate) fn renew_call() {
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_renew_calls_total").increment(1);
}

/// One watchdog tick renewed its due holds (however many calls that took) in `took`: how the
/// watchdog's cost grows with the holds a client keeps (examples/scale reads it).
pub(crate) fn renew_tick(took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("dlock_renew_tick_seconds").record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = took;
}

/// The subscriber lost its connection and is replacing it.
pub(crate) fn reconnect() {
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_reconnects_total").increment(1);
}
