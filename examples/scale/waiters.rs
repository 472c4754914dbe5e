//! W tasks of one client waiting on K keys another client holds: connections, memory per
//! waiter, and how long a release takes to wake the next holder, as W and K grow.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pictures::Curves;
use crate::stats::{quantile, show};
use crate::store::{warm_up, Store};
use crate::{heap_bytes, Args};

/// Bound on each waiter's acquire, and on the whole point.
const WAIT: Duration = Duration::from_secs(120);

pub async fn sweep(store: &Store, args: &Args, round_trip: Duration, curves: &mut Curves) {
    println!("waiting tasks (one client waits, another holds and releases):");
    println!(
        "{:>7} {:>6} {:>12} {:>12} {:>13} {:>10} {:>10} {:>12} {:>10} {:>12}",
        "W",
        "K",
        "conns idle",
        "conns wait",
        "client B/wait",
        "wake p50",
        "wake p99",
        "first p50",
        "first/RTT",
        "handoffs/s"
    );
    let label = store.kind.label();
    let run = std::process::id();
    {
        // What a waiting task's own future weighs, part of the memory per waiter below.
        let client = store.builder().build().await.expect("connect");
        let lock = client.lock("scale:wait:probe");
        let acquire = lock.acquire();
        println!(
            "(an acquire future is {} bytes before it first runs)",
            std::mem::size_of_val(&acquire)
        );
        drop(acquire);
        client.shutdown().await;
    }
    for &k in &args.keys {
        for &w in &args.waiters {
            if k > w {
                continue;
            }
            let holder = store.builder().build().await.expect("connect the holder");
            let waiting = store.builder().build().await.expect("connect the waiters");
            let names: Vec<String> = (0..k)
                .map(|i| format!("scale:wait:{run}:{w}:{k}:{i}"))
                .collect();
            // Warm the waiters' client (connections, scripts) before its baseline.
            warm_up(&waiting, format!("scale:wait:{run}:{w}:{k}:warm")).await;
            let mut held = Vec::with_capacity(k);
            for name in &names {
                held.push(
                    holder
                        .lock(name.clone())
                        .acquire()
                        .await
                        .expect("holder acquire"),
                );
            }
            let conns_idle = store.connections().await;
            let heap_before = heap_bytes();
            let base = Instant::now();
            // Per key: when (ns after `base`) its last release started, and whether a waiter
            // has had it yet (the first one takes it from the other client).
            let released: Arc<Vec<AtomicU64>> =
                Arc::new((0..k).map(|_| AtomicU64::new(0)).collect());
            let taken: Arc<Vec<AtomicBool>> =
                Arc::new((0..k).map(|_| AtomicBool::new(false)).collect());
            let started = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..w)
                .map(|j| {
                    let lock = waiting.lock(names[j % k].clone()).wait(WAIT);
                    let released = released.clone();
                    let taken = taken.clone();
                    let started = started.clone();
                    tokio::spawn(async move {
                        started.fetch_add(1, Ordering::Relaxed);
                        let guard = lock.acquire().await.expect("waiter acquire");
                        let woke = base.elapsed();
                        let slot = &released[j % k];
                        let since =
                            woke.saturating_sub(Duration::from_nanos(slot.load(Ordering::Acquire)));
                        slot.store(base.elapsed().as_nanos() as u64, Ordering::Release);
                        let first = !taken[j % k].swap(true, Ordering::Relaxed);
                        guard.release().await.expect("waiter release");
                        (since, first)
                    })
                })
                .collect();
            // Every task has started its acquire; a short settle lets the last ones park (an
            // example's measurement, not a test's synchronisation: a late one only counts a
            // little less heap).
            let deadline = Instant::now() + WAIT;
            while started.load(Ordering::Relaxed) < w && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(200) + Duration::from_micros(20 * w as u64))
                .await;
            let heap = heap_bytes().saturating_sub(heap_before) as f64 / w as f64;
            let conns_waiting = store.connections().await;
            let releasing = Instant::now();
            for (i, guard) in held.into_iter().enumerate() {
                released[i].store(base.elapsed().as_nanos() as u64, Ordering::Release);
                guard.release().await.expect("holder release");
            }
            let mut wakes = Vec::with_capacity(w);
            let mut firsts = Vec::with_capacity(k);
            for task in tasks {
                let (since, first) = task.await.expect("waiting task");
                wakes.push(since);
                if first {
                    firsts.push(since);
                }
            }
            let took = releasing.elapsed();
            println!(
                "{:>7} {:>6} {:>12} {:>12} {:>13.0} {:>10} {:>10} {:>12} {:>10.2} {:>12.0}",
                w,
                k,
                conns_idle,
                conns_waiting,
                heap,
                show(quantile(&mut wakes, 0.5)),
                show(quantile(&mut wakes, 0.99)),
                show(quantile(&mut firsts, 0.5)),
                quantile(&mut firsts, 0.5).as_secs_f64() / round_trip.as_secs_f64(),
                w as f64 / took.as_secs_f64()
            );
            let x = w as f64;
            let series = format!("{label}, {k} key{}", if k == 1 { "" } else { "s" });
            curves.add(
                "waiters-wake-p50",
                &series,
                x,
                quantile(&mut wakes, 0.5).as_secs_f64() * 1e3,
            );
            curves.add(
                "waiters-wake-p99",
                &series,
                x,
                quantile(&mut wakes, 0.99).as_secs_f64() * 1e3,
            );
            curves.add("waiters-memory", &series, x, heap);
            curves.add("waiters-connections", &series, x, conns_waiting as f64);
            holder.shutdown().await;
            waiting.shutdown().await;
        }
    }
}
