//! A live slot migration on the cluster, the way `redis-cli --cluster reshard` does one: the
//! slot of a lock in use goes to another master key by key while clients take and release it
//! (so they meet ASK redirects for keys already moved and TRYAGAIN for scripts whose keys are
//! split between the two), is handed over with SETSLOT NODE, and comes back the same way, so
//! the cluster ends as it began (the harness numbers masters by the slots they started with).

use std::thread::sleep;
use std::time::Duration;

use dlock::redis::Value;
use dlock::testing::{ClusterNode, RedisCluster};

use crate::deploy::{self, text};

const ASK: Duration = Duration::from_secs(2);
/// Keys moved per slot at most (a lock's keys number a handful; clients cannot add keys to a
/// migrating slot on its source), so the loop is bounded whatever happens.
const MAX_KEYS: usize = 200;

/// Moves the slot of `lock` to another master (`pick` chooses which) and back, pausing `pace`
/// between steps. Returns what it did, for the history.
pub fn there_and_back(
    cluster: &RedisCluster,
    lock: &str,
    pick: usize,
    pace: Duration,
) -> Result<String, String> {
    let masters = cluster.masters().map_err(|e| e.to_string())?;
    let any = masters.first().ok_or("no master")?.port;
    let slot = match deploy::call(any, &["CLUSTER", "KEYSLOT", lock], ASK)? {
        Value::Int(slot) => slot as u16,
        other => return Err(format!("CLUSTER KEYSLOT answered {other:?}")),
    };
    let owns = |n: &&ClusterNode| n.slots.iter().any(|r| r.contains(&slot));
    let src = masters.iter().find(owns).ok_or("nobody serves the slot")?;
    let others: Vec<&ClusterNode> = masters.iter().filter(|n| n.port != src.port).collect();
    let dst = *others
        .get(pick % others.len().max(1))
        .ok_or("one master only")?;
    // A failed step is tried once more: a slot left half-migrated would stay so for the rest
    // of the run.
    let there = move_slot(slot, src, dst, &masters, pace)
        .or_else(|_| move_slot(slot, src, dst, &masters, Duration::ZERO))?;
    sleep(pace);
    let back = move_slot(slot, dst, src, &masters, pace)
        .or_else(|_| move_slot(slot, dst, src, &masters, Duration::ZERO))?;
    Ok(format!(
        "slot {slot} ({lock}) {} -> {} ({there} keys) and back ({back} keys)",
        src.port, dst.port
    ))
}

/// One migration of `slot` from `src` to `dst`; the number of keys moved.
fn move_slot(
    slot: u16,
    src: &ClusterNode,
    dst: &ClusterNode,
    masters: &[ClusterNode],
    pace: Duration,
) -> Result<usize, String> {
    let s = slot.to_string();
    deploy::call(
        dst.port,
        &["CLUSTER", "SETSLOT", &s, "IMPORTING", &src.id],
        ASK,
    )?;
    deploy::call(
        src.port,
        &["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst.id],
        ASK,
    )?;
    // Open before any key moves: a script on keys the source lacks is sent to the target.
    sleep(pace);
    // Short: a slot holds a lock's keys plus every release latch of the last 30 s (tens of
    // keys), and a real reshard moves them in milliseconds.
    let step = (pace / 10).clamp(Duration::from_millis(5), Duration::from_millis(50));
    let mut moved = 0;
    let mut last_err = None;
    for _ in 0..MAX_KEYS {
        let key = match deploy::call(src.port, &["CLUSTER", "GETKEYSINSLOT", &s, "1"], ASK)? {
            Value::Array(keys) => keys.into_iter().next().map(text),
            other => return Err(format!("GETKEYSINSLOT answered {other:?}")),
        };
        let Some(key) = key else { break };
        // One key at a time, with a pause: the lock's keys are split between the two nodes
        // meanwhile, which is when its scripts are answered TRYAGAIN.
        let dst_port = dst.port.to_string();
        let migrate = |replace: bool| {
            let mut args = vec!["MIGRATE", "127.0.0.1", &dst_port, "", "0", "5000"];
            if replace {
                args.push("REPLACE");
            }
            args.extend(["KEYS", &key]);
            deploy::call(src.port, &args, Duration::from_secs(6))
        };
        match migrate(false) {
            Ok(_) => moved += 1,
            // The key exists on the target too (it expired here and was made there): this copy
            // is the one the source served, so it wins.
            Err(e) if e.contains("BUSYKEY") => {
                migrate(true)?;
                moved += 1;
            }
            Err(e) => last_err = Some(e),
        }
        sleep(step);
    }
    if let Some(e) = last_err {
        return Err(format!("slot {slot}: a MIGRATE failed: {e}"));
    }
    // The target first (it then serves the slot, whatever the others know), then the source,
    // then everyone else, as redis-cli does.
    let mut order = vec![dst.port, src.port];
    order.extend(
        masters
            .iter()
            .map(|m| m.port)
            .filter(|p| *p != dst.port && *p != src.port),
    );
    for port in order {
        deploy::call(port, &["CLUSTER", "SETSLOT", &s, "NODE", &dst.id], ASK)?;
    }
    Ok(moved)
}
