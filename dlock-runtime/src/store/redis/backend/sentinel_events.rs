//! Listening to the sentinels' `+switch-master` announcements.
//!
//! Without them a client learns of a failover only when a command fails, or at its next
//! periodic check. A primary paused past `down-after-milliseconds` (SIGSTOP, a long DEBUG
//! SLEEP, a stalled VM) fails nothing: it wakes up after the promotion still calling itself
//! master, and answers, for seconds, until the sentinels reconfigure it. A client that has
//! not heard of the promotion by then locks on it while others lock on the new primary.
//! Every sentinel is listened to, so the first that announces the switch is heard.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::runtime::Handle;

use crate::store::redis::backend::sentinel_ask::ASK_TIMEOUT;

/// The channel sentinels announce a completed failover on:
/// `<master name> <old ip> <old port> <new ip> <new port>`.
const CHANNEL: &str = "+switch-master";

/// Pause before reconnecting to a sentinel that went away.
const RECONNECT: Duration = Duration::from_secs(1);

/// How often a listener checks that its follower still exists while nothing is announced.
const LIVENESS: Duration = Duration::from_secs(1);

/// Who is told of an announcement.
pub(crate) trait Announced: Send + Sync {
    /// The sentinels moved the master this follower follows to `addr`.
    fn switched_to(self: Arc<Self>, addr: (String, u16));
}

/// Starts one listener per sentinel on `rt`; each ends soon after `to` is dropped.
pub(crate) fn listen(
    sentinels: &[redis::Client],
    name: &str,
    to: Weak<dyn Announced>,
    rt: &Handle,
) {
    for sentinel in sentinels {
        let (sentinel, name, to) = (sentinel.clone(), name.to_owned(), to.clone());
        drop(rt.spawn(async move { listen_one(sentinel, name, to).await }));
    }
}

async fn listen_one(sentinel: redis::Client, name: String, to: Weak<dyn Announced>) {
    while to.strong_count() > 0 {
        let subscribed = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe(CHANNEL).await?;
            redis::RedisResult::Ok(pubsub)
        };
        let pubsub = match tokio::time::timeout(ASK_TIMEOUT, subscribed).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "dlock: cannot listen to a sentinel; retrying");
                tokio::time::sleep(RECONNECT).await;
                continue;
            }
            Err(_) => {
                tokio::time::sleep(RECONNECT).await;
                continue;
            }
        };
        let mut messages = pubsub.into_on_message();
        loop {
            let next = tokio::time::timeout(LIVENESS, messages.next()).await;
            let Some(to) = to.upgrade() else { return };
            match next {
                Err(_) => continue, // quiet: just checked the follower is alive
                Ok(None) => break,  // the sentinel went away: reconnect
                Ok(Some(msg)) => {
                    let text: String = msg.get_payload().unwrap_or_default();
                    if let Some(addr) = new_address(&text, &name) {
                        tracing::debug!(master = %name, host = %addr.0, port = addr.1, "dlock: a sentinel announced a new primary");
                        to.switched_to(addr);
                    }
                }
            }
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// The new address in a `+switch-master` message about `name`.
fn new_address(message: &str, name: &str) -> Option<(String, u16)> {
    let parts: Vec<&str> = message.split_whitespace().collect();
    match parts.as_slice() {
        [master, _, _, ip, port] if *master == name => Some(((*ip).to_owned(), port.parse().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::new_address;

    #[test]
    fn announcements_of_other_masters_and_garbage_are_ignored() {
        let msg = "dlock-primary 127.0.0.1 6379 127.0.0.1 6380";
        assert_eq!(
            new_address(msg, "dlock-primary"),
            Some(("127.0.0.1".to_owned(), 6380))
        );
        assert_eq!(new_address(msg, "other"), None);
        assert_eq!(
            new_address("dlock-primary 127.0.0.1 6379", "dlock-primary"),
            None
        );
        assert_eq!(new_address("dlock-primary a 1 b x", "dlock-primary"), None);
    }
}
