//! What a Sentinel client does when it switches to a new primary.
//!
//! A switch can come without any broken connection: the old primary may still answer (it was
//! paused through the promotion, or a partition healed), so neither the watchdog nor the
//! subscriber notices on its own. Every hold is renewed on the new primary at once (one it
//! lacks is reported lost within a round trip, not at its next scheduled renewal), and the
//! subscriber leaves the old primary, whose releases no longer matter, for the new one.

use std::sync::Weak;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::machinery::waiters::Reconnect;
use crate::machinery::watchdog::Watchdog;

/// Starts acting on `switches` on `rt`, until the watchdog (the client) is gone or `stop` is
/// cancelled.
pub(crate) fn start(
    mut switches: watch::Receiver<u64>,
    watchdog: Weak<Watchdog>,
    subscriber: Reconnect,
    rt: &Handle,
    stop: CancellationToken,
) {
    let task = async move {
        while switches.changed().await.is_ok() {
            let Some(dog) = watchdog.upgrade() else {
                return;
            };
            dog.renew_all_on_new_primary();
            subscriber.now();
        }
    };
    rt.spawn(async move { stop.run_until_cancelled(task).await });
}
