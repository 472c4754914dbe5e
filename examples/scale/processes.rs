//! P processes contending on one key, or on a few, with the plain lock or the fair one:
//! throughput, fairness between processes, the longest waits and the server's work per lock,
//! as P grows. Each process is this example run again with `--worker`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::pictures::Curves;
use crate::stats::{quantile, show};
use crate::store::{builder, warm_up, Store};
use crate::{Args, Kind, StoreKind};

/// Bound on a worker's start (connect, warm-up) and, beyond its run, on its report.
const BOUND: Duration = Duration::from_secs(120);

pub async fn sweep(store: &Store, args: &Args, curves: &mut Curves) {
    println!("processes, one task each, {:?} a point:", args.run);
    println!(
        "{:>5} {:>4} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "kind",
        "P",
        "keys",
        "locks/s",
        "min share",
        "max share",
        "wait p50",
        "wait p99",
        "server/lock"
    );
    let label = store.kind.label();
    let exe = std::env::current_exe().expect("this example's path");
    let kind = store
        .kind
        .to_possible_value()
        .expect("every store has a name")
        .get_name()
        .to_owned();
    for (&lock_kind, &keys) in args
        .process_kinds
        .iter()
        .flat_map(|k| args.process_keys.iter().map(move |n| (k, n)))
    {
        let lock_name = lock_kind
            .to_possible_value()
            .expect("every kind has a name")
            .get_name()
            .to_owned();
        for &p in &args.processes {
            let prefix = format!("scale:proc:{}:{lock_name}:{p}:{keys}", std::process::id());
            let mut workers = Vec::with_capacity(p);
            for _ in 0..p {
                let mut child = Command::new(&exe)
                    .arg("--worker")
                    .args([
                        kind.as_str(),
                        &store.url(),
                        &lock_name,
                        &prefix,
                        &keys.to_string(),
                        &args.run.as_secs_f64().to_string(),
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .expect("start a worker");
                let out = BufReader::new(child.stdout.take().expect("piped"));
                workers.push((child, out));
            }
            for (_, out) in &mut workers {
                let line = next_line(out).await;
                assert_eq!(line, "ready", "a worker's first line");
            }
            let calls_before = store.calls().await;
            for (child, _) in &mut workers {
                let stdin = child.stdin.as_mut().expect("piped");
                stdin.write_all(b"go\n").await.expect("tell a worker to go");
                stdin.flush().await.expect("flush");
            }
            let mut counts = Vec::with_capacity(p);
            let mut waits = Vec::new();
            for (child, out) in &mut workers {
                let line = next_line(out).await;
                let (count, list) = parse_report(&line);
                counts.push(count as f64);
                waits.extend(list);
                finish(child).await;
            }
            let calls = store.calls().await.saturating_sub(calls_before);
            let total: f64 = counts.iter().sum();
            let mean = total / p as f64;
            let min = counts.iter().cloned().fold(f64::INFINITY, f64::min) / mean;
            let max = counts.iter().cloned().fold(0.0, f64::max) / mean;
            let rate = total / args.run.as_secs_f64();
            println!(
                "{:>5} {:>4} {:>5} {:>10.0} {:>10.2} {:>10.2} {:>10} {:>10} {:>12.1}",
                lock_name,
                p,
                keys,
                rate,
                min,
                max,
                show(quantile(&mut waits, 0.5)),
                show(quantile(&mut waits, 0.99)),
                calls as f64 / total
            );
            let series = format!(
                "{label}, {lock_name}, {keys} key{}",
                if keys == 1 { "" } else { "s" }
            );
            let x = p as f64;
            curves.add("processes-throughput", &series, x, rate);
            curves.add(
                "processes-wait-p99",
                &series,
                x,
                quantile(&mut waits, 0.99).as_secs_f64() * 1e3,
            );
            curves.add("processes-share-min", &series, x, min);
        }
    }
}

async fn next_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    let read = tokio::time::timeout(BOUND, out.read_line(&mut line)).await;
    match read {
        Ok(Ok(n)) if n > 0 => line.trim_end().to_owned(),
        other => panic!("a worker said nothing within {BOUND:?}: {other:?}"),
    }
}

async fn finish(child: &mut Child) {
    match tokio::time::timeout(BOUND, child.wait()).await {
        Ok(Ok(status)) if status.success() => {}
        other => panic!("a worker did not end well: {other:?}"),
    }
}

/// `done <count> <wait µs>,<wait µs>,...`
fn parse_report(line: &str) -> (u64, Vec<Duration>) {
    let mut parts = line.split(' ');
    assert_eq!(parts.next(), Some("done"), "a worker's report: {line}");
    let count = parts
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a worker's count: {line}"));
    let waits = parts
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|w| !w.is_empty())
        .map(|w| Duration::from_micros(w.parse().expect("a wait in µs")))
        .collect();
    (count, waits)
}

/// One contending process: connects, says `ready`, waits for `go`, then takes and releases
/// the keys in turn for the given seconds and reports its count and every acquire's wait.
pub async fn worker(args: &[String]) {
    let [kind, url, lock_kind, prefix, keys, secs] = args else {
        panic!("--worker STORE URL KIND PREFIX KEYS SECS, got {args:?}")
    };
    let kind = StoreKind::from_str(kind, true).expect("a store name");
    let lock_kind = Kind::from_str(lock_kind, true).expect("a lock kind");
    let keys: usize = keys.parse().expect("a key count");
    let run = Duration::from_secs_f64(secs.parse().expect("seconds"));
    // One command connection: P processes must fit in PostgreSQL's 100 connections.
    let client = builder(kind, url)
        .connections(1)
        .build()
        .await
        .expect("a worker connects");
    warm_up(&client, format!("{prefix}:warm:{}", std::process::id())).await;
    println!("ready");
    let mut go = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await
        .expect("wait for go");
    let until = Instant::now() + run;
    let mut waits = Vec::new();
    let mut i = std::process::id() as usize;
    while Instant::now() < until {
        let name = format!("{prefix}:{}", i % keys);
        let lock = match lock_kind {
            Kind::Plain => client.lock(name),
            Kind::Fair => client.fair_lock(name),
        }
        .wait(BOUND);
        i += 1;
        let asked = Instant::now();
        let guard = lock.acquire().await.expect("a worker's acquire");
        waits.push(asked.elapsed().as_micros().to_string());
        guard.release().await.expect("a worker's release");
    }
    client.shutdown().await;
    println!("done {} {}", waits.len(), waits.join(","));
}
