//! Reading every lock of the schema at once, for tools (`dlock::inspect::stored_locks`): one
//! read-only statement, in autocommit, that takes no advisory lock, so it never waits for or
//! delays a lock operation. Rows whose lease ran out count as absent, as everywhere in the
//! store; leases left are judged by the server's clock, read once for the whole statement.
//!
//! Keys are read as stored (`names.rs`: NUL as `%00`, a long key as its hash), and a hashed
//! key's whole text comes from `long_names`. A fair lock's live queue places fill
//! `StoredLock::queue`, first in line first.

use std::collections::BTreeMap;

use tokio_postgres::types::Type;

use super::errors::PgError;
use super::link::PgLink;
use super::names::stored;
use crate::store::stored::{StoredHold, StoredLock};

/// The statement, for the schema `s` (quoted). `$1`: the keys to read, or NULL for all.
fn sql(s: &str) -> String {
    // `ms_until`'s arithmetic inline rather than the schema's function: this read then works
    // against a schema of any version that has these tables (5 on, for `plain_locks`; a
    // client migrates an older one at connect).
    let left = |col: &str| {
        format!("greatest(0, floor(extract(epoch FROM ({col} - now.t)) * 1000))::bigint")
    };
    let hold_left = left("h.expires_at");
    let plain_left = left("l.expires_at");
    let intent_left = left("i.expires_at");
    format!(
        "WITH now AS (SELECT clock_timestamp() AS t) \
         SELECT 'hold' AS part, h.key, h.owner, h.count::bigint, {hold_left}, n.full_key \
           FROM {s}.holds h CROSS JOIN now LEFT JOIN {s}.long_names n ON n.key = h.key \
           WHERE h.expires_at > now.t AND ($1::text[] IS NULL OR h.key = ANY ($1)) \
         UNION ALL \
         SELECT 'hold', l.key, l.owner, l.count::bigint, {plain_left}, n.full_key \
           FROM {s}.plain_locks l CROSS JOIN now LEFT JOIN {s}.long_names n ON n.key = l.key \
           WHERE l.owner IS NOT NULL AND l.expires_at > now.t \
             AND ($1::text[] IS NULL OR l.key = ANY ($1)) \
         UNION ALL \
         SELECT 'intent', i.key, i.owner, 1::bigint, {intent_left}, n.full_key \
           FROM {s}.intents i CROSS JOIN now LEFT JOIN {s}.long_names n ON n.key = i.key \
           WHERE i.expires_at > now.t AND ($1::text[] IS NULL OR i.key = ANY ($1)) \
         UNION ALL \
         SELECT 'queue', q.key, q.owner, q.arrived, NULL, n.full_key \
           FROM {s}.fair_queue q CROSS JOIN now LEFT JOIN {s}.long_names n ON n.key = q.key \
           WHERE q.keep_until > now.t AND ($1::text[] IS NULL OR q.key = ANY ($1)) \
         UNION ALL \
         SELECT 'permits', p.key, NULL, p.permits::bigint, NULL, NULL \
           FROM {s}.permits p \
           WHERE ($1::text[] IS NULL OR p.key = ANY ($1)) \
         ORDER BY 2, 1, 3"
    )
}

/// The locks of the schema with a live hold or a waiting writer, sorted by key: those at
/// `keys`, or all.
pub(crate) async fn stored_locks(
    link: &PgLink,
    keys: Option<&[String]>,
) -> Result<Vec<StoredLock>, PgError> {
    let sql = sql(link.schema().quoted());
    // The keys as the tables hold them.
    let keys: Option<Vec<String>> =
        keys.map(|keys| keys.iter().map(|k| stored(k).into_owned()).collect());
    let rows = link
        .query(
            || "reading the stored locks".to_owned(),
            &sql,
            &[(&keys.as_deref(), Type::TEXT_ARRAY)],
        )
        .await?;
    let mut locks: BTreeMap<String, StoredLock> = BTreeMap::new();
    let mut permits: BTreeMap<String, i64> = BTreeMap::new();
    // Queue places by key: (arrival in server µs, owner).
    let mut queued: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for row in &rows {
        let column = |i| {
            row.try_get::<_, Option<String>>(i)
                .map_err(|e| PgError::postgres("reading the stored locks", e))
        };
        let number = |i| {
            row.try_get::<_, Option<i64>>(i)
                .map_err(|e| PgError::postgres("reading the stored locks", e))
        };
        let (part, key, owner) = (column(0)?, column(1)?.unwrap_or_default(), column(2)?);
        let (count, left) = (number(3)?.unwrap_or(0), number(4)?.unwrap_or(0));
        let whole = column(5)?;
        match part.as_deref() {
            Some("permits") => {
                permits.insert(key, count);
            }
            Some("hold") => {
                let lock = locks
                    .entry(key.clone())
                    .or_insert_with(|| StoredLock::new(key));
                lock.whole_key = whole.or(lock.whole_key.take());
                lock.holders
                    .push(StoredHold::new(owner.unwrap_or_default(), count, left));
            }
            Some("queue") => {
                // A queue can outlive its lock's holders for a moment (a grant on its way).
                let lock = locks
                    .entry(key.clone())
                    .or_insert_with(|| StoredLock::new(key.clone()));
                lock.whole_key = whole.or(lock.whole_key.take());
                queued
                    .entry(key)
                    .or_default()
                    .push((count, owner.unwrap_or_default()));
            }
            Some("intent") => {
                let lock = locks
                    .entry(key.clone())
                    .or_insert_with(|| StoredLock::new(key));
                lock.whole_key = whole.or(lock.whole_key.take());
                lock.writer_waiting = Some(StoredHold::new(owner.unwrap_or_default(), 1, left));
            }
            _ => {}
        }
    }
    // A count row outlives its last permit until the next operation or sweep: only the
    // semaphores with a live holder are in use.
    for (key, n) in permits {
        if let Some(lock) = locks.get_mut(&key) {
            lock.permits = u32::try_from(n).ok();
        }
    }
    for (key, mut places) in queued {
        places.sort();
        if let Some(lock) = locks.get_mut(&key) {
            lock.queue = places.into_iter().map(|(_, owner)| owner).collect();
        }
    }
    Ok(locks.into_values().collect())
}
