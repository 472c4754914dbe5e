//! `Hold`: what one owner's hold of one lock shares between its guards and the watchdog.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::machinery::gate::{courtesy, GatePass};
use crate::machinery::telemetry;
use crate::store::redis::kinds::{Claim, LockKind};

pub(crate) struct Hold {
    /// Identifies the hold inside the watchdog.
    pub(crate) id: u64,
    /// What Redis knows of it: name, keys, owner, lease (read through `Deref`).
    pub(crate) claim: Claim,
    /// What this hold sends to Redis (its scripts, arguments and replies).
    pub(crate) kind: Arc<dyn LockKind>,
    /// Until when this owner may act as the holder: the instant the last successful acquire
    /// or renewal was *sent*, plus the lease, minus [`drift`]. Redis cannot have expired the key
    /// before then, so nobody else can hold the lock yet. Only moves forward, and never once
    /// passed: `None` until the acquire's reply arrived.
    valid_until: Mutex<Option<Instant>>,
    pub(crate) token: AtomicU64,
    /// Guards alive for this hold (the first acquire plus re-entries through `scope`).
    pub(crate) local_holds: AtomicU32,
    lost: AtomicBool,
    lost_notify: Notify,
    /// This client's turn at the key; given back after the last hold's release.
    pub(crate) gate: Mutex<Option<GatePass>>,
    /// How many local handoffs passed the lock on since this process took it in Redis.
    pub(crate) handoffs: u32,
    /// When this process took the lock in Redis (handoffs keep the first holder's).
    pub(crate) kept_since: Instant,
    /// Set when this hold's release goes to Redis to end a run of handoffs: the next local
    /// contender lets other processes go first.
    yield_next: AtomicBool,
    /// Cancelled when the hold is lost; made (with the task that cancels it) on first request.
    cancel: OnceLock<CancellationToken>,
    /// The client's own runtime, where that task runs.
    bg: tokio::runtime::Handle,
    /// The lock's template, for metrics (see `telemetry.rs`).
    pub(crate) label: Arc<str>,
    /// Released in Redis by the client's shutdown: its guards' releases send nothing.
    pub(crate) released_by_shutdown: AtomicBool,
    /// While held: the `dlock.hold` span, and when the hold began.
    holding: Mutex<Option<(tracing::Span, Instant)>>,
}

impl Hold {
    /// A new hold (not yet acquired) of `claim`, known to the watchdog as `id`.
    pub(crate) fn new(
        id: u64,
        claim: Claim,
        kind: Arc<dyn LockKind>,
        bg: tokio::runtime::Handle,
    ) -> Self {
        Hold {
            id,
            claim,
            kind,
            valid_until: Mutex::new(None),
            token: AtomicU64::new(0),
            local_holds: AtomicU32::new(0),
            lost: AtomicBool::new(false),
            lost_notify: Notify::new(),
            gate: Mutex::new(None),
            handoffs: 0,
            kept_since: Instant::now(),
            yield_next: AtomicBool::new(false),
            cancel: OnceLock::new(),
            bg,
            label: Arc::from(telemetry::OTHER),
            released_by_shutdown: AtomicBool::new(false),
            holding: Mutex::new(None),
        }
    }

    /// The hold a local handoff gives the next task (known to the watchdog as `id`; it asked
    /// with the same lease, see `GatePass::next_takes`): the same Redis owner, lease and
    /// validity deadline as `from`, a new local owner (its own id, hold count and lost signal)
    /// and the next fencing token.
    pub(crate) fn handed_from(from: &Hold, id: u64) -> Self {
        Hold {
            id,
            claim: from.claim.clone(),
            kind: from.kind.clone(),
            valid_until: Mutex::new(Some(from.valid_until())),
            token: AtomicU64::new(from.token.load(Ordering::Acquire) + 1),
            local_holds: AtomicU32::new(1),
            lost: AtomicBool::new(false),
            lost_notify: Notify::new(),
            gate: Mutex::new(None),
            handoffs: from.handoffs + 1,
            kept_since: from.kept_since,
            yield_next: AtomicBool::new(false),
            cancel: OnceLock::new(),
            bg: from.bg.clone(),
            label: from.label.clone(),
            released_by_shutdown: AtomicBool::new(false),
            holding: Mutex::new(None),
        }
    }

    /// Marks this hold's release as the end of a run of local handoffs.
    pub(crate) fn yield_next(&self) {
        self.yield_next.store(true, Ordering::Release);
    }

    /// Whether this hold's release ends a run of local handoffs (the next local contender owes
    /// other processes a courtesy).
    pub(crate) fn yields_next(&self) -> bool {
        self.yield_next.load(Ordering::Acquire)
    }

    /// Labels the hold's metrics with the lock's template.
    pub(crate) fn labelled(mut self, label: Arc<str>) -> Self {
        self.label = label;
        self
    }

    /// The hold begins (granted, or handed over with `token`): opens its `dlock.hold` span.
    pub(crate) fn begin_holding(&self, token: u64) {
        // A root of its own that follows the acquire: as a child it would keep the
        // `dlock.acquire` span open until the release.
        let span = tracing::info_span!(
            parent: None,
            "dlock.hold",
            lock = %self.name,
            kind = self.kind.id(),
            token
        );
        span.follows_from(tracing::Span::current());
        *self.holding.lock().unwrap_or_else(|e| e.into_inner()) = Some((span, Instant::now()));
    }

    /// The hold ends (its last release): closes the span, records how long it was held.
    pub(crate) fn end_holding(&self) {
        // No longer held: work started with the token stops now, not at the lease's end.
        if let Some(token) = self.cancel.get() {
            token.cancel();
        }
        let began = self
            .holding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((_span, since)) = began {
            telemetry::hold_ended(&self.label, self.kind.id(), since.elapsed());
        }
    }

    /// The same hold for an existing owner (a writer taking the read side of its lock keeps
    /// its owner id, so the script knows it is the writer).
    pub(crate) fn for_owner(mut self, owner: &str) -> Self {
        owner.clone_into(&mut self.claim.owner);
        self
    }

    /// The instant this hold stops being valid unless a renewal gets through first (the past,
    /// before the acquire's reply arrived).
    pub(crate) fn valid_until(&self) -> Instant {
        let valid = *self.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        valid.unwrap_or_else(Instant::now)
    }

    /// Records that Redis set (or renewed) the lease by a request sent at `sent_at`. Callers
    /// never confirm a hard lease twice: it ends where the first acquire set it. Once the
    /// deadline has passed the hold stays lost: a renewal reply that arrives afterwards (sent
    /// before a pause, say) must not make `is_lost()` flip back to false.
    pub(crate) fn confirm(&self, sent_at: Instant) {
        self.confirm_for(sent_at, self.lease);
    }

    /// [`Hold::confirm`] for a request that set an expiry of `lease` rather than the hold's own
    /// (a grant handed over by a release lasts a short while, until its owner renews it).
    pub(crate) fn confirm_for(&self, sent_at: Instant, lease: Duration) {
        let until = sent_at + lease - drift(lease);
        let mut valid = self.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        match *valid {
            None => *valid = Some(until),
            Some(v) if Instant::now() < v && until > v => *valid = Some(until),
            Some(_) => {}
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire) || Instant::now() >= self.valid_until()
    }

    /// Records that this owner no longer holds the lock and wakes everyone watching `lost()`.
    pub(crate) fn mark_lost(&self, why: &str) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(lock = %self.name, key = %self.keys.key, reason = why, "dlock: lock lost");
            telemetry::lost(&self.label, self.kind.id());
            self.lost_notify.notify_waiters();
        }
    }

    /// Ends the hold because its client is shutting down and releases it in Redis: it reads
    /// as lost (its guards must stop, and their releases send nothing), but nothing went
    /// wrong, so no warning and no `dlock_lost_total`.
    pub(crate) fn end_for_shutdown(&self) {
        self.released_by_shutdown.store(true, Ordering::Release);
        if !self.lost.swap(true, Ordering::AcqRel) {
            tracing::debug!(lock = %self.name, "dlock: hold ended by the client's shutdown");
            self.lost_notify.notify_waiters();
        }
    }

    /// A token cancelled when the hold is lost (see [`Hold::lost`]): a child of the hold's
    /// own, so cancelling it affects nobody else. The first request starts a task on the
    /// client's thread that cancels the hold's token when [`Hold::lost`] completes.
    pub(crate) fn cancellation_token(self: &Arc<Self>) -> CancellationToken {
        self.cancel
            .get_or_init(|| {
                let token = CancellationToken::new();
                let (hold, cancel) = (self.clone(), token.clone());
                drop(self.bg.spawn(async move {
                    // Cancels however the task ends: the hold lost or released, or the
                    // client's thread gone (its tasks dropped).
                    let _cancel = cancel.clone().drop_guard();
                    tokio::select! {
                        _ = hold.lost() => {}
                        _ = cancel.cancelled() => {}
                    }
                }));
                token
            })
            .child_token()
    }

    /// Completes when the hold is lost: marked so, or its validity deadline passed. Driven by
    /// a timer, so it fires even while Redis or the network is silent.
    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.lost_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            // A renewal may push the deadline on meanwhile: sleep to the one known now, recheck.
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(self.valid_until()) => {}
            }
        }
    }

    /// Gives this client's turn at the key to the next local task; `release_rtt`: how long the
    /// release in Redis took, which sets the next contender's courtesy after a run of handoffs
    /// (`None`: no courtesy is owed, as nobody else was listening or nothing was sent).
    pub(crate) fn release_gate(&self, release_rtt: Option<Duration>) {
        let pass = self.gate.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let (Some(mut pass), Some(rtt)) = (pass, release_rtt) {
            if self.yield_next.load(Ordering::Acquire) {
                pass.courtesy = Some(courtesy(rtt));
            }
        }
    }
}

/// A hold is its claim plus the client's bookkeeping: `hold.keys`, `hold.owner`, `hold.lease`
/// read the claim, as every caller did before the claim moved below the machinery layer.
impl std::ops::Deref for Hold {
    type Target = Claim;

    fn deref(&self) -> &Claim {
        &self.claim
    }
}

/// How much earlier than Redis the holder gives its lease up: 1 % of the lease plus 2 ms (the
/// margin Redlock uses), at most half the lease. It covers the client's clock running slower
/// than the server's and Redis's expiry granularity; a lease shorter than a few ms is therefore
/// valid for almost no time at all.
pub(crate) fn drift(lease: Duration) -> Duration {
    (lease / 100 + Duration::from_millis(2)).min(lease / 2)
}
