//! Clean-up for acquires that end without a guard: cancelled, timed out, or failed.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::conn::Conn;
use crate::backend::retry::{self, Backoff};
use crate::backend::script::Call;
use crate::machinery::hold::Hold;
use crate::machinery::shared::Shared;
use crate::machinery::watchdog::FirstRenewal;

/// Armed while an acquire request may be on the wire. Dropped armed (the caller's future was
/// dropped, or the reply was lost), it undoes whatever the server may have granted: the owner
/// id is known before sending, so "release if I am the owner" is always safe to send. The undo
/// is built up front, so Drop only has to send it.
pub(crate) struct Orphan {
    shared: Arc<Shared>,
    conn: Conn,
    key: String,
    /// The longest the grant being undone can live: the undo keeps trying that long.
    lease: Duration,
    undo: Option<Call<'static>>,
}

impl Orphan {
    pub(crate) fn new(
        shared: &Arc<Shared>,
        conn: Conn,
        hold: &Hold,
        reentry_marker: Option<String>,
    ) -> Self {
        let undo = match reentry_marker {
            Some(marker) => hold.kind.undo_reentry(hold, &marker),
            None => {
                let latch = format!("{}{}", hold.keys.latch_prefix, shared.unique_id());
                hold.kind.release(hold, &latch, shared.latch_ttl)
            }
        };
        Orphan {
            shared: shared.clone(),
            conn,
            key: hold.keys.key.clone(),
            lease: hold.lease,
            undo: Some(undo),
        }
    }

    pub(crate) fn disarm(mut self) {
        self.undo = None;
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        let Some(undo) = self.undo.take() else {
            return;
        };
        // Same connection as the acquire: Redis runs it after the acquire, if that was sent.
        let mut conn = self.conn.clone();
        let mut fallback = self.shared.background_conn();
        let key = std::mem::take(&mut self.key);
        let horizon = self.lease.saturating_add(Duration::from_secs(2));
        // On the client's thread, so a future dropped anywhere (a plain thread, a runtime
        // shutting down) is still cleaned up.
        self.shared.bg.spawn_cleanup(async move {
            let started = tokio::time::Instant::now();
            let mut backoff = Backoff::new();
            // Read as a bare value: releases answer a count or `{0, listeners}`, and only a
            // failure to get an answer at all may be retried.
            let mut result = undo.invoke_async::<redis::Value>(&mut conn).await;
            // Tried again through passing faults (Redis down, restarting, still loading) for
            // as long as the grant could live: a grant restored by a restart would otherwise
            // stay held by nobody until its lease ends. Owner-conditional (an undo of a
            // re-entry is marker-conditional), so it is safe to repeat. After the first try,
            // on the client's own connection: the acquire's may be gone with its runtime.
            while let Err(e) = &result {
                if !retry::is_transient(e) || started.elapsed() + backoff.peek() >= horizon {
                    break;
                }
                tokio::time::sleep(backoff.next_pause()).await;
                result = undo.invoke_async::<redis::Value>(&mut fallback).await;
            }
            match result {
                Ok(r) => tracing::debug!(%key, result = ?r, "dlock: cleaned up after a cancelled acquire"),
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

    /// The hold is ours: renewals start, the first one as `first` says.
    pub(crate) fn activate(mut self, first: FirstRenewal) {
        if self.watchdog {
            self.shared.watchdog.activate(self.hold.id, first);
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
