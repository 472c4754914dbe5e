//! The per-call figures of one row: acquires of fresh keys, their releases, whole cycles, and
//! re-entries of held keys with their releases, each stretch alone between two readings of the servers.
//! `tasks` tasks run at once, each one call after another, so that many calls are in flight and
//! the server, not the round trip, sets the pace.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;

use crate::stats::{Reading, Servers};
use crate::subjects::Subject;

/// The figures of one row.
pub struct Costs {
    /// Operations per stretch (a multi-lock's acquire is one operation of several calls).
    pub ops: u64,
    pub acquire: Reading,
    pub release: Reading,
    pub cycle: Reading,
    /// None for a row that does not re-enter.
    pub reentry: Option<(Reading, Reading)>,
}

/// No stretch takes anywhere near this; a task that failed shows up here instead of hanging
/// the run.
const STRETCH_BOUND: Duration = Duration::from_secs(300);

/// Waits at `barrier` beside the tasks, failing when they do not all arrive in time.
async fn meet(barrier: &Barrier) {
    tokio::time::timeout(STRETCH_BOUND, barrier.wait())
        .await
        .expect("a task of this row failed (see its panic above) or hung");
}

/// A task's side of a reading: everyone has arrived, then the servers were read and reset.
async fn pause(barrier: &Barrier) {
    barrier.wait().await;
    barrier.wait().await;
}

/// This task's share of `calls` over `tasks`.
fn share(calls: usize, tasks: usize, t: usize) -> usize {
    calls / tasks + usize::from(t < calls % tasks)
}

/// Runs `task(t, its share)` in `tasks` spawned tasks.
fn spawn_tasks<F, Fut>(tasks: usize, calls: usize, task: F) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(usize, usize) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    (0..tasks)
        .map(|t| tokio::spawn(task(t, share(calls, tasks, t))))
        .collect()
}

async fn join(handles: Vec<tokio::task::JoinHandle<()>>) {
    for h in handles {
        tokio::time::timeout(STRETCH_BOUND, h)
            .await
            .expect("a task hung")
            .expect("a task of this row panicked");
    }
}

pub async fn measure(
    subject: Arc<Subject>,
    servers: &mut Servers,
    calls: usize,
    tasks: usize,
    tag: &str,
) -> Costs {
    let sent = subject.sent();

    // Acquires of fresh keys, all held until every task is done; then their releases.
    let barrier = Arc::new(Barrier::new(tasks + 1));
    servers.reset().await;
    let handles = spawn_tasks(tasks, calls, |t, n| {
        let (s, b, tag) = (subject.clone(), barrier.clone(), tag.to_owned());
        async move {
            let mut held = Vec::with_capacity(n);
            for i in 0..n {
                held.push(s.acquire(&format!("sc:{tag}:hold:{t}:{i}")).await);
            }
            pause(&b).await;
            for h in held {
                s.release(h).await;
            }
        }
    });
    meet(&barrier).await;
    let acquire = servers.read(sent).await;
    servers.reset().await;
    meet(&barrier).await;
    join(handles).await;
    let release = servers.read(sent).await;

    // Whole cycles, acquire then release, on fresh keys.
    servers.reset().await;
    let handles = spawn_tasks(tasks, calls, |t, n| {
        let (s, tag) = (subject.clone(), tag.to_owned());
        async move {
            for i in 0..n {
                let h = s.acquire(&format!("sc:{tag}:cycle:{t}:{i}")).await;
                s.release(h).await;
            }
        }
    });
    join(handles).await;
    let cycle = servers.read(sent).await;

    let reentry = if subject.reentrant() {
        Some(measure_reentry(&subject, servers, calls, tasks, tag).await)
    } else {
        None
    };
    Costs {
        ops: calls as u64,
        acquire,
        release,
        cycle,
        reentry,
    }
}

/// Each task takes its share of fresh keys, then re-enters each once (count 1 -> 2, all kept),
/// then gives those holds back (2 -> 1); the first acquires and the last releases are outside
/// both stretches. One re-entry per key: a deep stack of them on one key measures something
/// else (Redisson's read side walks every hold of the key on each release).
async fn measure_reentry(
    subject: &Arc<Subject>,
    servers: &mut Servers,
    calls: usize,
    tasks: usize,
    tag: &str,
) -> (Reading, Reading) {
    let sent = subject.sent();
    let barrier = Arc::new(Barrier::new(tasks + 1));
    let handles = spawn_tasks(tasks, calls, |t, n| {
        let (s, b, tag) = (subject.clone(), barrier.clone(), tag.to_owned());
        async move {
            let mut outer = Vec::with_capacity(n);
            for i in 0..n {
                outer.push(s.acquire(&format!("sc:{tag}:reenter:{t}:{i}")).await);
            }
            pause(&b).await;
            let mut inner = Vec::with_capacity(n);
            for o in &outer {
                inner.push(s.reenter(o).await);
            }
            pause(&b).await;
            for h in inner {
                s.release(h).await;
            }
            pause(&b).await;
            for o in outer {
                s.release(o).await;
            }
        }
    });
    meet(&barrier).await;
    servers.reset().await;
    meet(&barrier).await;
    meet(&barrier).await;
    let acquire = servers.read(sent).await;
    servers.reset().await;
    meet(&barrier).await;
    meet(&barrier).await;
    let release = servers.read(sent).await;
    meet(&barrier).await;
    join(handles).await;
    (acquire, release)
}
