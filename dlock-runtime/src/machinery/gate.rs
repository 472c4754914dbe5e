//! The local gate: one FIFO queue per lock key inside a client.
//!
//! Tasks of one process that want the same key queue here first, so only the head of the queue
//! talks to Redis. This is what makes "one release wakes one local waiter" hold (the others are
//! not waiting on Redis at all), keeps Redis load and subscriptions proportional to keys rather
//! than tasks, and stops a releasing task from barging ahead of local tasks that waited longer.
//! Other processes still compete through Redis and pub/sub.
//!
//! A turn is passed to the next waiter as a [`Turn`]: either "your go at Redis", or, when the
//! holder hands its lock over without releasing it in Redis (see `release.rs`), the hold itself.
//! The gate sits below the hold it carries (a hold keeps its gate pass), so it carries the
//! handed-over hold as an opaque box; `release.rs` makes and opens it.
//! Whatever a cancelled waiter was sent is dropped with its channel, and dropping a turn passes
//! it on, so no turn and no hold is ever stranded in a queue.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// A hold on its way to the next local task (a `handoff::Baton`). Dropping it unopened must
/// release it: the baton's own `Drop` does.
pub(crate) type Handed = Box<dyn Any + Send>;

type Map = Arc<Mutex<HashMap<String, Arc<Mutex<Queue>>>>>;

#[derive(Default)]
pub(crate) struct Gates {
    map: Map,
}

/// One key's queue: whether somebody has the turn, and who waits for it, oldest first.
#[derive(Default)]
struct Queue {
    busy: bool,
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    /// The lease this waiter would take a handed-over hold with; `None`: it cannot take one
    /// (a kind without local handoff, a hard lease), so it only ever gets a turn at Redis.
    takes_hold: Option<Duration>,
    tx: oneshot::Sender<Turn>,
}

/// What a waiter is given when its turn comes.
pub(crate) enum Turn {
    /// Its go at Redis: the lock is free or held by another process.
    Contend(GatePass),
    /// The previous local holder's hold, handed over without a release (carries the pass).
    Hold(Handed),
}

/// Holding this means: this caller is the one contender of this client for the key.
pub(crate) struct GatePass {
    map: Map,
    key: String,
    queue: Arc<Mutex<Queue>>,
    /// How long the next contender should let other processes go first: set when this pass
    /// leaves after a release that ended a run of local handoffs (see `release.rs`).
    pub(crate) courtesy: Option<Duration>,
    /// False once the turn moved on by other means (a pass returned from a failed send).
    armed: bool,
}

impl Gates {
    /// Waits for this caller's turn at `key`. `takes_hold`: the lease with which this caller
    /// can take over a hold from the previous local holder, if it can. Cancel-safe: dropping
    /// the future leaves the queue, and anything already sent to it is passed on.
    pub(crate) async fn enter(&self, key: &str, takes_hold: Option<Duration>) -> Turn {
        loop {
            let queue = {
                let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
                map.entry(key.to_owned()).or_default().clone()
            };
            let rx = {
                let mut q = lock(&queue);
                if !q.busy {
                    q.busy = true;
                    drop(q);
                    return Turn::Contend(GatePass::new(&self.map, key, queue));
                }
                let (tx, rx) = oneshot::channel();
                q.waiting.push_back(Waiter { takes_hold, tx });
                rx
            };
            // A sender is only dropped unsent once its receiver is gone, so this resolves with
            // a turn; should the queue ever vanish under it, queueing again is still right.
            if let Ok(turn) = rx.await {
                return turn;
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

impl GatePass {
    fn new(map: &Map, key: &str, queue: Arc<Mutex<Queue>>) -> Self {
        GatePass {
            map: map.clone(),
            key: key.to_owned(),
            queue,
            courtesy: None,
            armed: true,
        }
    }

    /// Forgets this pass without passing the turn on: it moved on by other means.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    fn successor(&self) -> GatePass {
        GatePass::new(&self.map, &self.key, self.queue.clone())
    }

    /// Whether a task of this client still waits behind this pass.
    pub(crate) fn has_waiter(&self) -> bool {
        let mut q = lock(&self.queue);
        while q.waiting.front().is_some_and(|w| w.tx.is_closed()) {
            q.waiting.pop_front();
        }
        !q.waiting.is_empty()
    }

    /// Whether the next waiter (still waiting) can take over a hold whose lease is `lease`.
    /// Only an equal lease will do: the hold keeps its owner entry in Redis and its validity
    /// deadline, and the watchdog renews that entry with the receiver's lease, so a shorter
    /// one would shorten the key in Redis below the deadline the receiver believes. Waiters
    /// that gave up are dropped from the queue on the way.
    pub(crate) fn next_takes(&self, lease: Duration) -> bool {
        let mut q = lock(&self.queue);
        while q.waiting.front().is_some_and(|w| w.tx.is_closed()) {
            q.waiting.pop_front();
        }
        q.waiting
            .front()
            .is_some_and(|w| w.takes_hold == Some(lease))
    }

    /// Gives the next waiter the hold `make` builds, if it can take one of `lease` (see
    /// [`GatePass::next_takes`]); one that left the queue just as it was sent gets nothing, and
    /// `retract` takes its hold back. `Err` with the pass when the next waiter cannot take it
    /// (or none waits): the caller releases in Redis and then drops the pass as usual. `make`
    /// runs under the queue's lock, so it must not enter a gate.
    pub(crate) fn hand_over(
        mut self,
        lease: Duration,
        make: impl Fn(GatePass) -> Handed,
        retract: impl Fn(Handed),
    ) -> Result<(), GatePass> {
        let mut q = lock(&self.queue);
        loop {
            if q.waiting.front().map(|w| w.takes_hold) != Some(Some(lease)) {
                drop(q);
                return Err(self);
            }
            let waiter = q.waiting.pop_front().expect("front checked");
            let baton = make(self.successor());
            match waiter.tx.send(Turn::Hold(baton)) {
                Ok(()) => {
                    self.armed = false;
                    return Ok(());
                }
                // That waiter gave up just now: take the hold back, try the next one.
                Err(Turn::Hold(baton)) => retract(baton),
                Err(Turn::Contend(mut pass)) => pass.armed = false,
            }
        }
    }
}

/// How long the next local contender waits before asking Redis, after a release that ended a
/// run of handoffs took `release_rtt`: long enough for a waiter of another process (woken by
/// the release's message) to get its acquire in first, which takes about one round trip plus
/// a wake-up; short enough that it costs once per run, not per op. Tokio's timer rounds it up
/// to its 1 ms tick, which is why it is skipped when nobody else was listening.
pub(crate) fn courtesy(release_rtt: Duration) -> Duration {
    (release_rtt * 2).clamp(Duration::from_micros(200), Duration::from_millis(20))
}

impl Drop for GatePass {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Hand the turn to the oldest waiter still waiting.
        let mut q = lock(&self.queue);
        let mut courtesy = self.courtesy;
        while let Some(waiter) = q.waiting.pop_front() {
            let mut pass = self.successor();
            pass.courtesy = courtesy.take();
            match waiter.tx.send(Turn::Contend(pass)) {
                Ok(()) => return,
                Err(Turn::Contend(mut pass)) => {
                    courtesy = pass.courtesy;
                    pass.armed = false;
                }
                Err(Turn::Hold(_)) => unreachable!("a turn at Redis came back as a hold"),
            }
        }
        q.busy = false;
        drop(q);
        // Forget the queue if nobody else uses it. Entries are cloned only under the map lock,
        // so the count check cannot race; 2 = the map's entry + ours.
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&self.queue) == 2 && !lock(&self.queue).busy {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_are_removed_when_the_last_user_leaves() {
        let gates = Arc::new(Gates::default());
        let Turn::Contend(a) = gates.enter("k", None).await else {
            panic!("a hold from an empty gate")
        };
        let waiting = {
            let g = gates.clone();
            tokio::spawn(async move { g.enter("k", None).await })
        };
        tokio::task::yield_now().await;
        while lock(&a.queue).waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        drop(a);
        let Turn::Contend(b) = waiting.await.unwrap() else {
            panic!("a hold nobody handed over")
        };
        assert_eq!(gates.len(), 1);
        drop(b);
        assert_eq!(gates.len(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_is_skipped() {
        let gates = Arc::new(Gates::default());
        let Turn::Contend(a) = gates.enter("k", None).await else {
            panic!("a hold from an empty gate")
        };
        let cancelled = {
            let g = gates.clone();
            tokio::spawn(async move { g.enter("k", None).await })
        };
        while lock(&a.queue).waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        let next = {
            let g = gates.clone();
            tokio::spawn(async move { g.enter("k", None).await })
        };
        while lock(&a.queue).waiting.len() < 2 {
            tokio::task::yield_now().await;
        }
        cancelled.abort();
        let _ = cancelled.await;
        drop(a);
        assert!(matches!(next.await.unwrap(), Turn::Contend(_)));
    }
}
