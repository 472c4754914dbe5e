//! Finding every lock: SCAN each master for the prefix's keys and read them back as locks.

use std::collections::BTreeMap;

use dlock_runtime::inspect::{parse_key, Kind, Layout, Part};
use dlock_runtime::redis;

use crate::deployment::Deployment;

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
