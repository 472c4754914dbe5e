//! N locks held at once by one client: what each hold costs the client and the server, and what
//! keeping them alive costs as N grows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::LockGuard;
use metrics_util::debugging::Snapshotter;

use crate::pictures::Curves;
use crate::stats::{quantile, renew_ticks, show};
use crate::store::{warm_up, Store};
use crate::{heap_bytes, Args, StoreKind};

/// Acquires and releases in flight at once.
const IN_FLIGHT: usize = 64;

pub async fn sweep(store: &Store, args: &Args, snapshots: &Snapshotter, curves: &mut Curves) {
    let (lease, watch) = if store.kind == StoreKind::Postgres {
        (args.lease_postgres, args.watch_postgres)
    } else {
        (args.lease, args.watch)
    };
    println!("held locks (lease {lease:?}, renewals watched for {watch:?}):");
    println!(
        "{:>8} {:>12} {:>12} {:>14} {:>10} {:>10} {:>8} {:>10} {:>10}",
        "N",
        "client B/hold",
        "server B/hold",
        "renew ms/s",
        "per hold",
        "ticks/s",
        "tick p50",
        "tick p99",
        "acquire/s"
    );
    let label = store.kind.label();
    for &n in &args.held {
        let client = store
            .builder()
            .default_ttl(lease)
            .build()
            .await
            .expect("connect");
        // A first lock so that connections, scripts and the schema are in place before the
        // baseline.
        warm_up(&client, format!("scale:held:warm:{n}")).await;
        renew_ticks(snapshots);
        let (heap_before, server_before) = (heap_bytes(), store.memory().await);
        let started = Instant::now();
        let guards = acquire_all(&client, n).await;
        let acquire_rate = n as f64 / started.elapsed().as_secs_f64();
        renew_ticks(snapshots);
        let heap = heap_bytes().saturating_sub(heap_before) as f64 / n as f64;
        let server = store.memory().await.saturating_sub(server_before) as f64 / n as f64;
        // Renewals: the server time spent across a stretch where only they run.
        let renew_before = store.renew_time().await;
        let watch_started = Instant::now();
        tokio::time::sleep(watch).await;
        let renew = store.renew_time().await.saturating_sub(renew_before);
        let watched = watch_started.elapsed();
        let mut ticks = renew_ticks(snapshots);
        let lost = guards.iter().filter(|g| g.is_lost()).count();
        let renew_ms_per_s = renew.as_secs_f64() * 1e3 / watched.as_secs_f64();
        // Each hold is renewed every lease / 3: µs of server time per renewal.
        let renewals = n as f64 * watched.as_secs_f64() / (lease.as_secs_f64() / 3.0);
        let per_renewal_us = renew.as_secs_f64() * 1e6 / renewals;
        println!(
            "{:>8} {:>12.0} {:>12.0} {:>14.2} {:>8.2}µs {:>10.1} {:>8} {:>10} {:>10.0}{}",
            n,
            heap,
            server,
            renew_ms_per_s,
            per_renewal_us,
            ticks.len() as f64 / watched.as_secs_f64(),
            show(quantile(&mut ticks, 0.5)),
            show(quantile(&mut ticks, 0.99)),
            acquire_rate,
            if lost > 0 {
                format!("  ({lost} holds LOST while watched)")
            } else {
                String::new()
            }
        );
        let x = n as f64;
        curves.add("held-memory", &format!("{label}, client"), x, heap);
        curves.add("held-memory", &format!("{label}, server"), x, server);
        // Per renewal, so that stores renewing at different leases compare.
        curves.add("held-renewals", label, x, per_renewal_us);
        curves.add(
            "held-tick",
            &format!("{label}, p50"),
            x,
            quantile(&mut ticks, 0.5).as_secs_f64() * 1e3,
        );
        curves.add(
            "held-tick",
            &format!("{label}, p99"),
            x,
            quantile(&mut ticks, 0.99).as_secs_f64() * 1e3,
        );
        release_all(guards).await;
        client.shutdown().await;
    }
}

/// Takes `n` fresh locks, `IN_FLIGHT` at a time, and keeps them.
async fn acquire_all(client: &dlock::LockClient, n: usize) -> Vec<LockGuard> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let run = std::process::id();
    let tasks: Vec<_> = (0..IN_FLIGHT.min(n))
        .map(|_| {
            let client = client.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return mine;
                    }
                    let guard = client
                        .lock(format!("scale:held:{run}:{n}:{i}"))
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .unwrap_or_else(|e| panic!("acquire {i} of {n}: {e}"));
                    mine.push(guard);
                }
            })
        })
        .collect();
    let mut guards = Vec::with_capacity(n);
    for task in tasks {
        guards.extend(task.await.expect("acquiring task"));
    }
    guards
}

/// Releases every guard, `IN_FLIGHT` at a time.
async fn release_all(guards: Vec<LockGuard>) {
    let queue = Arc::new(std::sync::Mutex::new(guards));
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                loop {
                    let next = queue.lock().expect("queue").pop();
                    let Some(guard) = next else { return };
                    let name = guard.name().to_owned();
                    if let Err(e) = guard.release().await {
                        eprintln!("release {name}: {e}");
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("releasing task");
    }
}
