//! One client process: a loop of acquire, fenced write, hold, and release / drop / cancel,
//! recording every step (see the crate docs for what each event means to the checker).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::fence::{self, Outcome};
use dlock::redis::aio::MultiplexedConnection;
use dlock::{LockClient, LockClientBuilder, LockError, LockGuard, Permit, StoreFault};
use futures_util::FutureExt;

use crate::checker::secs;
use crate::history::{Ev, Recorder};
use crate::modes;
use crate::rng::Rng;
use crate::{Kind, Store, Topology};

/// Permits of the semaphore `sem:0`; the checker reads the same constant.
pub const PERMITS: u32 = 2;

/// An acquire, a release or a fenced write that takes longer than its own bounds plus this is
/// abandoned (cancelled, recorded as `stuck`): no step of the loop waits forever.
const STUCK: Duration = Duration::from_secs(20);

/// What the runner tells a client process (its command line after `client`).
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    #[arg(long)]
    pub id: i32,
    /// How many times this client was restarted (its owner ids and op numbers differ).
    #[arg(long, default_value_t = 0)]
    pub incarnation: u64,
    /// The run's origin, CLOCK_MONOTONIC ns.
    #[arg(long)]
    pub origin: u64,
    /// Stop starting operations at this run time (ns since the origin).
    #[arg(long)]
    pub until: u64,
    #[arg(long, value_enum)]
    pub kind: Kind,
    #[arg(long, value_enum)]
    pub topology: Topology,
    #[arg(long, value_enum, default_value_t = Store::Redis)]
    pub store: Store,
    #[arg(long)]
    pub seed: u64,
    /// The data nodes (single: one URL, through this client's proxy; cluster: seeds;
    /// sentinel: the sentinels; PostgreSQL: one `postgres://` URL, through this client's proxy).
    #[arg(long, value_delimiter = ',')]
    pub urls: Vec<String>,
    #[arg(long, default_value = "")]
    pub master_name: String,
    /// The register server (no fault touches it).
    #[arg(long)]
    pub register: String,
    /// The history file this process appends to.
    #[arg(long)]
    pub out: PathBuf,
    /// Run on a current-thread tokio runtime (the runner draws this per client from the seed).
    #[arg(long)]
    pub current_thread: bool,
    /// Build the client with `synced_replicas(1, ..)` (where the deployment has a replica).
    #[arg(long)]
    pub synced: bool,
}

/// How long a synced acquire or renewal waits for its replica's confirmation (below the
/// response timeout, as the builder requires).
const SYNC_WITHIN: Duration = Duration::from_millis(500);

pub fn main(args: ClientArgs) -> std::process::ExitCode {
    // Applications run dlock on either flavour; the client's background work must not depend
    // on a multi-thread runtime (a current-thread one runs nothing while its thread blocks).
    let rt = if args.current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    }
    .expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chaos client: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: ClientArgs) -> Result<(), Box<dyn std::error::Error>> {
    let rec = Arc::new(Recorder::create(&args.out, args.origin, args.id)?);
    rec.record(&rec.event(Ev::Start).detail(format!(
        "incarnation {}, {}, {}",
        args.incarnation,
        if args.current_thread {
            "current-thread"
        } else {
            "multi-thread"
        },
        if args.synced { "synced" } else { "unsynced" }
    )));
    let client = connect(&args).await?;
    let mut register = dlock::redis::Client::open(args.register.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut rng = Rng::derive(args.seed, (args.id as u64) << 20 | args.incarnation);
    // The runner closes our stdin to say stop. A plain thread, not tokio's stdin: a blocking
    // read still waiting would keep the runtime from shutting down.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            stop.store(true, Ordering::Release);
        });
    }
    let mut seq = 0;
    while !stop.load(Ordering::Acquire) && rec.now() < args.until {
        seq += 1;
        let op = args.incarnation * 1_000_000 + seq;
        one_op(&args, &client, &mut register, &rec, &mut rng, op).await;
    }
    tokio::time::timeout(STUCK, client.shutdown()).await?;
    rec.record(&rec.event(Ev::Exit));
    Ok(())
}

/// Builds the client, retrying for a while: the server may be restarting or failing over.
async fn connect(args: &ClientArgs) -> Result<LockClient, LockError> {
    let builder = || -> LockClientBuilder {
        if args.store == Store::Zookeeper {
            // The session is the lease: short, so faults past it are seen within the run.
            return LockClient::builder(args.urls[0].clone())
                .zookeeper_session_timeout(crate::zk::SESSION)
                .response_timeout(Duration::from_secs(2));
        }
        if args.store == Store::Postgres {
            // The Redis client's response timeout; no synced_replicas (a Redis setting).
            return LockClient::builder(args.urls[0].clone())
                .response_timeout(Duration::from_secs(2));
        }
        match args.topology {
            Topology::Single => LockClient::builder(args.urls[0].clone()),
            Topology::Cluster => LockClient::cluster_builder(args.urls.clone()),
            Topology::Sentinel => {
                LockClient::sentinel_builder(args.urls.clone(), args.master_name.clone())
            }
        }
        .response_timeout(Duration::from_secs(2))
        .synced_replicas(u32::from(args.synced), SYNC_WITHIN)
    };
    let mut last = None;
    for _ in 0..60 {
        match builder().build().await {
            Ok(client) => return Ok(client),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(last.expect("tried at least once"))
}

/// A granted hold of any kind.
enum Held {
    Guard(LockGuard),
    Permit(Permit),
}

impl Held {
    fn token(&self) -> Option<u64> {
        match self {
            Held::Guard(g) => Some(g.fencing_token()),
            Held::Permit(_) => None,
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Guard(g) => g.is_lost(),
            Held::Permit(p) => p.is_lost(),
        }
    }

    fn lost(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        match self {
            Held::Guard(g) => Box::pin(g.lost()),
            Held::Permit(p) => Box::pin(p.lost()),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Permit(p) => p.release().await,
        }
    }

    /// Returns once the release is on the wire; its reply is awaited in the background.
    async fn release_written(self) {
        match self {
            Held::Guard(g) => g.release_written().await,
            Held::Permit(p) => {
                let _ = p.release().await;
            }
        }
    }
}

/// Records the `Lost` transition once per hold, whoever sees it first.
struct LostOnce {
    rec: Arc<Recorder>,
    seen: AtomicBool,
    op: u64,
    lock: &'static str,
    mode: &'static str,
}

impl LostOnce {
    fn record(&self) {
        if !self.seen.swap(true, Ordering::AcqRel) {
            self.rec.record(
                &self
                    .rec
                    .event(Ev::Lost)
                    .op(self.op)
                    .lock(self.lock, self.mode),
            );
        }
    }

    /// Looks before an action, so the history never shows an action under a hold the client
    /// could already have known was lost.
    fn look(&self, held: &Held) {
        if held.is_lost() {
            self.record();
        }
    }
}

async fn one_op(
    args: &ClientArgs,
    client: &LockClient,
    register: &mut MultiplexedConnection,
    rec: &Arc<Recorder>,
    rng: &mut Rng,
    op: u64,
) {
    let mode = *rng.pick(modes::of_kind(args.kind, args.store));
    let lock = *rng.pick(modes::mode(mode).locks);
    let ttl = Duration::from_millis(rng.range(1_000, 4_000));
    // Hard leases where the store keeps them (ZooKeeper refuses one: its lease is the session),
    // drawn all the same so every store's run sees the same sequence of choices.
    let lease = rng
        .chance(20)
        .then(|| Duration::from_millis(rng.range(800, 3_000)))
        .filter(|_| args.store != Store::Zookeeper);
    let wait = if rng.chance(15) {
        Duration::ZERO
    } else {
        Duration::from_millis(rng.range(200, 4_000))
    };
    let cancel_acquire = rng
        .chance(5)
        .then(|| Duration::from_millis(rng.range(0, wait.as_millis() as u64 + 100)));
    let reenter = !modes::mode(mode).shared && mode != "sem" && rng.chance(20);
    let hold = Duration::from_millis(rng.range(0, 400));
    let late_write = rng.chance(30);
    // A written release (the attribute's: returns once the release is on the wire) is for
    // guards; a permit takes the awaited release instead.
    let ending = match rng.range(0, 99) {
        0..=54 => "release",
        55..=69 if mode != "sem" => "release_written",
        55..=69 => "release",
        70..=84 => "drop",
        _ => "cancel",
    };
    let cancel_after = Duration::from_millis(rng.range(0, hold.as_millis() as u64 + 50));

    let handle = match mode {
        "plain" => client.lock(lock),
        "fair" => client.fair_lock(lock),
        "read" => client.read_write_lock(lock).read(),
        "write" => client.read_write_lock(lock).write(),
        "rlock" => client.redisson_lock(lock),
        "rread" => client.redisson_read_write_lock(lock).read(),
        "rwrite" => client.redisson_read_write_lock(lock).write(),
        _ => client.lock(lock), // unused for the semaphore
    };
    let handle = match lease {
        Some(l) => handle.lease(l),
        None => handle.ttl(ttl),
    }
    .wait(wait);
    let sem = client.semaphore(lock, PERMITS).wait(wait);
    let sem = match lease {
        Some(l) => sem.lease(l),
        None => sem.ttl(ttl),
    };

    let mut invoke = rec.event(Ev::Invoke).op(op).lock(lock, mode);
    invoke.wait = Some(wait.as_millis() as u64);
    rec.record(&invoke.detail(format!(
        "{} {}ms wait {}ms{}",
        if lease.is_some() { "lease" } else { "ttl" },
        lease.unwrap_or(ttl).as_millis(),
        wait.as_millis(),
        if reenter { " reenter" } else { "" }
    )));
    let acquire = async {
        if mode == "sem" {
            sem.acquire().await.map(Held::Permit)
        } else {
            handle.acquire().await.map(Held::Guard)
        }
    };
    let bounded = tokio::time::timeout(wait + STUCK, acquire);
    let outcome = match cancel_acquire {
        Some(after) => tokio::select! {
            r = bounded => Some(r),
            _ = tokio::time::sleep(after) => None,
        },
        None => Some(bounded.await),
    };
    let held = match outcome {
        None => {
            rec.record(
                &rec.event(Ev::Fail)
                    .op(op)
                    .lock(lock, mode)
                    .detail("cancelled"),
            );
            return;
        }
        Some(Err(_)) => {
            rec.record(&rec.event(Ev::Fail).op(op).lock(lock, mode).detail("stuck"));
            return;
        }
        Some(Ok(Err(e))) => {
            let event = rec.event(Ev::Fail).op(op).lock(lock, mode);
            // The whole error, for whoever looks into a failure (the history keeps its kind).
            if matches!(
                e,
                LockError::Redis { .. } | LockError::Connect { .. } | LockError::Store { .. }
            ) {
                eprintln!("{:.3}s op {op} {mode} {lock}: {e}", secs(event.t));
            }
            rec.record(&event.detail(error_kind(&e)));
            return;
        }
        Some(Ok(Ok(held))) => held,
    };
    let token = held.token();
    rec.record(&rec.event(Ev::Ok).op(op).lock(lock, mode).token(token));

    let lost = Arc::new(LostOnce {
        rec: rec.clone(),
        seen: AtomicBool::new(false),
        op,
        lock,
        mode,
    });
    let watcher = {
        let lost = lost.clone();
        let fut = held.lost();
        tokio::spawn(async move {
            fut.await;
            lost.record();
        })
    };

    // Polled once, at a cancel: its first poll reads `is_lost()` (the guard is inside the
    // body by then), so a hold that ran out while the process was stopped is recorded lost
    // before the cancel, as the other endings look first too.
    let peek = held.lost();
    let fenced = modes::fenced(mode);
    let id = args.id;
    let body = {
        let lost = lost.clone();
        let rec = rec.clone();
        let mut register = register.clone();
        async move {
            if reenter {
                if let Held::Guard(g) = &held {
                    lost.look(&held);
                    let inner = tokio::time::timeout(STUCK, g.scope(handle.acquire())).await;
                    let (detail, inner_token, guard) = match inner {
                        Ok(Ok(inner)) => {
                            ("ok".to_owned(), Some(inner.fencing_token()), Some(inner))
                        }
                        Ok(Err(e)) => (error_kind(&e), None, None),
                        Err(_) => ("stuck".to_owned(), None, None),
                    };
                    rec.record(
                        &rec.event(Ev::Reenter)
                            .op(op)
                            .lock(lock, mode)
                            .token(inner_token)
                            .detail(detail),
                    );
                    if let Some(inner) = guard {
                        let _ = tokio::time::timeout(STUCK, inner.release()).await;
                    }
                }
            }
            if fenced {
                fenced_write(&mut register, &rec, &lost, &held, id, op, lock, mode).await;
            }
            tokio::time::sleep(hold).await;
            if fenced && late_write {
                fenced_write(&mut register, &rec, &lost, &held, id, op, lock, mode).await;
            }
            held
        }
    };
    let mut body = Box::pin(body);
    let held = if ending == "cancel" {
        tokio::select! {
            held = &mut body => Some(held),
            _ = tokio::time::sleep(cancel_after) => None,
        }
    } else {
        Some((&mut body).await)
    };
    match held {
        // Cancelled: the body future, and with it the guard, is dropped mid-hold.
        None => {
            if peek.now_or_never().is_some() {
                lost.record();
            }
            rec.record(
                &rec.event(Ev::ReleaseStart)
                    .op(op)
                    .lock(lock, mode)
                    .detail("cancel"),
            );
            drop(body);
        }
        Some(held) => {
            lost.look(&held);
            if ending == "drop" {
                rec.record(
                    &rec.event(Ev::ReleaseStart)
                        .op(op)
                        .lock(lock, mode)
                        .detail("drop"),
                );
                drop(held);
            } else if ending == "release_written" {
                rec.record(
                    &rec.event(Ev::ReleaseStart)
                        .op(op)
                        .lock(lock, mode)
                        .detail("release_written"),
                );
                let detail = match tokio::time::timeout(STUCK, held.release_written()).await {
                    Ok(()) => "written",
                    Err(_) => "stuck",
                };
                rec.record(
                    &rec.event(Ev::Released)
                        .op(op)
                        .lock(lock, mode)
                        .detail(detail),
                );
            } else {
                rec.record(
                    &rec.event(Ev::ReleaseStart)
                        .op(op)
                        .lock(lock, mode)
                        .detail("release"),
                );
                let detail = match tokio::time::timeout(STUCK, held.release()).await {
                    Ok(Ok(())) => "ok".to_owned(),
                    Ok(Err(e)) => {
                        eprintln!("{:.3}s op {op} {mode} {lock} release: {e}", secs(rec.now()));
                        error_kind(&e)
                    }
                    Err(_) => "stuck".to_owned(),
                };
                rec.record(
                    &rec.event(Ev::Released)
                        .op(op)
                        .lock(lock, mode)
                        .detail(detail),
                );
            }
        }
    }
    watcher.abort();
}

/// `set_if_newer` of `(client, op)` with the hold's token on the register key of the lock.
#[allow(clippy::too_many_arguments)]
async fn fenced_write(
    register: &mut MultiplexedConnection,
    rec: &Recorder,
    lost: &LostOnce,
    held: &Held,
    id: i32,
    op: u64,
    lock: &'static str,
    mode: &'static str,
) {
    let Some(token) = held.token() else { return };
    lost.look(held);
    let at = rec.now();
    let key = format!("fence:{lock}");
    let write = fence::set_if_newer(register, &key, token, format!("{id}:{op}"));
    let mut event = rec
        .event(Ev::Fence)
        .op(op)
        .lock(lock, mode)
        .token(Some(token));
    event.at = Some(at);
    match tokio::time::timeout(STUCK, write).await {
        Ok(Ok(Outcome::Written)) => event.detail = Some("written".into()),
        Ok(Ok(Outcome::Stale { highest })) => {
            event.detail = Some("stale".into());
            event.highest = Some(highest);
        }
        Ok(Ok(other)) => event.detail = Some(format!("{other:?}")),
        Ok(Err(e)) => event.detail = Some(error_kind(&e)),
        Err(_) => event.detail = Some("stuck".into()),
    }
    rec.record(&event);
}

/// A short name for what went wrong, for the history and the summary: Redis's error code
/// follows a Redis error (`redis LOADING`, `redis TRYAGAIN`), the kind of failure a
/// PostgreSQL one (`postgres not_now`: starting up, in recovery), which the checker reads.
pub fn error_kind(e: &LockError) -> String {
    if let LockError::Redis { source, .. } = e {
        if let Some(code) = source.code() {
            return format!("redis {code}");
        }
    }
    if let LockError::Store { store, fault, .. } = e {
        let fault = match fault {
            StoreFault::Unreachable => "unreachable",
            StoreFault::NotNow => "not_now",
            StoreFault::Refused => "refused",
            _ => "other",
        };
        return format!("{store} {fault}");
    }
    match e {
        LockError::Timeout { .. } => "timeout",
        LockError::NotHeld { .. } => "not_held",
        LockError::Closed { .. } => "closed",
        LockError::NotSynced { .. } => "not_synced",
        LockError::Redis { .. } => "redis",
        LockError::Connect { .. } => "connect",
        LockError::WrongType { .. } => "wrong_type",
        LockError::InvalidArgument { .. } => "invalid_argument",
        LockError::SelfDeadlock { .. } | LockError::WouldDeadlock { .. } => "deadlock",
        _ => "other",
    }
    .to_owned()
}
