//! The watchdog on a cluster: every held lock is renewed, in one script call per node per
//! tick (500 keys a call), not one per slot; on Redis 6.2, which refuses a script whose keys
//! are in several slots, one call per slot (of each 500 keys).
//!
//! Counted on the servers: `INFO commandstats` of every master (EVAL, EVALSHA and FCALL, executed
//! or rejected), sampled every 20 ms over a window in which this client neither acquires nor
//! releases, so every script call in it is a renewal. A tick's calls go out together, so they
//! show up as one burst of samples; bursts are at least a quarter of a renewal period apart.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dlock::LockClient;
use futures_util::future::join_all;

use crate::{bounded, common, node_conn, own_cluster};

const LOCKS: usize = 3_000;
const TTL: Duration = Duration::from_secs(3);
/// The watchdog renews at a third of the lease.
const PERIOD: Duration = Duration::from_secs(1);
/// Holds due within a twelfth of the lease share a tick: a quarter of the period.
const SHARED_TICK: Duration = Duration::from_millis(250);
/// Keys per renew call (documented: 1,000 held locks cost 6 calls per lease, 500 keys a call).
const KEYS_PER_CALL: usize = 500;
/// How often the masters' counters are read.
const SAMPLE: Duration = Duration::from_millis(20);
/// Samples with script calls less than this apart belong to one tick.
const SAME_TICK: Duration = Duration::from_millis(100);

/// Waits (bounded) until the watchdog renewed `lock`: its expiry moved later by 50 ms or more.
async fn until_renewed(lock: &dlock::Lock) {
    let started = Instant::now();
    let first = lock.remaining_ttl().await.unwrap().expect("held");
    loop {
        let now = lock.remaining_ttl().await.unwrap().expect("held");
        if now + started.elapsed() > first + Duration::from_millis(50) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "`{}` not renewed within 5 s",
            lock.name()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_3000_locks_costs_one_call_per_node_and_500_keys_per_tick() {
    // Its own cluster: the counters must see this client's calls only.
    let (cluster, _turn) = own_cluster().await;
    let masters = cluster.masters().expect("masters");
    let mut conns = Vec::new();
    for m in &masters {
        conns.push(node_conn(&m.url).await);
    }
    let client = LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .expect("cluster client");

    // Warm-up: one lock per master, renewed once, so the renew script is in every master's
    // cache and the window sees no NOSCRIPT + EVAL pair.
    for m in &masters {
        let name =
            crate::names_on_master(&cluster, &client, "cluster:wd:warm", m.port, 1).remove(0);
        let lock = client.lock(name).ttl(Duration::from_millis(600));
        let g = bounded(Duration::from_secs(10), "warm-up acquire", lock.acquire())
            .await
            .unwrap();
        bounded(
            Duration::from_secs(10),
            "warm-up renewal",
            until_renewed(&lock),
        )
        .await;
        bounded(Duration::from_secs(10), "warm-up release", g.release())
            .await
            .unwrap();
    }

    // Which master serves each lock, and the slots of each master's locks.
    let names: Vec<String> = (0..LOCKS).map(|i| format!("cluster:wd:{i}")).collect();
    let mut keys_per_node = vec![0usize; masters.len()];
    let mut slots_per_node = vec![BTreeMap::<u16, usize>::new(); masters.len()];
    for name in &names {
        let slot = dlock::stock::cluster_slot(client.lock(name.as_str()).key());
        let node = masters
            .iter()
            .position(|m| m.slots.iter().any(|r| r.contains(&slot)))
            .expect("every slot is served");
        keys_per_node[node] += 1;
        *slots_per_node[node].entry(slot).or_default() += 1;
    }

    // Acquire all at once, so their renewals fall due together.
    let started = Instant::now();
    let guards = bounded(
        Duration::from_secs(60),
        "3,000 acquires",
        join_all(
            names
                .iter()
                .map(|n| async { client.lock(n.as_str()).ttl(TTL).acquire().await }),
        ),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()
    .expect("acquire 3,000 locks");
    let acquired_in = started.elapsed();

    // The window: from half a period after the last acquire, three periods long.
    let window_start = tokio::time::Instant::now() + PERIOD / 2;
    let window_end = window_start + 3 * PERIOD;
    tokio::time::sleep_until(window_start).await;
    let mut samples: Vec<(tokio::time::Instant, Vec<u64>)> = Vec::new();
    while tokio::time::Instant::now() < window_end {
        let at = tokio::time::Instant::now();
        let counts = join_all(conns.iter_mut().map(common::script_calls)).await;
        samples.push((at, counts));
        tokio::time::sleep_until(at + SAMPLE).await;
        assert!(samples.len() < 1_000, "sampling loop ran away");
    }
    let lost = guards.iter().filter(|g| g.is_lost()).count();

    // Bursts of calls: one per tick.
    let mut ticks: Vec<(tokio::time::Instant, Vec<u64>)> = Vec::new();
    for pair in samples.windows(2) {
        let (at, before, after) = (pair[1].0, &pair[0].1, &pair[1].1);
        let delta: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        if delta.iter().all(|d| *d == 0) {
            continue;
        }
        match ticks.last_mut() {
            Some((last, sum)) if at.duration_since(*last) < SAME_TICK => {
                *last = at;
                for (s, d) in sum.iter_mut().zip(&delta) {
                    *s += d;
                }
            }
            _ => ticks.push((at, delta)),
        }
    }
    let totals: Vec<u64> = (0..masters.len())
        .map(|i| samples.last().unwrap().1[i] - samples[0].1[i])
        .collect();

    let released = bounded(
        Duration::from_secs(60),
        "3,000 releases",
        join_all(guards.into_iter().map(|g| g.release())),
    )
    .await;
    let failed: Vec<String> = released
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 3,000 releases failed ({lost} holds read lost in the window; acquired in \
         {acquired_in:?}); the first: {}",
        failed.len(),
        failed[0]
    );

    // Redis 6.2 refuses a script whose keys are in several slots (CROSSSLOT), so there each
    // node call (a chunk of up to 500 keys) is refused and its keys renewed one call per slot:
    // what README promises for 6.2. A slot whose keys fell into two chunks costs two calls.
    let info = common::server_info();
    let per_slot = !info.has_cross_slot_scripts();
    let mut per_node = BTreeMap::new();
    for (i, m) in masters.iter().enumerate() {
        let per_tick: Vec<u64> = ticks.iter().map(|(_, d)| d[i]).collect();
        let chunks = keys_per_node[i].div_ceil(KEYS_PER_CALL);
        let calls_per_tick = if per_slot {
            let slot_calls: usize = slots_per_node[i].values().map(|&n| n.min(chunks)).sum();
            (chunks + slot_calls) as u64
        } else {
            chunks as u64
        };
        per_node.insert(
            m.port,
            (keys_per_node[i], totals[i], per_tick, calls_per_tick),
        );
    }
    println!(
        "{LOCKS} locks (ttl {TTL:?}) acquired in {acquired_in:?}; window {:?} from {:?} after \
         the acquires: {} ticks, {lost} holds lost",
        3 * PERIOD,
        PERIOD / 2,
        ticks.len()
    );
    let expected = if per_slot {
        format!(
            "{info}: one refused node call per {KEYS_PER_CALL} keys, then one call per slot of \
             each"
        )
    } else {
        format!("one call per {KEYS_PER_CALL} keys")
    };
    for (port, (keys, total, per_tick, calls_per_tick)) in &per_node {
        println!(
            "renew calls on master 127.0.0.1:{port}: {keys} keys, {total} calls in the window, \
             per tick {per_tick:?} ({expected}: at most {calls_per_tick} per tick)"
        );
    }

    assert_eq!(lost, 0, "holds were lost while the watchdog renewed them");
    // Acquires spread over `acquired_in` may split the holds over several ticks per period, a
    // quarter period of acquires each; normally they all share one.
    let groups = (acquired_in.as_millis() / SHARED_TICK.as_millis()) as usize + 1;
    assert!(
        ticks.len() >= 2,
        "only {} ticks in three renewal periods",
        ticks.len()
    );
    assert!(
        ticks.len() <= 3 * groups + 1,
        "{} ticks in three renewal periods (acquires took {acquired_in:?})",
        ticks.len()
    );
    for (port, (keys, total, per_tick, calls_per_tick)) in &per_node {
        let calls_per_tick = *calls_per_tick;
        for (t, calls) in per_tick.iter().enumerate() {
            assert!(
                *calls <= calls_per_tick,
                "tick {t}: {calls} renew calls to 127.0.0.1:{port} for {keys} keys, at most \
                 {calls_per_tick} expected ({expected})"
            );
        }
        // Allow one more tick at a window edge.
        assert!(
            *total <= (ticks.len() as u64 + 1) * calls_per_tick,
            "127.0.0.1:{port}: {total} renew calls in {} ticks",
            ticks.len()
        );
        assert!(
            per_tick.iter().filter(|c| **c > 0).count() >= 2,
            "127.0.0.1:{port} was renewed in fewer than 2 ticks: {per_tick:?}"
        );
    }
}
