//! The throughput ceiling: cycles per second when the servers, not the clients, are the limit.
//!
//! Scripts: `workers` connections per node, each sending pipelines of `depth` acquires then
//! their `depth` releases, on keys of its own that hash to that node, for a fixed time. dlock's
//! plain scripts go as EVALSHA of `lua/lock/` (the library's FCALL costs the same script time;
//! the per-call table has both), next to Redisson's own scripts and rslock's commands.
//! The API: many tasks, each acquiring and releasing a lock of its own through a `LockClient`,
//! where the client's own work (on the same cores as the servers here) may be the limit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use dlock::redis::{self, aio::MultiplexedConnection, Script, Value};
use dlock::LockClient;

use crate::stats::{Reading, Servers};

static DLOCK_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../dlock-runtime/lua/lock/acquire.lua")));
static DLOCK_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../dlock-runtime/lua/lock/release.lua")));

/// What the pipelines send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    DlockScripts,
    RedissonScripts,
    Rslock,
}

impl Load {
    pub fn label(self) -> &'static str {
        match self {
            Load::DlockScripts => "dlock plain scripts (EVALSHA, pipelined)",
            Load::RedissonScripts => "Redisson's own RLock scripts (pipelined)",
            Load::Rslock => "SET NX PX + compare-and-delete (pipelined)",
        }
    }
}

/// `SCRIPT LOAD` of dlock's plain scripts on `node` (the raw peers' are loaded elsewhere).
pub async fn load_dlock_scripts(node: &mut MultiplexedConnection) {
    for s in [&*DLOCK_ACQUIRE, &*DLOCK_RELEASE] {
        s.prepare_invoke()
            .load_async(node)
            .await
            .expect("SCRIPT LOAD");
    }
}

/// Cycles done and what the servers spent on them.
pub struct Ceiling {
    pub cycles: u64,
    pub reading: Reading,
    /// Nodes the load went to.
    pub nodes: usize,
}

impl Ceiling {
    pub fn per_sec(&self) -> f64 {
        self.cycles as f64 / self.reading.wall.as_secs_f64()
    }

    /// The busiest-node-equivalent share of one core: CPU seconds per second, summed over the
    /// loaded nodes (so 3 saturated masters read 300 %).
    pub fn cpu_percent(&self) -> f64 {
        (self.reading.cpu_user_us + self.reading.cpu_sys_us) / 1e6 / self.reading.wall.as_secs_f64()
            * 100.0
    }

    /// Cycles per second of server CPU: what one Redis core would do if this load kept it busy.
    pub fn per_core_sec(&self) -> f64 {
        self.cycles as f64 / ((self.reading.cpu_user_us + self.reading.cpu_sys_us) / 1e6)
    }
}

/// One node the load goes to: its URL and the names of keys that hash to it.
pub struct Target {
    pub url: String,
    /// `depth` key bases per worker, each `{...}` so a lock's keys share its slot.
    pub bases: Vec<Vec<String>>,
}

/// `workers` x `depth` key bases that `on_node` accepts (the slot check on a cluster).
pub fn bases_for(
    node: usize,
    workers: usize,
    depth: usize,
    on_node: &dyn Fn(&str) -> bool,
) -> Vec<Vec<String>> {
    let mut out = Vec::with_capacity(workers);
    let mut i = 0usize;
    for w in 0..workers {
        let mut mine = Vec::with_capacity(depth);
        // About one candidate in N masters hashes to this node; the bound is far above that.
        while mine.len() < depth && i < 1_000_000 {
            let base = format!("{{ceil:{node}:{w}:{i}}}");
            i += 1;
            if on_node(&base) {
                mine.push(base);
            }
        }
        assert_eq!(mine.len(), depth, "too few keys hash to node {node}");
        out.push(mine);
    }
    out
}

/// Numbers the ceiling runs: owners and latches of one run must not meet a latch an earlier
/// run left (it lives 5 s), which would answer a release as a retry.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// Runs `load` against every target for `secs`.
pub async fn scripts(load: Load, targets: &[Target], servers: &mut Servers, secs: f64) -> Ceiling {
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut conns = Vec::new();
    for t in targets {
        for bases in &t.bases {
            let client = redis::Client::open(t.url.as_str()).expect("redis url");
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            conns.push((conn, bases.clone()));
        }
    }
    servers.reset().await;
    let handles: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(w, (mut conn, bases))| {
            let done = done.clone();
            tokio::spawn(async move {
                let mut round = 0u64;
                while Instant::now() < deadline {
                    let pipe = pipeline(load, &bases, &format!("{run}:{w}:{round}"));
                    let replies: Vec<Value> = pipe.query_async(&mut conn).await.expect("pipeline");
                    check(load, &replies);
                    done.fetch_add(bases.len() as u64, Ordering::Relaxed);
                    round += 1;
                }
            })
        })
        .collect();
    for h in handles {
        tokio::time::timeout(Duration::from_secs_f64(secs + 60.0), h)
            .await
            .expect("a worker hung")
            .expect("a worker failed");
    }
    let reading = servers.read(&[]).await;
    Ceiling {
        cycles: done.load(Ordering::Relaxed),
        reading,
        nodes: targets.len(),
    }
}

/// `depth` acquires, then their releases, each owner and latch fresh (`round` tells them apart).
fn pipeline(load: Load, bases: &[String], round: &str) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    let owner = |i: usize| format!("o:{round}:{i}");
    for (i, b) in bases.iter().enumerate() {
        match load {
            Load::DlockScripts => {
                // As store/redis/kinds/plain.rs sends a top-level acquire: the slot's fencing
                // counter, the owner's done latch; lease, owner (the counter's lifetime is
                // the script's default).
                pipe.cmd("EVALSHA")
                    .arg(DLOCK_ACQUIRE.get_hash())
                    .arg(3)
                    .arg(b)
                    .arg(dlock::inspect::fence_counter("dlock:", b))
                    .arg(format!("{b}:latch:done:{}", owner(i)))
                    .arg(600_000)
                    .arg(owner(i));
            }
            Load::RedissonScripts => {
                pipe.cmd("EVALSHA")
                    .arg(crate::subjects::redisson_acquire_hash())
                    .arg(1)
                    .arg(b)
                    .arg(600_000)
                    .arg(owner(i));
            }
            Load::Rslock => {
                pipe.cmd("SET")
                    .arg(b)
                    .arg(owner(i))
                    .arg("NX")
                    .arg("PX")
                    .arg(600_000);
            }
        }
    }
    for (i, b) in bases.iter().enumerate() {
        match load {
            Load::DlockScripts => {
                pipe.cmd("EVALSHA")
                    .arg(DLOCK_RELEASE.get_hash())
                    .arg(4)
                    .arg(b)
                    .arg(format!("{b}:chan"))
                    .arg(format!("{b}:latch:{round}:{i}"))
                    .arg(format!("{b}:latch:done:{}", owner(i)))
                    .arg(owner(i))
                    .arg(600_000)
                    .arg(5_000);
            }
            Load::RedissonScripts => {
                pipe.cmd("EVALSHA")
                    .arg(crate::subjects::redisson_release_hash())
                    .arg(3)
                    .arg(b)
                    .arg(format!("redisson_lock__channel:{b}"))
                    .arg(format!("redisson_unlock_latch:{b}:{round}:{i}"))
                    .arg(owner(i))
                    .arg(600_000)
                    .arg(5_000);
            }
            Load::Rslock => {
                pipe.cmd("EVALSHA")
                    .arg(crate::subjects::rslock_release_hash())
                    .arg(1)
                    .arg(b)
                    .arg(owner(i));
            }
        }
    }
    pipe
}

/// Every acquire granted and every release freeing: a ceiling of refusals would be no ceiling.
fn check(load: Load, replies: &[Value]) {
    let (acquires, releases) = replies.split_at(replies.len() / 2);
    for a in acquires {
        let ok = match load {
            Load::DlockScripts => {
                matches!(a, Value::Array(v) if matches!(v.first(), Some(Value::Int(1))))
            }
            Load::RedissonScripts => matches!(a, Value::Nil),
            Load::Rslock => matches!(a, Value::Okay),
        };
        assert!(ok, "{load:?}: an acquire was refused: {a:?}");
    }
    for r in releases {
        let ok = match load {
            Load::DlockScripts => {
                matches!(r, Value::Array(v) if matches!(v.first(), Some(Value::Int(0))))
            }
            Load::RedissonScripts | Load::Rslock => matches!(r, Value::Int(1)),
        };
        assert!(ok, "{load:?}: a release did not free: {r:?}");
    }
}

/// `tasks` tasks, each acquiring and releasing its own lock through `client` for `secs`.
pub async fn api(client: &LockClient, tasks: usize, servers: &mut Servers, secs: f64) -> Ceiling {
    let done = Arc::new(AtomicU64::new(0));
    servers.reset().await;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (lock, done) = (
                client
                    .lock(format!("ceil:api:{t}"))
                    .ttl(Duration::from_secs(600)),
                done.clone(),
            );
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    lock.acquire()
                        .await
                        .expect("acquire")
                        .release()
                        .await
                        .expect("release");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        tokio::time::timeout(Duration::from_secs_f64(secs + 60.0), h)
            .await
            .expect("a task hung")
            .expect("a task failed");
    }
    let reading = servers.read(&[]).await;
    Ceiling {
        cycles: done.load(Ordering::Relaxed),
        reading,
        nodes: servers.len(),
    }
}
