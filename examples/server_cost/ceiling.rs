//! The throughput ceiling: cycles per second when the servers, not the clients, are the limit.
//!
//! Scripts: `workers` connections per node, each sending pipelines of `depth` acquires then
//! their `depth` releases, on keys of its own that hash to that node, for a fixed time. dlock's
//! plain scripts go as EVALSHA of `lua/lock/` (the library's FCALL costs the same script time;
//! the per-call table has both), and so do the RLock kind's (`lua/redisson/`), next to
//! Redisson's own RLock and RFencedLock scripts and rslock's commands: the issue-39 targets
//! compare the plain lock with RFencedLock (both hand out tokens) and the RLock kind with
//! RLock. Keys are reused from pipeline to pipeline, so the server's memory stays level and
//! the figures are the scripts' steady cost (fresh keys held, as in the per-call table, make
//! the server grow its memory and rehash its tables, which costs time no script is asking).
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
static DLOCK_RLOCK_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../dlock-runtime/lua/redisson/lock_acquire.lua"
    ))
});
static DLOCK_RLOCK_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../dlock-runtime/lua/redisson/lock_release.lua"
    ))
});

/// What the pipelines send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Load {
    DlockScripts,
    DlockRlockKind,
    RedissonScripts,
    RedissonFenced,
    Rslock,
}

impl Load {
    pub const ALL: [Load; 5] = [
        Load::DlockScripts,
        Load::RedissonFenced,
        Load::DlockRlockKind,
        Load::RedissonScripts,
        Load::Rslock,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Load::DlockScripts => "dlock plain scripts (EVALSHA, pipelined)",
            Load::DlockRlockKind => "dlock RLock kind scripts (EVALSHA, pipelined)",
            Load::RedissonScripts => "Redisson's own RLock scripts (pipelined)",
            Load::RedissonFenced => "Redisson's own RFencedLock scripts (pipelined)",
            Load::Rslock => "SET NX PX + compare-and-delete (pipelined)",
        }
    }

    /// The peer a dlock load is held to (issue 39's targets), and the target ratio of server
    /// CPU per cycle.
    pub fn peer(self) -> Option<(Load, f64)> {
        match self {
            Load::DlockScripts => Some((Load::RedissonFenced, 1.25)),
            Load::DlockRlockKind => Some((Load::RedissonScripts, 1.15)),
            _ => None,
        }
    }
}

/// `SCRIPT LOAD` of dlock's scripts on `node` (the raw peers' are loaded elsewhere).
pub async fn load_dlock_scripts(node: &mut MultiplexedConnection) {
    for s in [
        &*DLOCK_ACQUIRE,
        &*DLOCK_RELEASE,
        &*DLOCK_RLOCK_ACQUIRE,
        &*DLOCK_RLOCK_RELEASE,
    ] {
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
        1e6 / self.cpu_us_per_cycle()
    }

    /// Server CPU (main threads, user + sys) per cycle, µs.
    pub fn cpu_us_per_cycle(&self) -> f64 {
        (self.reading.cpu_user_us + self.reading.cpu_sys_us) / self.cycles as f64
    }
}

/// One ceiling run of a round, for the report.
pub struct CeilingRun {
    pub label: String,
    /// None for the run through the API.
    pub load: Option<Load>,
    pub round: usize,
    pub ceiling: Ceiling,
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
        pipe.add_command(acquire_call(load, b, &owner(i)));
    }
    for (i, b) in bases.iter().enumerate() {
        pipe.add_command(release_call(load, b, &owner(i), &format!("{round}:{i}")));
    }
    pipe
}

/// A top-level acquire of `key` (a `{...}` base, so all of a lock's keys share its slot) by
/// `owner`, as each library sends it.
pub fn acquire_call(load: Load, key: &str, owner: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    match load {
        Load::DlockScripts => {
            // As store/redis/kinds/plain.rs sends a top-level acquire: the slot's fencing
            // counter, the owner's done latch; lease, owner (the counter's lifetime is the
            // script's default).
            cmd.arg(DLOCK_ACQUIRE.get_hash())
                .arg(3)
                .arg(key)
                .arg(dlock::inspect::fence_counter("dlock:", key))
                .arg(format!("{key}:latch:done:{owner}"))
                .arg(600_000)
                .arg(owner);
        }
        // Redisson's layout: the lock hash alone, lease and owner field.
        Load::DlockRlockKind | Load::RedissonScripts => {
            let hash = if load == Load::DlockRlockKind {
                DLOCK_RLOCK_ACQUIRE.get_hash()
            } else {
                crate::subjects::redisson_acquire_hash()
            };
            cmd.arg(hash).arg(1).arg(key).arg(600_000).arg(owner);
        }
        Load::RedissonFenced => {
            cmd.arg(crate::subjects::redisson_fenced_acquire_hash())
                .arg(2)
                .arg(key)
                .arg(format!("redisson_lock_token:{key}"))
                .arg(600_000)
                .arg(owner);
        }
        Load::Rslock => {
            cmd = redis::cmd("SET");
            cmd.arg(key).arg(owner).arg("NX").arg("PX").arg(600_000);
        }
    }
    cmd
}

/// The release of `owner`'s only hold of `key`; `request` names its latch.
pub fn release_call(load: Load, key: &str, owner: &str, request: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    match load {
        Load::DlockScripts => {
            cmd.arg(DLOCK_RELEASE.get_hash())
                .arg(4)
                .arg(key)
                .arg(format!("{key}:chan"))
                .arg(format!("{key}:latch:{request}"))
                .arg(format!("{key}:latch:done:{owner}"))
                .arg(owner)
                .arg(600_000)
                .arg(5_000);
        }
        // Redisson's layout: the lock hash, its channel, the request's unlock latch; owner
        // field, lease, latch lifetime; dlock's script also names the publish command.
        Load::DlockRlockKind | Load::RedissonScripts | Load::RedissonFenced => {
            let hash = if load == Load::DlockRlockKind {
                DLOCK_RLOCK_RELEASE.get_hash()
            } else {
                crate::subjects::redisson_release_hash()
            };
            cmd.arg(hash)
                .arg(3)
                .arg(key)
                .arg(format!("redisson_lock__channel:{key}"))
                .arg(format!("redisson_unlock_latch:{key}:{request}"))
                .arg(owner)
                .arg(600_000)
                .arg(5_000);
            if load == Load::DlockRlockKind {
                cmd.arg("PUBLISH");
            }
        }
        Load::Rslock => {
            cmd.arg(crate::subjects::rslock_release_hash())
                .arg(1)
                .arg(key)
                .arg(owner);
        }
    }
    cmd
}

/// Every acquire granted and every release freeing: a ceiling of refusals would be no ceiling.
fn check(load: Load, replies: &[Value]) {
    let (acquires, releases) = replies.split_at(replies.len() / 2);
    acquires.iter().for_each(|a| check_acquire(load, a));
    releases.iter().for_each(|r| check_release(load, r));
}

pub fn check_acquire(load: Load, reply: &Value) {
    let ok = match load {
        Load::DlockScripts | Load::DlockRlockKind => {
            matches!(reply, Value::Array(v) if matches!(v.first(), Some(Value::Int(1))))
        }
        Load::RedissonScripts => matches!(reply, Value::Nil),
        // {false, token}: Lua's false is a nil element.
        Load::RedissonFenced => {
            matches!(reply, Value::Array(v) if matches!(v.as_slice(), [Value::Nil, Value::Int(_)]))
        }
        Load::Rslock => matches!(reply, Value::Okay),
    };
    assert!(ok, "{load:?}: an acquire was refused: {reply:?}");
}

pub fn check_release(load: Load, reply: &Value) {
    let ok = match load {
        Load::DlockScripts | Load::DlockRlockKind => {
            matches!(reply, Value::Array(v) if matches!(v.first(), Some(Value::Int(0))))
        }
        Load::RedissonScripts | Load::RedissonFenced | Load::Rslock => {
            matches!(reply, Value::Int(1))
        }
    };
    assert!(ok, "{load:?}: a release did not free: {reply:?}");
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
