//! The watchdog: one task per client renews every held lock at a third of its lease.
//!
//! All renewals that are due in a tick go out together: one script call per chunk of keys, the
//! calls sent concurrently on one multiplexed connection, so a tick costs one round trip however
//! many locks are held (not one timer per lock). A call is given up only when its connection
//! stops answering (see `Bound`), so a slow tick spaces renewals out instead of losing holds.
//! A hold is registered before its acquire is sent and removed synchronously at the start of
//! its release, so no renewal can outlive the release that ended it (Redisson #7272). A renewal
//! that finds the lock gone marks the hold lost. A successful one moves the hold's validity
//! deadline to its *send* time plus the lease minus the drift margin; the hold reads as lost
//! from that deadline on whatever the watchdog is doing (`Hold::is_lost`), and the task also
//! wakes at it to mark the hold lost and log it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::machinery::hold::Hold;
use crate::machinery::telemetry;
use crate::settings::ReplicaSync;
use crate::store::redis::backend::conn::{Conn, Pool};
use crate::store::redis::backend::names::cluster_slot;
use crate::store::redis::backend::node_conns::left_the_map;
use crate::store::redis::backend::script::Call;
use crate::store::redis::backend::slots::NodeAddr;
use crate::store::redis::backend::sync_conn::{Purpose, SyncConn};
use crate::store::redis::kinds::{Claim, LockKind};

/// Keys per renew script call: bounds how long one call keeps Redis busy.
const CHUNK: usize = 500;

/// Shortest pause between failed renewals of one hold, and the shortest bound on a call.
const MIN_RETRY: Duration = Duration::from_millis(20);

/// Shortest pause between two "renew every hold now" passes.
const RENEW_ALL_GAP: Duration = Duration::from_millis(100);

/// Bound on learning a cluster's slot map within a tick; without it the tick renews per slot.
const SLOT_MAP_BOUND: Duration = Duration::from_millis(500);

struct Entry {
    hold: Arc<Hold>,
    /// False until the acquire reply arrived: nothing to renew yet.
    active: bool,
    /// When the next renewal is due: a third of the lease after the last successful one was
    /// sent, or sooner after a failed one.
    due: Instant,
}

#[derive(Default)]
struct Shared {
    entries: Mutex<HashMap<u64, Entry>>,
    changed: Notify,
    /// When the task will wake next on its own (`None`: it is not sleeping). An acquire only
    /// wakes the task when its renewal falls due before that, which is rare: waking a task on
    /// every acquire would cost a cross-thread wake-up on the hot path.
    planned_wake: Mutex<Option<Instant>>,
    /// When `renew_all_now` last scheduled every hold.
    renewed_all: Mutex<Option<Instant>>,
    /// Counts those passes: a batch in flight while one was asked for may carry answers from
    /// before the change that asked (a primary replaced meanwhile), so its holds go again.
    renew_all_asked: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the task unless it plans to wake by `latest` anyway.
    fn wake_before(&self, latest: Instant) {
        let planned = *self.planned_wake.lock().unwrap_or_else(|e| e.into_inner());
        if planned.is_none_or(|wake| latest < wake) {
            self.changed.notify_one();
        }
    }
}

/// When an acquired hold's first renewal goes: at `due`, or, if going at `due` would mean
/// waking the watchdog's thread, whenever it wakes on its own, provided that is by `latest`.
/// Waking that thread costs the acquiring task a cross-thread wake-up (about 20 µs of a fair
/// handoff's p50 on a 2-core VM, measured), which a window lets it skip.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FirstRenewal {
    pub(crate) due: Instant,
    pub(crate) latest: Instant,
}

impl FirstRenewal {
    /// Exactly at `due`.
    pub(crate) fn at(due: Instant) -> Self {
        FirstRenewal { due, latest: due }
    }
}

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

impl Watchdog {
    /// Runs until the client is gone or `stop` is cancelled.
    pub(crate) fn start(
        renewer: Renewer,
        url: String,
        rt: &Handle,
        stop: CancellationToken,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let task = run(Arc::downgrade(&shared), renewer, url);
        rt.spawn(async move { stop.run_until_cancelled(task).await });
        Watchdog { shared }
    }

    /// Step one, before the acquire is sent: the hold exists but is not renewed yet.
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let due = Instant::now();
        self.shared.entries().insert(
            hold.id,
            Entry {
                hold,
                active: false,
                due,
            },
        );
    }

    /// Step two, when the acquire reply says we hold it: renewals start, the first one as
    /// `first` says (a third of the lease after the acquire was sent; for a short-lived grant
    /// a third of the grant's life, by half of it at the latest).
    pub(crate) fn activate(&self, id: u64, first: FirstRenewal) {
        match self.shared.entries().get_mut(&id) {
            Some(e) => {
                e.active = true;
                e.due = first.due;
            }
            None => return,
        };
        self.shared.wake_before(first.latest);
    }

    /// Removes a hold; after this returns no renewal of it will be sent. Returns when its next
    /// renewal was due, if it was being renewed.
    pub(crate) fn remove(&self, id: u64) -> Option<Instant> {
        let e = self.shared.entries().remove(&id)?;
        e.active.then_some(e.due)
    }

    /// Renews `hold` from now on, first at `due`: a hold handed over locally keeps the
    /// schedule of the hold it continues, so its renewals go on without a gap.
    pub(crate) fn adopt(&self, hold: Arc<Hold>, due: Instant) {
        let id = hold.id;
        self.shared.entries().insert(
            id,
            Entry {
                hold,
                active: true,
                due,
            },
        );
        self.shared.wake_before(due);
    }

    /// Every hold the watchdog keeps, taken out of it: none is renewed from now on (shutdown).
    pub(crate) fn take_all(&self) -> Vec<Arc<Hold>> {
        self.shared.entries().drain().map(|(_, e)| e.hold).collect()
    }

    /// Whether any acquired hold is being renewed.
    pub(crate) fn holds_any(&self) -> bool {
        self.shared.entries().values().any(|e| e.active)
    }

    /// Renews every hold now: called when a connection was lost or replaced (Redis restarted,
    /// failed over, or a link froze), so holds whose keys are gone learn it within a round trip
    /// instead of at their next scheduled renewal.
    /// False when a pass ran within the last `RENEW_ALL_GAP` and this call did nothing.
    pub(crate) fn renew_all_now(&self) -> bool {
        self.renew_all(false)
    }

    /// [`Watchdog::renew_all_now`] even if a pass ran within the gap: the client has just
    /// switched to a new primary, and a pass a moment ago asked the old one.
    pub(crate) fn renew_all_on_new_primary(&self) {
        self.renew_all(true);
    }

    fn renew_all(&self, even_within_gap: bool) -> bool {
        let now = Instant::now();
        {
            // At most one pass per RENEW_ALL_GAP: a burst of failing commands asks once.
            let mut last = self
                .shared
                .renewed_all
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !even_within_gap && last.is_some_and(|t| now < t + RENEW_ALL_GAP) {
                return false;
            }
            *last = Some(now);
        }
        self.shared
            .renew_all_asked
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut any = false;
        for e in self.shared.entries().values_mut().filter(|e| e.active) {
            e.due = now;
            any = true;
        }
        if any {
            self.shared.changed.notify_one();
        }
        true
    }
}

/// Where renewals go.
pub(crate) enum Renewer {
    /// Redis: its connections, and the one for replica-synced renewals.
    Redis {
        pool: Arc<Pool>,
        sync: Arc<SyncConn>,
    },
    /// PostgreSQL: one statement per kind and chunk renews every hold in it.
    #[cfg(feature = "postgres")]
    Postgres(Arc<crate::store::postgres::store::PgStore>),
    /// ZooKeeper: each hold's child checked in its session, all pipelined on the session.
    #[cfg(feature = "zookeeper")]
    Zookeeper(Arc<crate::store::zookeeper::store::ZkStore>),
}

async fn run(shared: Weak<Shared>, renewer: Renewer, url: String) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let now = Instant::now();
        let lost = expire(&s, now);
        // A lease that ends only with its session (ZooKeeper) is ended by the holder itself.
        #[cfg(feature = "zookeeper")]
        if let (Renewer::Zookeeper(store), false) = (&renewer, lost.is_empty()) {
            let keys = lost
                .iter()
                .filter_map(|(owner, kind)| crate::store::zookeeper::link::entry_key(owner, kind));
            store.abandon(keys.collect());
        }
        #[cfg(not(feature = "zookeeper"))]
        let _ = lost;
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
        // Every call carries its own bound (see `Bound`), at most half the shortest lease of its
        // holds; this outer bound only guards against a bug.
        let outer = batch.iter().map(|h| h.lease / 2).max().unwrap_or_default() + SLOT_MAP_BOUND;
        let asked = s.renew_all_asked.load(std::sync::atomic::Ordering::Acquire);
        let renewed = async {
            match &renewer {
                Renewer::Redis { pool, sync } => renew(&mut pool.background(), sync, &batch).await,
                #[cfg(feature = "postgres")]
                Renewer::Postgres(store) => {
                    renew_by_link(&batch, || {
                        crate::store::link::Link::Postgres(store.any_link())
                    })
                    .await
                }
                #[cfg(feature = "zookeeper")]
                Renewer::Zookeeper(store) => {
                    renew_by_link(&batch, || {
                        crate::store::link::Link::Zookeeper(
                            crate::store::zookeeper::link::ZkLink::new(store.clone()),
                        )
                    })
                    .await
                }
            }
        };
        let results = tokio::time::timeout(outer, renewed)
            .await
            .unwrap_or_else(|_| vec![None; batch.len()]);
        let gone = apply(&s, &batch, results, (now, asked), &url);
        telemetry::renew_tick(now.elapsed());
        if !gone.is_empty() {
            let limit = batch.iter().map(|h| h.lease / 3).min().unwrap_or_default();
            // On PostgreSQL a lost hold's row is gone or another owner's: nothing to announce
            // that its next release or expiry will not.
            #[allow(irrefutable_let_patterns)] // without the `postgres` feature
            if let Renewer::Redis { pool, .. } = &renewer {
                let mut conn = pool.background();
                let _ = tokio::time::timeout(limit, announce_gone(&mut conn, gone)).await;
            }
        }
    }
}

/// Marks lost every hold whose validity ran out before a renewal got through, with a warn
/// event. `Hold::is_lost` already says so from that instant on; this tells the logs and stops
/// renewing a lock somebody else may hold by now.
/// Returns the owner ids it marked lost, with their kinds.
fn expire(s: &Shared, now: Instant) -> Vec<(String, &'static str)> {
    let mut lost = Vec::new();
    s.entries().retain(|_, e| {
        if e.active && now >= e.hold.valid_until() {
            e.hold
                .mark_lost("the lease ran out before a renewal got through");
            lost.push((e.hold.owner.clone(), e.hold.kind.id()));
            return false;
        }
        true
    });
    lost
}

/// Holds due now, plus those due within a twelfth of their lease (they share this round trip
/// instead of costing their own), and the next instant anything else falls due or expires.
/// Nothing is sent before at least one hold is due, so a lone lock renews at a third of its
/// lease, as documented.
fn due_now(s: &Shared, now: Instant) -> (Vec<Arc<Hold>>, Option<Instant>) {
    let entries = s.entries();
    let active = || entries.values().filter(|e| e.active);
    let next_deadline = active().map(|e| e.hold.valid_until()).min();
    if !active().any(|e| e.due <= now) {
        let next_due = active().map(|e| e.due).min();
        let next = match (next_due, next_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        return (Vec::new(), next);
    }
    let batch = active()
        .filter(|e| e.due <= now + e.hold.lease / 12)
        .map(|e| e.hold.clone())
        .collect();
    (batch, None)
}
/// Renews `batch`: unsynced holds on the watchdog's connection, replica-synced ones on their
/// setting's own connection with WAIT (see `sync_conn.rs`), each group in as few calls as its
/// nodes allow.
async fn renew(conn: &mut Conn, sync: &SyncConn, batch: &[Arc<Hold>]) -> Vec<Option<bool>> {
    let mut groups: Vec<(Option<ReplicaSync>, Vec<usize>)> = Vec::new();
    for (i, hold) in batch.iter().enumerate() {
        match groups.iter_mut().find(|(s, _)| *s == hold.sync) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((hold.sync, vec![i])),
        }
    }
    let calls = groups.into_iter().map(|(setting, idx)| {
        let holds: Vec<Arc<Hold>> = idx.iter().map(|&i| batch[i].clone()).collect();
        let conn = conn.clone();
        async move {
            let conn = match setting {
                None => Ok(conn),
                Some(s) => sync.get(s, Purpose::Renew).await,
            };
            let out = match conn {
                Ok(mut conn) => renew_grouped(&mut conn, &holds, setting).await,
                Err(e) => {
                    tracing::warn!(error = %e, "dlock watchdog: no connection for synced renewals");
                    vec![None; holds.len()]
                }
            };
            (idx, out)
        }
    });
    let mut results = vec![None; batch.len()];
    for (idx, out) in futures_util::future::join_all(calls).await {
        for (i, r) in idx.into_iter().zip(out) {
            results[i] = r;
        }
    }
    results
}

/// Renews `batch` on a store that renews by request (PostgreSQL, ZooKeeper): one
/// `Link::renew` per kind and chunk, on a link from `link`, each bounded like a Redis renew
/// call (see [`Bound`]), judged by the progress of the connection it waits on.
#[cfg(any(feature = "postgres", feature = "zookeeper"))]
async fn renew_by_link(
    batch: &[Arc<Hold>],
    link: impl Fn() -> crate::store::link::Link,
) -> Vec<Option<bool>> {
    let mut lanes: HashMap<usize, Progress> = HashMap::new();
    // `chunks` keeps one kind per chunk.
    let calls = chunks(batch, (0..batch.len()).collect())
        .into_iter()
        .map(|idx| {
            let holds: Vec<Arc<Hold>> = idx.iter().map(|&i| batch[i].clone()).collect();
            let mut link = link();
            let progress = lanes.entry(link.lane()).or_default().clone();
            async move {
                telemetry::renew_call();
                let claims: Vec<&crate::store::redis::kinds::Claim> =
                    holds.iter().map(|h| &h.claim).collect();
                let call = link.renew(&*holds[0].kind, &claims);
                let sent_at = Instant::now();
                let out = match Bound::of(&holds).run(&progress, call).await {
                    Some(Ok(v)) => {
                        progress.answered();
                        v.into_iter().map(outcome).collect()
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, locks = holds.len(), "dlock watchdog renewal failed");
                        vec![None; holds.len()]
                    }
                    None => vec![None; holds.len()],
                };
                confirm_renewed(&holds, &out, sent_at);
                (idx, out)
            }
        })
        .collect::<Vec<_>>();
    let mut results = vec![None; batch.len()];
    for (idx, out) in futures_util::future::join_all(calls).await {
        for (i, r) in idx.into_iter().zip(out) {
            results[i] = r;
        }
    }
    results
}

/// Renews holds of one replica-sync setting: one call per node (per slot where a node call
/// fails), chunked.
async fn renew_grouped(
    conn: &mut Conn,
    batch: &[Arc<Hold>],
    sync: Option<ReplicaSync>,
) -> Vec<Option<bool>> {
    let keys: Vec<&str> = batch.iter().map(|h| h.keys.key.as_str()).collect();
    let groups = match tokio::time::timeout(SLOT_MAP_BOUND, conn.node_groups(&keys)).await {
        Ok(groups) => groups,
        // The node asked for the slot map does not answer: renew per slot this tick.
        Err(_) => {
            conn.slots_changed();
            crate::store::redis::backend::slots::by_slot(&keys)
        }
    };
    let conn = &*conn;
    // Groups without a node (one server, or a cluster's slots while its map is unknown) share
    // the client's connection.
    let nodeless = Progress::default();
    let calls = groups.into_iter().flat_map(|(node, idx)| {
        // The calls to one node queue on one connection: each is judged by that node's answers.
        let progress = match node {
            Some(_) => Progress::default(),
            None => nodeless.clone(),
        };
        chunks(batch, idx).into_iter().map(move |idx| {
            let (mut conn, node, progress) = (conn.clone(), node.clone(), progress.clone());
            let holds: Vec<Arc<Hold>> = idx.iter().map(|&i| batch[i].clone()).collect();
            async move {
                (
                    idx,
                    renew_call(&mut conn, &holds, node, sync, &progress).await,
                )
            }
        })
    });
    let mut results = vec![None; batch.len()];
    for (idx, out) in futures_util::future::join_all(calls).await {
        for (i, r) in idx.into_iter().zip(out) {
            results[i] = r;
        }
    }
    results
}

/// One renew call for holds of one kind: to their node in one call (a cluster), or the usual
/// way (one server, or one slot). A node call that fails (slots moved, a server before Redis
/// 7 without cross-slot scripts) is retried one call per slot.
async fn renew_call(
    conn: &mut Conn,
    holds: &[Arc<Hold>],
    node: Option<NodeAddr>,
    sync: Option<ReplicaSync>,
    progress: &Progress,
) -> Vec<Option<bool>> {
    let sent_at = Instant::now();
    let call = renew_call_unbounded(conn, holds, node, sync, progress);
    let out = Bound::of(holds)
        .run(progress, call)
        .await
        .unwrap_or_else(|| vec![None; holds.len()]);
    confirm_renewed(holds, &out, sent_at);
    out
}

/// Extends the validity of the holds one call renewed as soon as its answer is in, from when
/// the call was sent: the tick's other calls may still be on their way, and a hold close to
/// its deadline cannot wait for them (it would read lost meanwhile, and a lost hold stays
/// lost). This is the only place a renewal extends validity; `apply` records the rest of the
/// outcome once the whole tick is in.
fn confirm_renewed(holds: &[Arc<Hold>], out: &[Option<bool>], sent_at: Instant) {
    for (hold, renewed) in holds.iter().zip(out) {
        if *renewed == Some(true) {
            hold.confirm(sent_at);
        }
    }
}

/// When the connection a tick's renew calls queue on last answered one of them (the tick's
/// start until then).
#[derive(Clone)]
struct Progress(Arc<Mutex<Instant>>);

impl Default for Progress {
    fn default() -> Self {
        Progress(Arc::new(Mutex::new(Instant::now())))
    }
}

impl Progress {
    fn last(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn answered(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// How long one renew call may wait: while its connection keeps answering the calls sent with
/// it, up to the last validity deadline of its holds (an answer after a hold's own deadline
/// cannot extend that hold any more, `Hold::confirm`, but still extends the others) and at most
/// half the shortest lease; once the connection has answered nothing for a third of the
/// shortest lease, the call is given up and its holds retried soon, perhaps on a new connection
/// (a frozen link). Only a reply counts as an answer, not a call that gave up or failed.
///
/// The half-lease cap keeps the watchdog's loop, which waits for a whole tick, from holding up
/// the renewals of other holds (a healthy node's, a shorter lease's) for longer than that: a
/// tick slower than half the lease cannot keep its holds anyway, since each is renewed again
/// only a tick later. Each request also keeps the client's `response_timeout`.
///
/// A tick's calls are sent together and answered in turn, so a call's own wait includes every
/// call queued before it. Bounding each call from the tick's start cut off the last calls of a
/// big tick while their answers were still on the way (100,000 holds on a 3 s lease, on a busy
/// machine, lost 46,074 of them: the cut calls were sent again, which made the next tick
/// bigger still); judged by the connection's progress, a slow tick only spaces renewals out.
struct Bound {
    stall: Duration,
    deadline: Instant,
}

impl Bound {
    fn of(holds: &[Arc<Hold>]) -> Self {
        let now = Instant::now();
        let lease = holds.iter().map(|h| h.lease).min().unwrap_or_default();
        let deadline = holds.iter().map(|h| h.valid_until()).max().unwrap_or(now);
        Bound {
            stall: (lease / 3).max(MIN_RETRY),
            deadline: deadline.min(now + lease / 2).max(now + MIN_RETRY),
        }
    }

    /// `call`'s output, or `None` once the bound is reached. The replies inside `call` mark
    /// `progress` themselves ([`renew_reply`], [`renew_by_link`]).
    async fn run<T>(
        &self,
        progress: &Progress,
        call: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        tokio::pin!(call);
        loop {
            let limit = (progress.last() + self.stall).min(self.deadline);
            if let Ok(out) = tokio::time::timeout_at(limit, call.as_mut()).await {
                return Some(out);
            }
            // Another call on the connection was answered meanwhile: the connection is alive.
            let now = Instant::now();
            if now >= self.deadline || now >= progress.last() + self.stall {
                return None;
            }
        }
    }
}

async fn renew_call_unbounded(
    conn: &mut Conn,
    holds: &[Arc<Hold>],
    node: Option<NodeAddr>,
    sync: Option<ReplicaSync>,
    progress: &Progress,
) -> Vec<Option<bool>> {
    let kind = &holds[0].kind;
    let reply = match &node {
        // Kinds without a per-node script go one call per slot.
        Some(_) if !kind.renews_per_node() => {
            return Box::pin(renew_per_slot(conn, holds, sync, progress)).await;
        }
        Some(node) => {
            let call = kind.renew(&claims(holds), true);
            match renew_reply(&call, conn, Some(node), sync, progress).await {
                Ok(v) => Ok(v),
                // The node did not answer (frozen, dead, unreachable) or has left the slot map
                // since (its replica promoted): per slot would go where redis-rs's map says,
                // which it reads again only on a redirect or a broken link, so maybe to that
                // node again. Unknown for now: the next pass groups them by the map the
                // failover watch reads.
                Err(e) if left_the_map(&e) || e.code().is_none() => {
                    tracing::debug!(error = %e, %node, "dlock watchdog: per-node renewal got no answer");
                    return vec![None; holds.len()];
                }
                Err(e) => {
                    tracing::debug!(error = %e, %node, "dlock watchdog: per-node renewal failed; renewing per slot");
                    conn.slots_changed();
                    return Box::pin(renew_per_slot(conn, holds, sync, progress)).await;
                }
            }
        }
        None => {
            renew_reply(
                &kind.renew(&claims(holds), false),
                conn,
                None,
                sync,
                progress,
            )
            .await
        }
    };
    match reply {
        Ok(v) => v.into_iter().map(outcome).collect(),
        Err(e) => {
            tracing::warn!(error = %e, locks = holds.len(), "dlock watchdog renewal failed");
            vec![None; holds.len()]
        }
    }
}

/// What a renew script said of one hold, for [`apply`]: renewed, gone, or (synced, not
/// confirmed) not known to be renewed.
fn outcome(x: i64) -> Option<bool> {
    match x {
        1 => Some(true),
        UNCONFIRMED => None,
        _ => Some(false),
    }
}

/// Stands for "renewed on the primary, but too few replicas confirmed it".
const UNCONFIRMED: i64 = i64::MIN;

/// One renew call's reply (1 renewed, 0 gone, per key); for a synced call, WAIT follows in
/// the same round trip, and renewals it did not confirm read [`UNCONFIRMED`]: they do not
/// extend the hold's validity, so its replicas' silence ends it when its lease runs out.
async fn renew_reply(
    call: &Call<'_>,
    conn: &mut Conn,
    node: Option<&NodeAddr>,
    sync: Option<ReplicaSync>,
    progress: &Progress,
) -> redis::RedisResult<Vec<i64>> {
    let reply = renew_reply_unmarked(call, conn, node, sync).await;
    if reply.is_ok() {
        progress.answered();
    }
    reply
}

/// [`renew_reply`] without marking the connection's progress.
async fn renew_reply_unmarked(
    call: &Call<'_>,
    conn: &mut Conn,
    node: Option<&NodeAddr>,
    sync: Option<ReplicaSync>,
) -> redis::RedisResult<Vec<i64>> {
    telemetry::renew_call();
    let Some(want) = sync else {
        return match node {
            Some(node) => call.invoke_on(conn, node).await,
            None => call.invoke_async(conn).await,
        };
    };
    // Routed by the call's first key: a node call's first key is on that node.
    let (renewed, acked) = call
        .invoke_then_wait::<Vec<i64>>(conn, want.replicas, want.within)
        .await?;
    match acked {
        Ok(n) if n >= want.replicas => return Ok(renewed),
        Ok(n) => tracing::warn!(
            acked = n,
            wanted = want.replicas,
            "dlock watchdog: renewals not confirmed by enough replicas in time"
        ),
        Err(e) => tracing::warn!(error = %e, "dlock watchdog: WAIT after a renewal failed"),
    }
    Ok(renewed
        .into_iter()
        .map(|x| if x == 1 { UNCONFIRMED } else { x })
        .collect())
}

/// What the renew scripts read of each hold.
fn claims(holds: &[Arc<Hold>]) -> Vec<&Claim> {
    holds.iter().map(|h| &h.claim).collect()
}

/// One call per slot, sent together, each bounded on its own.
async fn renew_per_slot(
    conn: &mut Conn,
    holds: &[Arc<Hold>],
    sync: Option<ReplicaSync>,
    progress: &Progress,
) -> Vec<Option<bool>> {
    let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
    for (i, h) in holds.iter().enumerate() {
        by_slot
            .entry(cluster_slot(&h.keys.key))
            .or_default()
            .push(i);
    }
    let conn = &*conn;
    let calls = by_slot.into_values().map(|idx| {
        let mut conn = conn.clone();
        let group: Vec<Arc<Hold>> = idx.iter().map(|&i| holds[i].clone()).collect();
        async move {
            let call = kind_of(&group).renew(&claims(&group), false);
            let reply = Bound::of(&group)
                .run(
                    progress,
                    renew_reply(&call, &mut conn, None, sync, progress),
                )
                .await;
            (idx, reply)
        }
    });
    let mut out = vec![None; holds.len()];
    for (idx, reply) in futures_util::future::join_all(calls).await {
        if let Some(Ok(v)) = reply {
            for (i, x) in idx.into_iter().zip(v) {
                out[i] = outcome(x);
            }
        }
    }
    out
}

fn kind_of(holds: &[Arc<Hold>]) -> &dyn LockKind {
    &*holds[0].kind
}

/// One node's share of the batch cut into renew calls: runs of one kind, at most [`CHUNK`]
/// keys each (indices into the batch), in the order their validity runs out. The calls are
/// answered in the order they are sent, so the holds closest to their deadline go first, and
/// go together rather than beside holds with time to spare.
///
/// Deadlines are compared in steps of a sixth of the lease counted from the earliest deadline
/// of the share, and holds within a step in slot order, so keys of one slot stay in one call
/// where a server renews per slot (Redis 6.2). Holds acquired together (the usual tick) fall in
/// the first step, with no step boundary to split their slots (steps counted from the clock
/// split 3,000 holds acquired within 289 ms: 1,006 calls for 1,002 keys in one tick of
/// tests/cluster/watchdog.rs, over its bound of 1,005). A hold sent after others of its step
/// gives up at most a sixth of a lease of order, and a renewal is due a third into it.
fn chunks(batch: &[Arc<Hold>], mut idx: Vec<usize>) -> Vec<Vec<usize>> {
    let first = idx.iter().map(|&i| batch[i].valid_until()).min();
    let first = first.unwrap_or_else(Instant::now);
    idx.sort_by_cached_key(|&i| {
        let h = &batch[i];
        let step = (h.lease / 6).as_millis().max(1);
        let after = h.valid_until().saturating_duration_since(first).as_millis() / step;
        (h.kind.id(), after, cluster_slot(&h.keys.key))
    });
    let mut calls: Vec<Vec<usize>> = idx
        .chunk_by(|&a, &b| batch[a].kind.id() == batch[b].kind.id())
        .flat_map(|run| run.chunks(CHUNK).map(<[usize]>::to_vec))
        .collect();
    calls.sort_by_cached_key(|call| call.iter().map(|&i| batch[i].valid_until()).min());
    calls
}

/// Records the renewals' outcomes; returns the channels of holds found gone.
fn apply(
    s: &Shared,
    batch: &[Arc<Hold>],
    results: Vec<Option<bool>>,
    (sent_at, asked): (Instant, u64),
    url: &str,
) -> Vec<String> {
    let mut gone = Vec::new();
    let mut entries = s.entries();
    let now = Instant::now();
    let again = s.renew_all_asked.load(std::sync::atomic::Ordering::Acquire) != asked;
    for (hold, result) in batch.iter().zip(results) {
        // Released while the renewal was in flight: the release decided, not us.
        let Some(e) = entries.get_mut(&hold.id) else {
            continue;
        };
        match result {
            Some(true) => {
                // Its validity was extended when its call's answer arrived
                // (`confirm_renewed`, from that call's own send time, never before `sent_at`);
                // only the next renewal is left to plan.
                e.due = if again { now } else { sent_at + hold.lease / 3 };
            }
            Some(false) => {
                hold.mark_lost("watchdog found the lock gone or owned by someone else");
                entries.remove(&hold.id);
                gone.push(hold.keys.channel.clone());
            }
            None if now >= hold.valid_until() => {
                hold.mark_lost(&format!(
                    "redis at {url} unreachable until the lease ran out"
                ));
                entries.remove(&hold.id);
            }
            None => {
                // Try again soon: every failed round trip brings the validity deadline closer.
                e.due = if again {
                    now
                } else {
                    now + (hold.lease / 30).clamp(MIN_RETRY, Duration::from_millis(500))
                };
            }
        }
    }
    gone
}

/// Wakes the waiters of locks whose holds vanished without a release (Redis lost them in a
/// restart or a failover): nobody published a release, so other processes' waiters would
/// sleep until the PTTL they read before the loss. A waiter woken while someone else took the
/// lock meanwhile just finds it held and waits again.
async fn announce_gone(conn: &mut Conn, channels: Vec<String>) {
    for channel in channels {
        let sent: redis::RedisResult<i64> = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("released")
            .query_async(conn)
            .await;
        if let Err(e) = sent {
            tracing::debug!(%channel, error = %e, "dlock watchdog: could not wake the waiters of a lost lock");
        }
    }
}
