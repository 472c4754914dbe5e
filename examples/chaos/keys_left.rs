//! The end-of-run state check: every key the run left in Redis (the filler aside), or every row
//! of dlock's tables in PostgreSQL (`pg.rs` names them as keys), grouped by kind (its name with
//! the lock name and ids taken out), and what may stay:
//!
//! * **no key without an expiry**: a counter or marker that never expires piles up forever
//!   (checked whether or not every client exited cleanly);
//! * **nothing stranded** (only after every client exited cleanly): what remains is fencing
//!   counters and release latches, which expire on their own; a lock hash, a queue entry, a
//!   permit or a reader's lease is a hold that nobody has.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checker::Violation;
use crate::deploy::{self, Deployment, FILLER_PREFIX};
use crate::pg;

/// Short-lived keys (a waiting writer's marker, release latches) are given this long to expire
/// before what is left counts as stranded.
const SETTLE: Duration = Duration::from_secs(3);

/// One key found at the end, with its type and PTTL (-1: no expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLeft {
    pub key: String,
    pub ty: String,
    pub pttl: i64,
    pub port: u16,
}

/// What the end of the run found.
#[derive(Debug, Clone, Default)]
pub struct Ending {
    pub keys: Vec<KeyLeft>,
    /// Clients that did not exit cleanly when told to stop (with why).
    pub unclean: Vec<String>,
}

/// A key's kind: the hash-tagged part becomes `{*}`, and every `:`-separated part that is a
/// number or an id (hex digits and dashes) becomes `#`. `dlock:{plain%3A0}:latch:9f3c` ->
/// `dlock:{*}:latch:#`; Redisson's lock hash `rlock:0` -> `rlock:#`.
pub fn pattern(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut rest = key;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => {
                out.push_str("{*}");
                rest = &rest[open + close + 1..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.split(':')
        .map(|part| {
            let id = !part.is_empty()
                && part.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
                && part.chars().any(|c| c.is_ascii_digit());
            if id {
                "#"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// Kept on purpose, expiring on their own: fencing counters and release latches (and
/// PostgreSQL's rows that count as absent already: see `pg.rs`).
fn kept_on_purpose(key: &str) -> bool {
    pg::kept_on_purpose(key)
        || key.ends_with(":fence")
        || key.starts_with(&format!("{}fence:{{", dlock::DEFAULT_PREFIX))
        || key.contains(":latch:")
        || key.starts_with("redisson_lock_token:")
        || key.starts_with("redisson_unlock_latch:")
}

/// Per kind: (keys, keys without expiry, longest PTTL in ms).
pub fn by_kind(keys: &[KeyLeft]) -> BTreeMap<String, (usize, usize, i64)> {
    let mut kinds: BTreeMap<String, (usize, usize, i64)> = BTreeMap::new();
    for k in keys {
        let row = kinds.entry(pattern(&k.key)).or_default();
        row.0 += 1;
        row.1 += usize::from(k.pttl == -1);
        row.2 = row.2.max(k.pttl);
    }
    kinds
}

/// The violations the keys show, one per kind and property.
pub fn findings(ending: &Ending) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut endless: BTreeMap<String, Vec<&KeyLeft>> = BTreeMap::new();
    let mut stranded: BTreeMap<String, Vec<&KeyLeft>> = BTreeMap::new();
    for k in &ending.keys {
        if k.pttl == -1 {
            endless.entry(pattern(&k.key)).or_default().push(k);
        } else if !kept_on_purpose(&k.key) && ending.unclean.is_empty() {
            stranded.entry(pattern(&k.key)).or_default().push(k);
        }
    }
    let examples = |keys: &[&KeyLeft]| {
        keys.iter()
            .take(3)
            .map(|k| format!("{} ({}, pttl {} ms, port {})", k.key, k.ty, k.pttl, k.port))
            .collect::<Vec<_>>()
            .join("; ")
    };
    for (kind, keys) in &endless {
        out.push(Violation {
            property: "keys without expiry",
            text: format!(
                "{kind}: {} key(s) that never expire, e.g. {}",
                keys.len(),
                examples(keys)
            ),
            at: Vec::new(),
        });
    }
    for (kind, keys) in &stranded {
        out.push(Violation {
            property: "nothing stranded",
            text: format!(
                "{kind}: {} key(s) remained after every client exited cleanly, e.g. {}",
                keys.len(),
                examples(keys)
            ),
            at: Vec::new(),
        });
    }
    for why in &ending.unclean {
        out.push(Violation {
            property: "clean exit",
            text: why.clone(),
            at: Vec::new(),
        });
    }
    out
}

/// Every key on every node that takes writes, the filler aside; when something looks stranded,
/// looked at again after [`SETTLE`] so short-lived markers can expire first.
pub fn scan(deployment: &Deployment, clean: bool, notes: &mut Vec<String>) -> Vec<KeyLeft> {
    let mut keys = scan_once(deployment, notes);
    let suspect = keys
        .iter()
        .any(|k| k.pttl == -1 || (clean && !kept_on_purpose(&k.key)));
    if suspect {
        std::thread::sleep(SETTLE);
        keys = scan_once(deployment, notes);
    }
    keys
}

fn scan_once(deployment: &Deployment, notes: &mut Vec<String>) -> Vec<KeyLeft> {
    if let Deployment::Zookeeper(zk) = deployment {
        return zk.nodes_left().unwrap_or_else(|e| {
            notes.push(format!("reading ZooKeeper's ephemeral nodes failed: {e}"));
            Vec::new()
        });
    }
    if let Deployment::Postgres(pg) = deployment {
        return pg.rows_left().unwrap_or_else(|e| {
            notes.push(format!("reading dlock's tables failed: {e}"));
            Vec::new()
        });
    }
    let ask = Duration::from_secs(2);
    let mut keys = Vec::new();
    for port in deployment.masters().unwrap_or_default() {
        let found = match deploy::scan(port, "*") {
            Ok(found) => found,
            Err(e) => {
                notes.push(format!("SCAN of {port} failed: {e}"));
                continue;
            }
        };
        for key in found.into_iter().filter(|k| !k.starts_with(FILLER_PREFIX)) {
            let ty = deploy::call(port, &["TYPE", &key], ask).map(deploy::text);
            let pttl = deploy::call(port, &["PTTL", &key], ask).map(deploy::text);
            let pttl: i64 = pttl.ok().and_then(|p| p.parse().ok()).unwrap_or(-2);
            // Gone between the SCAN and the PTTL: it expired.
            if pttl == -2 {
                continue;
            }
            keys.push(KeyLeft {
                key,
                ty: ty.unwrap_or_default(),
                pttl,
                port,
            });
        }
    }
    keys
}
