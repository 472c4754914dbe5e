//! Clean-up for acquires that end without a guard: cancelled, timed out, or failed.

use std::sync::Arc;
use std::time::Duration;

use crate::machinery::hold::Hold;
use crate::machinery::shared::Shared;
use crate::machinery::watchdog::FirstRenewal;
use crate::store::link::Link;
use crate::store::redis::backend::retry::Backoff;
use crate::store::redis::kinds::{Claim, LockKind};

/// Armed while an acquire request may be on the wire. Dropped armed (the caller's future was
/// dropped, or the reply was lost), it undoes whatever the server may have granted: the owner
/// id is known before sending, so "release if I am the owner" is always safe to send.
pub(crate) struct Orphan {
    shared: Arc<Shared>,
    link: Link,
    kind: Arc<dyn LockKind>,
    claim: Claim,
    undo: Option<Undo>,
}

/// What undoes an acquire.
enum Undo {
    /// The re-entry with this marker, if it ran.
    Reentry(String),
    /// The owner's hold, at most once per this latch.
    Release(String),
}

impl Orphan {
    pub(crate) fn new(
        shared: &Arc<Shared>,
        link: Link,
        hold: &Hold,
        reentry_marker: Option<String>,
    ) -> Self {
        let undo = match reentry_marker {
            Some(marker) => Undo::Reentry(marker),
            None => Undo::Release(format!("{}{}", hold.keys.latch_prefix, shared.unique_id())),
        };
        Orphan {
            shared: shared.clone(),
            link,
            kind: hold.kind.clone(),
            claim: hold.claim.clone(),
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
        // Same connection as the acquire: the store runs it after the acquire, if that was sent.
        let mut link = self.link.clone();
        let mut fallback = self.shared.background_link();
        let (kind, claim) = (self.kind.clone(), self.claim.clone());
        let latch_ttl = self.shared.latch_ttl;
        let shared = self.shared.clone();
        // The longest the grant being undone can live: the undo keeps trying that long.
        let horizon = claim.lease.saturating_add(Duration::from_secs(2));
        // On the client's thread, so a future dropped anywhere (a plain thread, a runtime
        // shutting down) is still cleaned up.
        self.shared.bg.spawn_cleanup(async move {
            let started = tokio::time::Instant::now();
            let mut backoff = Backoff::new();
            let send = |link: &mut Link| {
                let mut link = link.clone();
                let (kind, claim) = (kind.clone(), &claim);
                let undo = &undo;
                async move {
                    match undo {
                        Undo::Reentry(marker) => link.undo_reentry(&*kind, claim, marker).await,
                        Undo::Release(latch) => (link.release(&*kind, claim, latch, latch_ttl))
                            .await
                            .map(drop),
                    }
                }
            };
            let mut result = send(&mut link).await;
            // Tried again through passing faults (the store down, restarting, still loading)
            // for as long as the grant could live: a grant restored by a restart would
            // otherwise stay held by nobody until its lease ends. Owner-conditional (an undo
            // of a re-entry is marker-conditional), so it is safe to repeat. After the first
            // try, on the client's own connection: the acquire's may be gone with its runtime.
            while let Err(e) = &result {
                if !e.is_transient() || started.elapsed() + backoff.peek() >= horizon {
                    break;
                }
                tokio::time::sleep(backoff.next_pause()).await;
                result = send(&mut fallback).await;
            }
            let key = &claim.keys.key;
            match result {
                Ok(()) => tracing::debug!(%key, "dlock: cleaned up after a cancelled acquire"),
                Err(e) => {
                    tracing::warn!(%key, error = %e, "dlock: clean-up of a cancelled acquire failed; a possible hold expires with its TTL");
                    shared.store_gave_up(&claim.owner, kind.id());
                }
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
