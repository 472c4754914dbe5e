//! Finding every lock: SCAN each master for the prefix's keys and read them back as locks.

use std::collections::BTreeMap;

use dlock_runtime::inspect::{parse_key, redisson_kind, Kind, Layout, Part};
use dlock_runtime::redis::{self, Value};

use crate::deployment::Deployment;
use crate::snapshot::{self, LockView, REDISSON_MAX_FIELDS};

/// Keys asked for per SCAN call.
const PAGE: usize = 1_000;
/// SCAN calls per master at most (a billion keys): the loop ends even if a server never
/// returns cursor 0.
const MAX_PAGES: usize = 1_000_000;

/// The locks under `prefix` that have a holder, a queue or a waiting writer, sorted by name
/// and kind. Free locks leave only expiring latches behind and are not listed.
pub async fn find(dep: &mut Deployment, prefix: &str) -> Result<Vec<Layout>, String> {
    let pattern = format!("{}{{*", glob_escape(prefix));
    let mut found: BTreeMap<(String, Kind), bool> = BTreeMap::new();
    for master in &mut dep.masters {
        let mut cursor: u64 = 0;
        for page in 0.. {
            if page == MAX_PAGES {
                eprintln!(
                    "dlock: warning: stopped scanning {} after {MAX_PAGES} pages",
                    master.addr
                );
                break;
            }
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut master.conn)
                .await
                .map_err(|e| format!("SCAN on {}: {e}", master.addr))?;
            for key in keys {
                let Some(info) = parse_key(prefix, &key) else {
                    continue;
                };
                let live = matches!(
                    info.part,
                    Part::Holders | Part::Queue | Part::Readers | Part::WriterWaiting
                );
                *found.entry((info.name, info.kind)).or_default() |= live;
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(found
        .into_iter()
        .filter(|(_, live)| *live)
        .map(|((name, kind), _)| Layout::new(prefix, kind, &name))
        .collect())
}

/// The locks in Redisson's layout, held now, on every master, read (waiters not counted).
///
/// They have no prefix, so every hash of the keyspace is a candidate; to keep this from reading
/// a large production keyspace's data, each SCAN page (`TYPE hash`: the server filters) is
/// narrowed in steps, each one pipelined on the master's own connection: `PTTL` and `HLEN`
/// (a lock always has a lease, and one field per holding thread), then the field names only
/// (`HKEYS`) of hashes with an expiry and at most [`REDISSON_MAX_FIELDS`] fields, and only
/// hashes whose every field name has Redisson's shape are read whole.
pub async fn find_redisson(dep: &mut Deployment) -> Result<Vec<(Layout, LockView)>, String> {
    let mut found = Vec::new();
    for master in &mut dep.masters {
        let failed =
            |e: redis::RedisError| format!("looking for Redisson locks on {}: {e}", master.addr);
        let mut cursor: u64 = 0;
        for page in 0.. {
            if page == MAX_PAGES {
                eprintln!(
                    "dlock: warning: stopped scanning {} after {MAX_PAGES} pages",
                    master.addr
                );
                break;
            }
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .arg("TYPE")
                .arg("hash")
                .query_async(&mut master.conn)
                .await
                .map_err(failed)?;
            // A lock's name is text (the runtime takes `String`s); other keys are not locks.
            let keys: Vec<String> = keys
                .into_iter()
                .filter_map(|k| String::from_utf8(k).ok())
                .collect();
            let mut sizes = redis::pipe();
            // A key deleted or retyped since the SCAN answers with an error: not a lock.
            sizes.ignore_errors();
            for key in &keys {
                sizes.cmd("PTTL").arg(key).cmd("HLEN").arg(key);
            }
            let sizes: Vec<Value> = if keys.is_empty() {
                Vec::new()
            } else {
                sizes.query_async(&mut master.conn).await.map_err(failed)?
            };
            let small: Vec<&String> = keys
                .iter()
                .zip(sizes.chunks(2))
                .filter(|(_, pair)| match pair {
                    [Value::Int(pttl), Value::Int(len)] => {
                        *pttl > 0 && (1..=REDISSON_MAX_FIELDS as i64).contains(len)
                    }
                    _ => false,
                })
                .map(|(key, _)| key)
                .collect();
            let mut names = redis::pipe();
            names.ignore_errors();
            for key in &small {
                names.cmd("HKEYS").arg(*key);
            }
            let names: Vec<Value> = if small.is_empty() {
                Vec::new()
            } else {
                names.query_async(&mut master.conn).await.map_err(failed)?
            };
            for (key, fields) in small.into_iter().zip(names) {
                let Ok(fields) = redis::from_redis_value::<Vec<String>>(fields) else {
                    continue;
                };
                if !redisson_shaped(&fields) {
                    continue;
                }
                let layout = Layout::new("", Kind::Redisson, key);
                let (layout, view) = snapshot::read_redisson(&mut master.conn, &layout).await?;
                if view.held {
                    found.push((layout, view));
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    found.sort_by(|(a, _), (b, _)| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
    Ok(found)
}

/// Whether field names alone can be a Redisson lock's (values are not read yet: a `mode` is
/// taken as valid, every count as 1).
fn redisson_shaped(fields: &[String]) -> bool {
    let named: Vec<(String, String)> = fields
        .iter()
        .map(|f| {
            let value = if f == "mode" { "read" } else { "1" };
            (f.clone(), value.to_owned())
        })
        .collect();
    redisson_kind(&named).is_some()
}

/// `prefix` as a SCAN MATCH pattern matching itself only.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::glob_escape;

    #[test]
    fn glob_characters_in_the_prefix_match_literally() {
        assert_eq!(glob_escape("dlock:"), "dlock:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
