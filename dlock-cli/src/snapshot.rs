//! One lock's state as Redis has it now: holders, lease, queue, permits, waiters.
//!
//! Every kind keeps its keys in one hash tag, so one pipeline on the node serving it reads a
//! lock whole. Deadlines of semaphore permits and of readers are Redis server time, so they
//! are judged against the server's `TIME` read in the same pipeline, never this machine's clock.

use std::collections::HashMap;

use dlock_runtime::inspect::{redisson_kind, Kind, Layout};
use dlock_runtime::redis::aio::ConnectionLike;
use dlock_runtime::redis::{self, Value};
use serde::Serialize;

use crate::deployment::{Deployment, Keyed};

/// What `list`, `show` and `watch` print, and `--json` gives scripts.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct LockView {
    pub name: String,
    /// `plain`, `rw`, `fair`, `semaphore`, or Redisson's layout: `redisson`,
    /// `redisson-fenced` (the same lock, its token counter present), `redisson-rw`.
    pub kind: &'static str,
    /// The main key (the holders).
    pub key: String,
    pub held: bool,
    /// Sorted by owner id.
    pub holders: Vec<Holder>,
    /// The main key's PTTL: `None` when it does not exist, -1 without expiry.
    pub pttl_ms: Option<i64>,
    /// Waiting *clients*, not tasks: those subscribed to be woken, on the lock's release
    /// channel, or for a fair lock on its queued owners' grant channels. The tasks of one
    /// client queue inside it and only the first subscribes, so a client counts once however
    /// many of its tasks wait; tasks waiting inside the holder's own client are not subscribed
    /// at all (the holder hands the lock to them directly) and cannot be seen from outside.
    /// `None` when not counted (`watch`) or not countable (PostgreSQL: LISTEN is per session).
    pub waiting_clients: Option<u64>,
    /// Read-write lock: `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Read-write lock: the owner of a refused writer that keeps new readers out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer_waiting: Option<String>,
    /// Fair lock: the queued owners, first in line first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<Vec<String>>,
    /// Semaphore: permits held now, of the count its clients use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<Permits>,
    /// Keys of this lock that hold another type than the kind keeps there (somebody else's
    /// data under the prefix): the lock is not read, and dlock's clients get `WrongType` on it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wrong_type: Vec<WrongType>,
}

/// A key of a lock that holds another Redis type than the kind writes there.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct WrongType {
    pub key: String,
    /// What `TYPE` answered (`string`, `list`, ...).
    pub holds: String,
    /// What the kind keeps there.
    pub expected: &'static str,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    /// `<client id>:<sequence>`: the client id is the holder's `LockClient::client_id`.
    /// Redisson's kinds: `<uuid>:<thread id>` (for a dlock client, the uuid is
    /// `dlock::inspect::redisson_uuid(client_id)`).
    pub owner: String,
    /// Hold count (re-entries); 1 for a permit.
    pub count: i64,
    /// Read-write lock: `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side: Option<&'static str>,
    /// Semaphore permits and readers: their own lease left, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// The holder's client name, as its owner id says (`LockClientBuilder::name`, `host:pid`
    /// by default); none for an owner id without labels (Redisson's kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The lock's label the owner id carries: the attribute's key template or function name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Holder {
    /// A holder with the labels its owner id carries read out (`dlock::inspect::Holder`).
    pub fn new(owner: String, count: i64, side: Option<&'static str>, ttl_ms: Option<i64>) -> Self {
        let parsed = dlock_runtime::inspect::Holder::parse(&owner);
        Holder {
            client: parsed.client,
            label: parsed.label,
            owner,
            count,
            side,
            ttl_ms,
        }
    }

    /// Who holds it, for people: `web-3:4411 order:{id}` (empty when the id carries no label).
    pub fn who(&self) -> String {
        match (&self.client, &self.label) {
            (Some(c), Some(l)) => format!("{c} {l}"),
            (Some(c), None) => c.clone(),
            _ => String::new(),
        }
    }
}

#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    pub used: u64,
    /// `None` if the count key is gone (no live permit).
    pub total: Option<u64>,
}

impl LockView {
    /// Anything to show: held, or somebody queued or claiming to be next.
    pub fn in_use(&self) -> bool {
        self.held
            || !self.wrong_type.is_empty()
            || self.queue.as_ref().is_some_and(|q| !q.is_empty())
            || self.writer_waiting.is_some()
    }

    /// The channels a waiter of this lock listens on.
    pub fn wait_channels(&self, layout: &Layout) -> Vec<String> {
        match &self.queue {
            Some(queue) => queue
                .iter()
                .filter_map(|o| layout.grant_channel(o))
                .collect(),
            None => vec![layout.channel.clone()],
        }
    }
}

impl LockView {
    /// Nothing known yet of the lock of `layout`.
    pub fn empty(layout: &Layout) -> LockView {
        LockView {
            name: layout.name.clone(),
            kind: layout.kind.as_str(),
            key: layout.key.clone(),
            held: false,
            holders: Vec::new(),
            pttl_ms: None,
            waiting_clients: None,
            mode: None,
            writer_waiting: None,
            queue: None,
            permits: None,
            wrong_type: Vec::new(),
        }
    }
}

/// Reads the lock of `layout` (waiters not counted: see [`count_waiting`]). A Redisson kind is
/// read as whichever Redisson kind its hash is: see [`read_redisson`].
pub async fn read(conn: &mut Keyed, layout: &Layout) -> Result<LockView, String> {
    if layout.kind.is_redisson() {
        return read_redisson(conn, layout).await.map(|(_, view)| view);
    }
    let failed =
        |e: &dyn std::fmt::Display| format!("reading {} lock `{}`: {e}", layout.kind, layout.name);
    let mut view = LockView::empty(layout);
    let mut pipe = redis::pipe();
    // One key of another type must not fail the whole read (nor a whole `list`): errors come
    // back per command, and a WRONGTYPE among them is looked into below.
    pipe.ignore_errors();
    match layout.kind {
        Kind::Semaphore => {
            pipe.cmd("ZRANGE")
                .arg(&layout.key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
            pipe.cmd("GET").arg(layout.permits.as_deref());
        }
        _ => {
            pipe.cmd("HGETALL").arg(&layout.key);
        }
    }
    pipe.cmd("PTTL").arg(&layout.key);
    pipe.cmd("TIME");
    if let Some(readers) = &layout.readers {
        pipe.cmd("ZRANGE")
            .arg(readers)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        pipe.cmd("GET").arg(layout.writer_waiting.as_deref());
    }
    if let Some(queue) = &layout.queue {
        pipe.cmd("ZRANGE").arg(queue).arg(0).arg(-1);
    }
    let replies: Vec<Value> = pipe.query_async(conn).await.map_err(|e| failed(&e))?;
    let mut wrong_type = false;
    for reply in &replies {
        if let Value::ServerError(e) = reply {
            if e.code() != "WRONGTYPE" {
                return Err(failed(&redis::RedisError::from(e.clone())));
            }
            wrong_type = true;
        }
    }
    if wrong_type {
        view.wrong_type = wrong_types(conn, layout).await.map_err(|e| failed(&e))?;
        // Every key has its kind's type again (the odd key was deleted meanwhile): no half-read
        // lock is shown.
        if view.wrong_type.is_empty() {
            return Err(failed(
                &"a key changed type while it was read; run the command again",
            ));
        }
        return Ok(view);
    }
    let mut replies = replies.into_iter();
    let mut next = || replies.next().unwrap_or(Value::Nil);
    let first = next();
    let permit_count: Option<String> = if layout.kind == Kind::Semaphore {
        from(next()).map_err(|e| failed(&e))?
    } else {
        None
    };
    let pttl: i64 = from(next()).map_err(|e| failed(&e))?;
    view.pttl_ms = (pttl != -2).then_some(pttl);
    let (secs, micros): (i64, i64) = from(next()).map_err(|e| failed(&e))?;
    let now_ms = secs * 1_000 + micros / 1_000;
    match layout.kind {
        Kind::Semaphore => {
            let entries: Vec<(String, f64)> = from(first).map_err(|e| failed(&e))?;
            view.holders = permit_holders(&entries, now_ms);
            view.permits = Some(Permits {
                used: view.holders.len() as u64,
                total: permit_count.and_then(|c| c.parse().ok()),
            });
        }
        Kind::ReadWrite => {
            let fields: Vec<(String, String)> = from(first).map_err(|e| failed(&e))?;
            let readers: Vec<(String, f64)> = from(next()).map_err(|e| failed(&e))?;
            let (mode, holders) = rw_holders(&fields, &readers, now_ms);
            (view.mode, view.holders) = (mode, holders);
            view.writer_waiting = from(next()).map_err(|e| failed(&e))?;
        }
        _ => {
            let fields: Vec<(String, String)> = from(first).map_err(|e| failed(&e))?;
            view.holders = count_holders(&fields);
        }
    }
    if layout.queue.is_some() {
        view.queue = Some(from(next()).map_err(|e| failed(&e))?);
    }
    view.held = !view.holders.is_empty();
    Ok(view)
}

/// The keys of `layout` whose type is not the one its kind keeps there (`none` is fine: a
/// key not written yet).
async fn wrong_types(conn: &mut Keyed, layout: &Layout) -> redis::RedisResult<Vec<WrongType>> {
    let main = if layout.kind == Kind::Semaphore {
        "zset"
    } else {
        "hash"
    };
    let keys: Vec<(&str, &'static str)> = [
        (Some(layout.key.as_str()), main),
        (layout.permits.as_deref(), "string"),
        (layout.readers.as_deref(), "zset"),
        (layout.writer_waiting.as_deref(), "string"),
        (layout.queue.as_deref(), "zset"),
    ]
    .into_iter()
    .filter_map(|(key, expected)| Some((key?, expected)))
    .collect();
    let mut pipe = redis::pipe();
    for (key, _) in &keys {
        pipe.cmd("TYPE").arg(*key);
    }
    let types: Vec<String> = pipe.query_async(conn).await?;
    Ok(keys
        .into_iter()
        .zip(types)
        .filter(|((_, expected), holds)| holds != "none" && holds != expected)
        .map(|((key, expected), holds)| WrongType {
            key: key.to_owned(),
            holds,
            expected,
        })
        .collect())
}

/// Fields a hash may have and still be looked at as a Redisson lock (one per holding thread,
/// plus `mode`): a larger hash is somebody's data, and is not read.
pub const REDISSON_MAX_FIELDS: usize = 64;

/// Reads the hash at `layout.key` as a lock in Redisson's layout: the layout of the Redisson
/// kind it is (a fenced lock when its token counter exists), and its view. A key of another
/// type, or a hash of another shape (or too large to be a lock), is flagged in `wrong_type`;
/// a missing key is a free lock.
pub async fn read_redisson(
    conn: &mut (impl ConnectionLike + Send),
    layout: &Layout,
) -> Result<(Layout, LockView), String> {
    let failed =
        |e: &dyn std::fmt::Display| format!("reading Redisson lock `{}`: {e}", layout.name);
    let counter = Layout::new("", Kind::Redisson, &layout.name).fence;
    let mut pipe = redis::pipe();
    // HLEN fails on another type: its error comes back with the rest.
    pipe.ignore_errors();
    pipe.cmd("TYPE").arg(&layout.key);
    pipe.cmd("HLEN").arg(&layout.key);
    pipe.cmd("EXISTS").arg(counter.as_deref());
    let replies: Vec<Value> = pipe.query_async(conn).await.map_err(|e| failed(&e))?;
    let mut replies = replies.into_iter();
    let mut next = || replies.next().unwrap_or(Value::Nil);
    let holds: String = from(next()).map_err(|e| failed(&e))?;
    let len = next();
    let fenced: bool = from(next()).map_err(|e| failed(&e))?;
    let view = LockView::empty(layout);
    let flag = |mut view: LockView, holds: String, expected| {
        view.wrong_type.push(WrongType {
            key: layout.key.clone(),
            holds,
            expected,
        });
        Ok((layout.clone(), view))
    };
    match holds.as_str() {
        "none" => return Ok((layout.clone(), view)),
        "hash" => {}
        _ => return flag(view, holds, "hash"),
    }
    let len: usize = from(len).map_err(|e| failed(&e))?;
    if len > REDISSON_MAX_FIELDS {
        return flag(view, format!("hash of {len} fields"), "Redisson lock hash");
    }
    let (fields, pttl): (Vec<(String, String)>, i64) = redis::pipe()
        .cmd("HGETALL")
        .arg(&layout.key)
        .cmd("PTTL")
        .arg(&layout.key)
        .query_async(conn)
        .await
        .map_err(|e| failed(&e))?;
    let Some(kind) = redisson_kind(&fields) else {
        // Freed between the two reads: a free lock, not somebody's data.
        if fields.is_empty() {
            return Ok((layout.clone(), view));
        }
        return flag(
            view,
            "hash of other fields".to_owned(),
            "Redisson lock hash",
        );
    };
    let layout = Layout::new("", kind, &layout.name);
    let mut view = LockView::empty(&layout);
    view.kind = match kind {
        Kind::Redisson if fenced => "redisson-fenced",
        other => other.as_str(),
    };
    view.pttl_ms = (pttl != -2).then_some(pttl);
    view.holders = redisson_holders(&fields, &mut view.mode);
    view.held = !view.holders.is_empty();
    Ok((layout, view))
}

/// A Redisson hash's holders (`<uuid>:<thread id>` -> count; `…:write` a writer) and its mode.
fn redisson_holders(fields: &[(String, String)], mode: &mut Option<String>) -> Vec<Holder> {
    let rw = fields.iter().any(|(f, _)| f == "mode");
    let mut holders: Vec<Holder> = fields
        .iter()
        .filter_map(|(field, value)| {
            if field == "mode" {
                *mode = Some(value.clone());
                return None;
            }
            let (owner, side) = match field.strip_suffix(":write") {
                Some(owner) => (owner, Some("write")),
                None => (field.as_str(), rw.then_some("read")),
            };
            Some(Holder::new(
                owner.to_owned(),
                value.parse().unwrap_or(0),
                side,
                None,
            ))
        })
        .collect();
    holders.sort();
    holders
}

fn from<T: redis::FromRedisValue>(v: Value) -> Result<T, impl std::fmt::Display> {
    redis::from_redis_value(v)
}

/// A plain or fair lock's hash: owner -> count.
fn count_holders(fields: &[(String, String)]) -> Vec<Holder> {
    let mut holders: Vec<Holder> = fields
        .iter()
        .map(|(owner, count)| Holder::new(owner.clone(), count.parse().unwrap_or(0), None, None))
        .collect();
    holders.sort();
    holders
}

/// A read-write lock's hash (`mode`, `w:<owner>`, `r:<owner>` -> count) and reader deadlines:
/// the mode and the holders. A reader past its deadline is gone (the next script prunes it).
fn rw_holders(
    fields: &[(String, String)],
    readers: &[(String, f64)],
    now_ms: i64,
) -> (Option<String>, Vec<Holder>) {
    let deadlines: HashMap<&str, f64> = readers.iter().map(|(o, d)| (o.as_str(), *d)).collect();
    let mut mode = None;
    let mut holders = Vec::new();
    for (field, value) in fields {
        let (side, owner) = match field.split_once(':') {
            Some(("w", owner)) => ("write", owner),
            Some(("r", owner)) => ("read", owner),
            _ => {
                if field == "mode" {
                    mode = Some(value.clone());
                }
                continue;
            }
        };
        let ttl_ms = (side == "read")
            .then(|| deadlines.get(owner).map(|d| *d as i64 - now_ms))
            .flatten();
        if ttl_ms.is_some_and(|t| t <= 0) {
            continue;
        }
        holders.push(Holder::new(
            owner.to_owned(),
            value.parse().unwrap_or(0),
            Some(side),
            ttl_ms,
        ));
    }
    holders.sort();
    (mode, holders)
}

/// A semaphore's zset (owner -> deadline, server ms): the permits still live.
fn permit_holders(entries: &[(String, f64)], now_ms: i64) -> Vec<Holder> {
    let mut holders: Vec<Holder> = entries
        .iter()
        .filter(|(_, deadline)| *deadline as i64 > now_ms)
        .map(|(owner, deadline)| {
            Holder::new(owner.clone(), 1, None, Some(*deadline as i64 - now_ms))
        })
        .collect();
    holders.sort();
    holders
}

/// Fills in `waiting_clients` for each view: PUBSUB NUMSUB of its channels on every node a waiter may
/// be subscribed on, added up (a subscription lives on one node only).
pub async fn count_waiting(
    dep: &mut Deployment,
    views: &mut [(Layout, LockView)],
) -> Result<(), String> {
    let channels: Vec<String> = views
        .iter()
        .flat_map(|(layout, view)| view.wait_channels(layout))
        .collect();
    let mut counts: HashMap<String, u64> = HashMap::new();
    for node in &mut dep.subscribers_on {
        // Bounded argument lists: a long listing costs a few round trips per node, not one
        // huge command.
        for chunk in channels.chunks(256) {
            if chunk.is_empty() {
                continue;
            }
            let reply: Vec<(String, u64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(chunk)
                .query_async(&mut node.conn)
                .await
                .map_err(|e| format!("PUBSUB NUMSUB on {}: {e}", node.addr))?;
            for (channel, n) in reply {
                *counts.entry(channel).or_default() += n;
            }
        }
    }
    for (layout, view) in views.iter_mut() {
        if dep.cluster && layout.kind.is_redisson() {
            // Not counted rather than a wrong 0: see `Deployment::cluster`.
            view.waiting_clients = None;
            continue;
        }
        let n = view
            .wait_channels(layout)
            .iter()
            .map(|c| counts.get(c).copied().unwrap_or(0))
            .sum();
        view.waiting_clients = Some(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_read_write_hash_reads_as_mode_and_sided_holders() {
        let fields = pairs(&[
            ("mode", "read"),
            ("r:b:1", "2"),
            ("r:a:1", "1"),
            ("r:c:9", "1"),
        ]);
        // c's lease ran out 5 ms ago: gone, although no script pruned it yet.
        let readers = vec![
            ("a:1".to_owned(), 2_000.0),
            ("b:1".into(), 1_500.0),
            ("c:9".into(), 995.0),
        ];
        let (mode, holders) = rw_holders(&fields, &readers, 1_000);
        assert_eq!(mode.as_deref(), Some("read"));
        let got: Vec<_> = holders
            .iter()
            .map(|h| (h.owner.as_str(), h.count, h.side, h.ttl_ms))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a:1", 1, Some("read"), Some(1_000)),
                ("b:1", 2, Some("read"), Some(500))
            ]
        );
        let (mode, holders) = rw_holders(&pairs(&[("mode", "write"), ("w:x:3", "1")]), &[], 0);
        assert_eq!(mode.as_deref(), Some("write"));
        assert_eq!((holders[0].side, holders[0].ttl_ms), (Some("write"), None));
    }

    #[test]
    fn only_live_permits_count() {
        let entries = vec![
            ("b:2".to_owned(), 31_000.0),
            ("a:1".into(), 900.0),
            ("c:3".into(), 5_000.0),
        ];
        let holders = permit_holders(&entries, 1_000);
        let owners: Vec<_> = holders
            .iter()
            .map(|h| (h.owner.as_str(), h.ttl_ms))
            .collect();
        assert_eq!(owners, vec![("b:2", Some(30_000)), ("c:3", Some(4_000))]);
    }

    #[test]
    fn plain_holders_sort_by_owner() {
        let holders = count_holders(&pairs(&[("z:1", "1"), ("a:7", "3")]));
        assert_eq!(holders[0].owner, "a:7");
        assert_eq!(holders[0].count, 3);
    }
}
