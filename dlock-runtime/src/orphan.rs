//! Clean-up for acquires that end without a guard: cancelled, timed out, or failed.

use std::sync::Arc;

use tokio::time::Instant;

use crate::conn::Conn;
use crate::hold::Hold;
use crate::scripts;
use crate::shared::Shared;

/// Armed while an acquire request may be on the wire. Dropped armed (the caller's future was
/// dropped, or the reply was lost), it undoes whatever the server may have granted: the owner
/// id is known before sending, so "release if I am the owner" is always safe to send.
pub(crate) struct Orphan {
    shared: Arc<Shared>,
    conn: Conn,
    key: String,
    channel: String,
    latch_prefix: String,
    owner: String,
    lease_ms: u64,
    reentry_marker: Option<String>,
    armed: bool,
}

impl Orphan {
    pub(crate) fn new(
        shared: &Arc<Shared>,
        conn: Conn,
        hold: &Hold,
        reentry_marker: Option<String>,
    ) -> Self {
        Orphan {
            shared: shared.clone(),
            conn,
            key: hold.keys.key.clone(),
            channel: hold.keys.channel.clone(),
            latch_prefix: hold.keys.latch_prefix.clone(),
            owner: hold.owner.clone(),
            lease_ms: hold.lease.as_millis() as u64,
            reentry_marker,
            armed: true,
        }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Same connection as the acquire: Redis runs it after the acquire, if that was sent.
        let mut conn = self.conn.clone();
        let key = std::mem::take(&mut self.key);
        let owner = std::mem::take(&mut self.owner);
        let marker = self.reentry_marker.take();
        let channel = std::mem::take(&mut self.channel);
        let latch = format!("{}{}", self.latch_prefix, self.shared.unique_id());
        let (lease_ms, latch_ms) = (self.lease_ms, self.shared.latch_ttl.as_millis() as u64);
        // On the client's thread, so a future dropped anywhere (a plain thread, a runtime
        // shutting down) is still cleaned up.
        self.shared.bg.spawn(async move {
            let result: redis::RedisResult<i64> = match marker {
                Some(marker) => {
                    scripts::UNDO_REENTRY
                        .key(&key)
                        .key(&marker)
                        .key(&channel)
                        .arg(&owner)
                        .invoke_async(&mut conn)
                        .await
                }
                None => {
                    scripts::RELEASE
                        .key(&key)
                        .key(&channel)
                        .key(&latch)
                        .arg(&owner)
                        .arg(lease_ms)
                        .arg(latch_ms)
                        .invoke_async(&mut conn)
                        .await
                }
            };
            match result {
                Ok(r) => tracing::debug!(%key, result = r, "dlock: cleaned up after a cancelled acquire"),
                Err(e) => tracing::warn!(%key, error = %e, "dlock: clean-up of a cancelled acquire failed; a possible hold expires with its TTL"),
            }
        });
    }
}

/// The watchdog registration of an acquire in progress; removed again unless activated.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    hold: Arc<Hold>,
    watchdog: bool,
    done: bool,
}

impl Registration {
    pub(crate) fn new(shared: &Arc<Shared>, hold: Arc<Hold>, watchdog: bool) -> Self {
        if watchdog {
            shared.watchdog.register(hold.clone());
        }
        Registration {
            shared: shared.clone(),
            hold,
            watchdog,
            done: false,
        }
    }

    pub(crate) fn activate(mut self, sent_at: Instant) {
        if self.watchdog {
            self.shared.watchdog.activate(self.hold.id, sent_at);
        }
        self.done = true;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.done && self.watchdog {
            self.shared.watchdog.remove(self.hold.id);
        }
    }
}
