//! Contention at the limit: tasks taking turns on one key, each doing a non-atomic GET n /
//! SET n+1 inside the lock, with local handoff off (every release and acquire goes to Redis),
//! on (the client's defaults), and nearly unbounded (1023 handoffs, 1 s: what the bounds
//! cost), in one run.
//!
//! `cargo run --release --example contend` (starts its own redis-server unless REDIS_URL is
//! set). Prints, as ratios to a PING measured in this run: the uncontended acquire+release;
//! 1 process x 16 tasks and 2 processes x 8 tasks for 5 s each: ops/s, round trips per
//! operation, each task's share of the mean (min/max), each process's share, the longest any
//! acquire waited, and lost updates (must be 0). `-- --sweep` adds 2 x 8 runs over a grid of
//! handoff limits and windows (how the defaults were chosen).

#[path = "support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use dlock::redis::{self, aio::MultiplexedConnection};
use dlock::LockClient;
use support::{fmt_rtt, percentile, ping_rtt, ping_rtt_after, redis_url};

const LOCK: &str = "contend:lock";
const COUNTER: &str = "{contend:lock}:counter";

#[derive(Parser, Debug)]
#[command(about = "Tasks of one and of two processes taking turns on one lock")]
struct Args {
    /// Seconds per run.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Also run 2 x 8 over a grid of handoff limits and windows.
    #[arg(long)]
    sweep: bool,
    /// Internal: run as one of the contending processes.
    #[arg(long, hide = true)]
    child: bool,
    #[arg(long, hide = true, default_value_t = 8)]
    tasks: usize,
    /// Local handoffs (0: off); unset: the client's default.
    #[arg(long, hide = true)]
    handoffs: Option<u32>,
    #[arg(long, hide = true)]
    window_ms: Option<u64>,
}

/// What one process's tasks did.
struct Outcome {
    ops: Vec<u64>,
    longest: Duration,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.child {
        return child(&args).await;
    }
    let (url, _server) = redis_url();
    let rtt = ping_rtt(&url, 2000).await;
    let idle_rtt = ping_rtt_after(&url, 300, Duration::from_millis(3)).await;
    println!("PING RTT {rtt:?} (hot), {idle_rtt:?} (after 3 ms idle)");
    uncontended(&url, rtt).await;
    let secs = Duration::from_secs(args.secs);
    let settings: &[(&str, Option<u32>, Option<u64>)] = &[
        ("handoff off", Some(0), None),
        ("handoff on (defaults)", None, None),
        (
            "handoff 1023 / 1 s (nearly unbounded)",
            Some(1023),
            Some(1000),
        ),
    ];
    for &(label, handoffs, window_ms) in settings {
        let client = client(&url, handoffs, window_ms).await;
        let before = counter(&url).await;
        let start = Instant::now();
        let outcome = run_tasks(&client, &url, 16, start + secs).await;
        let elapsed = start.elapsed();
        report(
            &format!("1 x 16, {label}"),
            &[outcome],
            elapsed,
            rtt,
            counter(&url).await - before,
        );
    }
    for &(label, handoffs, window_ms) in settings {
        two_processes(&url, label, handoffs, window_ms, secs, rtt).await;
    }
    if args.sweep {
        for limit in [8, 32, 128] {
            for window in [2, 10, 50] {
                let label = format!("limit {limit}, window {window} ms");
                two_processes(&url, &label, Some(limit), Some(window), secs, rtt).await;
            }
        }
    }
}

async fn client(url: &str, handoffs: Option<u32>, window_ms: Option<u64>) -> LockClient {
    let mut b = LockClient::builder(url);
    if let Some(n) = handoffs {
        b = b.local_handoffs(n);
    }
    if let Some(ms) = window_ms {
        b = b.local_handoff_window(Duration::from_millis(ms));
    }
    b.build().await.expect("connect")
}

async fn connection(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

async fn counter(url: &str) -> u64 {
    let n: Option<u64> = redis::cmd("GET")
        .arg(COUNTER)
        .query_async(&mut connection(url).await)
        .await
        .expect("GET counter");
    n.unwrap_or(0)
}

/// Acquire + release of a free lock, one after another.
async fn uncontended(url: &str, rtt: Duration) {
    let client = client(url, None, None).await;
    let lock = client.lock("contend:uncontended");
    for _ in 0..200 {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let mut samples = Vec::new();
    for _ in 0..3000 {
        let t = Instant::now();
        lock.acquire().await.unwrap().release().await.unwrap();
        samples.push(t.elapsed());
    }
    println!(
        "uncontended acquire+release  p50 {}  p99 {}",
        fmt_rtt(percentile(&mut samples, 0.5), rtt),
        fmt_rtt(percentile(&mut samples, 0.99), rtt)
    );
}

/// `tasks` tasks of `client`, each with its own connection for the counter (as separate
/// workers would have), looping until `until`.
async fn run_tasks(client: &LockClient, url: &str, tasks: usize, until: Instant) -> Outcome {
    let mut conns = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        conns.push(connection(url).await);
    }
    let handles: Vec<_> = conns
        .into_iter()
        .map(|conn| tokio::spawn(task(client.clone(), conn, until)))
        .collect();
    let mut outcome = Outcome {
        ops: Vec::new(),
        longest: Duration::ZERO,
    };
    for h in handles {
        let (ops, longest) = h.await.expect("task");
        outcome.ops.push(ops);
        outcome.longest = outcome.longest.max(longest);
    }
    outcome
}

async fn task(
    client: LockClient,
    mut conn: MultiplexedConnection,
    until: Instant,
) -> (u64, Duration) {
    let lock = client.lock(LOCK).wait(Duration::from_secs(60));
    let (mut ops, mut longest) = (0, Duration::ZERO);
    while Instant::now() < until {
        let asked = Instant::now();
        let guard = lock.acquire().await.expect("acquire");
        longest = longest.max(asked.elapsed());
        let n: Option<u64> = redis::cmd("GET")
            .arg(COUNTER)
            .query_async(&mut conn)
            .await
            .expect("GET");
        let () = redis::cmd("SET")
            .arg(COUNTER)
            .arg(n.unwrap_or(0) + 1)
            .query_async(&mut conn)
            .await
            .expect("SET");
        guard.release().await.expect("release");
        ops += 1;
    }
    (ops, longest)
}

/// Two processes of 8 tasks each, started together.
async fn two_processes(
    url: &str,
    label: &str,
    handoffs: Option<u32>,
    window_ms: Option<u64>,
    secs: Duration,
    rtt: Duration,
) {
    let exe = std::env::current_exe().expect("own path");
    let mut children = Vec::new();
    for _ in 0..2 {
        let mut cmd = Command::new(&exe);
        cmd.env("REDIS_URL", url)
            .args([
                "--child",
                "--tasks",
                "8",
                "--secs",
                &secs.as_secs().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(n) = handoffs {
            cmd.args(["--handoffs", &n.to_string()]);
        }
        if let Some(ms) = window_ms {
            cmd.args(["--window-ms", &ms.to_string()]);
        }
        let mut child = cmd.spawn().expect("spawn a contending process");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("child ready");
        assert_eq!(line.trim(), "READY", "child said {line:?}");
        children.push((child, out));
    }
    let before = counter(url).await;
    let start = Instant::now();
    for (child, _) in &mut children {
        writeln!(child.stdin.as_mut().expect("stdin"), "GO").expect("start a child");
    }
    let mut outcomes = Vec::new();
    for (mut child, mut out) in children {
        let mut line = String::new();
        out.read_line(&mut line).expect("child result");
        outcomes.push(parse(&line));
        child.wait().expect("child exit");
    }
    let elapsed = start.elapsed();
    report(
        &format!("2 x 8, {label}"),
        &outcomes,
        elapsed,
        rtt,
        counter(url).await - before,
    );
}

/// A contending process: connects, says READY, runs its tasks on GO, prints RESULT.
async fn child(args: &Args) {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL");
    let client = client(&url, args.handoffs, args.window_ms).await;
    // Scripts loaded and connections warm before the clock starts.
    client
        .lock(LOCK)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    println!("READY");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("GO");
    let until = Instant::now() + Duration::from_secs(args.secs);
    let outcome = run_tasks(&client, &url, args.tasks, until).await;
    let ops: Vec<String> = outcome.ops.iter().map(u64::to_string).collect();
    println!("RESULT {} {}", ops.join(","), outcome.longest.as_micros());
}

fn parse(line: &str) -> Outcome {
    let mut parts = line.split_whitespace();
    assert_eq!(parts.next(), Some("RESULT"), "child said {line:?}");
    let ops = parts
        .next()
        .expect("ops")
        .split(',')
        .map(|n| n.parse().expect("ops count"))
        .collect();
    let longest = Duration::from_micros(parts.next().expect("longest").parse().expect("µs"));
    Outcome { ops, longest }
}

fn report(label: &str, processes: &[Outcome], elapsed: Duration, rtt: Duration, counted: u64) {
    let all: Vec<u64> = processes
        .iter()
        .flat_map(|p| p.ops.iter().copied())
        .collect();
    let total: u64 = all.iter().sum();
    let mean = total as f64 / all.len() as f64;
    let per_op = elapsed / total.max(1) as u32;
    let longest = processes
        .iter()
        .map(|p| p.longest)
        .max()
        .unwrap_or_default();
    let shares: Vec<String> = processes
        .iter()
        .map(|p| {
            format!(
                "{:.2}",
                p.ops.iter().sum::<u64>() as f64 / total.max(1) as f64
            )
        })
        .collect();
    println!(
        "{label:<36} {:>7.0} ops/s, {} per op, task share min {:.2} / max {:.2}, process shares {}, longest wait {:.1?} ({:.0} RTT), lost updates {}",
        total as f64 / elapsed.as_secs_f64(),
        fmt_rtt(per_op, rtt),
        *all.iter().min().unwrap_or(&0) as f64 / mean,
        *all.iter().max().unwrap_or(&0) as f64 / mean,
        shares.join("/"),
        longest,
        longest.as_secs_f64() / rtt.as_secs_f64(),
        total - counted.min(total),
    );
}
