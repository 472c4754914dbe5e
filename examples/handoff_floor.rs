//! Where a handoff across clients stands against its floor: the same release -> message ->
//! waiter chain done with plain redis-rs, each figure as a ratio to a PING sent after the same
//! idle time (a parked waiter and an idle PING both start from sleeping threads).
//!
//! `cargo run --release --example handoff_floor` (starts its own redis-server unless REDIS_URL
//! is set; `-- --rounds 7 --samples 500` for more, `--in-task` to run inside a spawned task).
//!
//! Every sample starts after 3 ms idle; the paths are interleaved sample by sample. The raw
//! waiter is a task woken by a RESP3 push on its own connection (the least a client can do);
//! the clock stops when that task runs (and, for the plain lock, when its acquire's reply came).
//! Rows:
//! * **PUBLISH**: a bare PUBLISH; no script at all;
//! * **fair-sized grant**: a PING and a script of the fair release's 15 commands that grants
//!   (GET, HGET, ZSCORE x2, GET, SET, DEL, TIME, ZRANGEBYSCORE, ZPOPMIN, SET, HSET, PEXPIRE,
//!   ZREM, PUBLISH) in one write, as dlock sends it: the floor of a fair grant;
//! * **dlock fair**: `fair_lock` release -> the next holder holding;
//! * **plain floor**: dlock's own lock/release.lua, then the woken waiter's lock/acquire.lua
//!   on its own connection: the floor of a plain handoff (the message, then a round trip);
//! * **dlock plain**: `lock` release -> the next holder holding.

#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use dlock::redis::{self, aio::MultiplexedConnection, Script};
use dlock::{Lock, LockClient};
use support::{percentile, redis_url};
use tokio::sync::oneshot;

#[derive(Parser, Debug)]
#[command(about = "handoffs across clients against their floor, in idle-PING RTT")]
struct Args {
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Samples per path and round.
    #[arg(long, default_value_t = 300)]
    samples: usize,
    /// Run inside a spawned task instead of `main`'s `block_on`.
    #[arg(long)]
    in_task: bool,
}

/// How long a waiter parks before the release (and the idle time before each PING).
const PARK: Duration = Duration::from_millis(3);

const ACQUIRE: &str = include_str!("../dlock-runtime/lua/lock/acquire.lua");
const RELEASE: &str = include_str!("../dlock-runtime/lua/lock/release.lua");

/// The commands of a fair release that grants, on scratch keys (`KEYS[1]` and its suffixes).
const FAIR_SIZED_GRANT: &str = r#"
local k = KEYS[1]
redis.pcall('GET', k .. ':latch')
redis.pcall('HGET', k, 'holder')
redis.pcall('ZSCORE', k .. ':queue', 'holder')
redis.pcall('ZSCORE', k .. ':alive', 'holder')
redis.pcall('GET', k .. ':fence')
redis.call('SET', k .. ':latch', 0, 'PX', 1000)
redis.call('DEL', k)
local t = redis.call('TIME')
redis.call('ZRANGEBYSCORE', k .. ':alive', '-inf', 0)
redis.call('ZADD', k .. ':queue', 1, 'next')
local head = redis.call('ZPOPMIN', k .. ':queue')[1]
redis.call('SET', k .. ':fence', t[1], 'PX', 100000)
redis.call('HSET', k, head, 1)
redis.call('PEXPIRE', k, 2000)
redis.call('ZREM', k .. ':alive', head)
redis.pcall('PUBLISH', ARGV[1], head .. ' 1')
return 0
"#;

const CHANNEL: &str = "handoff_floor:chan";
const PLAIN_KEY: &str = "handoff_floor:plain";

const PATHS: [&str; 6] = [
    "idle PING",
    "PUBLISH",
    "fair-sized grant",
    "dlock fair",
    "plain floor",
    "dlock plain",
];

/// Hands the next message on `CHANNEL` to whoever set the sender.
type Wake = Arc<Mutex<Option<oneshot::Sender<()>>>>;

struct Setup {
    conn: MultiplexedConnection,
    /// The raw waiter's connection (its acquire goes there).
    waiter_conn: MultiplexedConnection,
    wake: Wake,
    grant: Script,
    acquire: Script,
    release: Script,
    locks: [LockClient; 2],
}

/// A connection that hands each message to the current `wake` sender as it reads it.
async fn subscriber(url: &str, wake: Wake) -> MultiplexedConnection {
    let info = redis::Client::open(url)
        .expect("redis url")
        .get_connection_info()
        .clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(resp3)).expect("redis url");
    let push = move |p: redis::PushInfo| -> Result<(), std::convert::Infallible> {
        if p.kind == redis::PushKind::Message {
            let waiting = wake.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(tx) = waiting {
                let _ = tx.send(());
            }
        }
        Ok(())
    };
    let config = redis::AsyncConnectionConfig::new().set_push_sender(push);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect the subscriber (RESP3)");
    conn.subscribe(CHANNEL).await.expect("SUBSCRIBE");
    conn
}

/// The plain scripts' arguments for `owner`: acquire (lease 30 s, top level) and release.
fn acquire_call<'a>(script: &'a Script, owner: &str) -> redis::ScriptInvocation<'a> {
    let mut call = script.key(PLAIN_KEY);
    call.key(dlock::inspect::fence_counter("handoff_floor:", PLAIN_KEY))
        .key(format!("{PLAIN_KEY}:latch:done:{owner}"))
        .arg(30_000)
        .arg(owner)
        .arg(3_600_000);
    call
}

/// Each release its own request id (a latch of a repeated id would answer without releasing).
fn release_call<'a>(script: &'a Script, owner: &str) -> redis::ScriptInvocation<'a> {
    static REQUESTS: AtomicUsize = AtomicUsize::new(0);
    let latch = REQUESTS.fetch_add(1, Ordering::Relaxed);
    let mut call = script.key(PLAIN_KEY);
    call.key(CHANNEL)
        .key(format!("{PLAIN_KEY}:latch:{latch}"))
        .key(format!("{PLAIN_KEY}:latch:done:{owner}"))
        .arg(owner)
        .arg(30_000)
        .arg(1_000);
    call
}

/// Runs a raw waiter: parked until the next message, then `then` (its own round trip, if any).
fn raw_waiter<F>(wake: &Wake, then: F) -> tokio::task::JoinHandle<Instant>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    *wake.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    tokio::spawn(async move {
        rx.await.expect("woken by the message");
        then.await;
        Instant::now()
    })
}

/// A dlock handoff: `held` (taken now) is released after the waiter of `waiting` parked.
async fn dlock_handoff(held: Lock, waiting: Lock) -> Duration {
    let guard = held.acquire().await.expect("acquire");
    let waiter = tokio::spawn(async move {
        let next = waiting.acquire().await.expect("the waiter's acquire");
        let at = Instant::now();
        next.release().await.expect("release");
        at
    });
    tokio::time::sleep(PARK).await;
    let released = Instant::now();
    guard.release().await.expect("release");
    waiter
        .await
        .expect("waiter")
        .saturating_duration_since(released)
}

async fn one(s: &mut Setup, path: &str, i: usize) -> Duration {
    match path {
        "idle PING" => {
            tokio::time::sleep(PARK).await;
            let t = Instant::now();
            let _: String = redis::cmd("PING")
                .query_async(&mut s.conn)
                .await
                .expect("PING");
            t.elapsed()
        }
        "PUBLISH" => {
            let waiter = raw_waiter(&s.wake, async {});
            tokio::time::sleep(PARK).await;
            let t = Instant::now();
            let _: i64 = redis::cmd("PUBLISH")
                .arg(CHANNEL)
                .arg("released")
                .query_async(&mut s.conn)
                .await
                .expect("PUBLISH");
            waiter.await.expect("waiter").saturating_duration_since(t)
        }
        "fair-sized grant" => {
            let waiter = raw_waiter(&s.wake, async {});
            tokio::time::sleep(PARK).await;
            let t = Instant::now();
            let mut both = redis::pipe();
            both.cmd("PING")
                .ignore()
                .cmd("EVALSHA")
                .arg(s.grant.get_hash())
                .arg(1)
                .arg("handoff_floor:fair")
                .arg(CHANNEL);
            let _: (i64,) = both.query_async(&mut s.conn).await.expect("grant");
            waiter.await.expect("waiter").saturating_duration_since(t)
        }
        "plain floor" => {
            // Fresh owners every sample, as dlock's are: an owner whose last release ran is
            // done, and the acquire script refuses it.
            static SAMPLE: AtomicUsize = AtomicUsize::new(0);
            let n = SAMPLE.fetch_add(1, Ordering::Relaxed);
            let (holder, next) = (format!("holder:{n}"), format!("next:{n}"));
            let (held, _): (i64, i64) = acquire_call(&s.acquire, &holder)
                .invoke_async(&mut s.conn)
                .await
                .expect("acquire.lua");
            assert_eq!(held, 1, "the scratch key was free");
            let (acquire, mut conn) = (s.acquire.clone(), s.waiter_conn.clone());
            let next_owner = next.clone();
            let waiter = raw_waiter(&s.wake, async move {
                let (got, _): (i64, i64) = acquire_call(&acquire, &next_owner)
                    .invoke_async(&mut conn)
                    .await
                    .expect("the waiter's acquire.lua");
                assert_eq!(got, 1, "the woken waiter holds");
            });
            tokio::time::sleep(PARK).await;
            let t = Instant::now();
            let _: redis::Value = release_call(&s.release, &holder)
                .invoke_async(&mut s.conn)
                .await
                .expect("release.lua");
            let took = waiter.await.expect("waiter").saturating_duration_since(t);
            let _: redis::Value = release_call(&s.release, &next)
                .invoke_async(&mut s.conn)
                .await
                .expect("release.lua");
            took
        }
        "dlock fair" | "dlock plain" => {
            let key = format!("handoff_floor:dlock:{}", i % 8);
            let [a, b] = &s.locks;
            let (held, waiting) = if path == "dlock fair" {
                (a.fair_lock(&key), b.fair_lock(&key))
            } else {
                (a.lock(&key), b.lock(&key))
            };
            dlock_handoff(held, waiting).await
        }
        _ => unreachable!("no path {path}"),
    }
}

async fn measure(mut s: Setup, args: Args) -> Vec<Vec<f64>> {
    let mut ratios = vec![Vec::new(); PATHS.len()];
    for round in 0..args.rounds {
        let mut samples = vec![Vec::with_capacity(args.samples); PATHS.len()];
        for i in 0..args.samples {
            for j in 0..PATHS.len() {
                let k = (i + j + round) % PATHS.len();
                let took = one(&mut s, PATHS[k], i).await;
                samples[k].push(took);
            }
        }
        let unit = percentile(&mut samples[0], 0.5);
        println!("round {round} (idle PING {unit:.1?}):");
        for (k, path) in PATHS.iter().enumerate() {
            let p50 = percentile(&mut samples[k], 0.5);
            let ratio = p50.as_secs_f64() / unit.as_secs_f64();
            println!("  {path:<18} p50 {p50:>9.1?} = {ratio:.2} idle-PING RTT");
            ratios[k].push(ratio);
        }
    }
    ratios
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let (url, _server) = redis_url();
    let wake: Wake = Arc::default();
    let client = redis::Client::open(url.as_str()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let (grant, acquire, release) = (
        Script::new(FAIR_SIZED_GRANT),
        Script::new(ACQUIRE),
        Script::new(RELEASE),
    );
    for script in [&grant, &acquire, &release] {
        let _: String = script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .expect("SCRIPT LOAD");
    }
    let _: () = redis::cmd("DEL")
        .arg(PLAIN_KEY)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let setup = Setup {
        waiter_conn: client
            .get_multiplexed_async_connection()
            .await
            .expect("connect"),
        conn,
        wake: wake.clone(),
        grant,
        acquire,
        release,
        locks: [
            LockClient::connect(&url).await.expect("connect"),
            LockClient::connect(&url).await.expect("connect"),
        ],
    };
    // Kept open for the whole run: its pushes wake the raw waiters.
    let _subscriber = subscriber(&url, wake).await;
    let (rounds, in_task) = (args.rounds, args.in_task);
    let run = measure(setup, args);
    let ratios = if in_task {
        tokio::spawn(run).await.expect("the measuring task")
    } else {
        run.await
    };
    println!("\nover {rounds} rounds: median [range] of the rounds' p50, in idle-PING RTT");
    for (k, path) in PATHS.iter().enumerate().skip(1) {
        let mut r = ratios[k].clone();
        r.sort_by(f64::total_cmp);
        let (lo, hi) = (r[0], r[r.len() - 1]);
        println!("  {path:<18} {:.2} [{lo:.2}-{hi:.2}]", r[r.len() / 2]);
    }
}
