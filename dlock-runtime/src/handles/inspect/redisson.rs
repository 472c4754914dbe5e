//! Telling a hash in Redisson's lock layout apart from other data, for tools that look for
//! Redisson-kind locks without a prefix to go by.

use super::layout::Kind;
use crate::store::redis::kinds;

/// The UUID that stands for the client `client_id` ([`LockClient::client_id`]) in the fields
/// of its Redisson-kind locks: a holder field `<uuid>:<n>` with this uuid is one of that
/// client's holds.
///
/// [`LockClient::client_id`]: crate::LockClient::client_id
pub fn redisson_uuid(client_id: &str) -> String {
    kinds::client_uuid(client_id)
}

/// The kind of lock a hash with these fields (name -> value) is in Redisson's layout:
/// [`Kind::Redisson`] when every field is a holder `<uuid>:<thread id>` -> hold count,
/// [`Kind::RedissonReadWrite`] when it also has `mode` (`read` or `write`) and writers
/// `<uuid>:<thread id>:write`; `None` for any other hash (or an empty one). A field shape is
/// evidence, not proof: data written to look like a Redisson lock reads as one.
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// use dlock::inspect::{redisson_kind, Kind};
///
/// let holder = "6f1c9a3e-0b7d-4e2a-9c5f-1a2b3c4d5e6f:1".to_owned();
/// assert_eq!(redisson_kind(&[(holder.clone(), "2".into())]), Some(Kind::Redisson));
/// let rw = [("mode".to_owned(), "write".into()), (format!("{holder}:write"), "1".into())];
/// assert_eq!(redisson_kind(&rw), Some(Kind::RedissonReadWrite));
/// assert_eq!(redisson_kind(&[("user".into(), "ann".into())]), None);
/// ```
pub fn redisson_kind(fields: &[(String, String)]) -> Option<Kind> {
    let mut mode = None;
    let mut holders = 0;
    let mut writers = 0;
    for (field, value) in fields {
        if field == "mode" {
            if !matches!(value.as_str(), "read" | "write") {
                return None;
            }
            mode = Some(value.as_str());
            continue;
        }
        if !value.parse::<u64>().is_ok_and(|n| n > 0) {
            return None;
        }
        match field.strip_suffix(":write") {
            Some(owner) if is_holder(owner) => writers += 1,
            _ if is_holder(field) => holders += 1,
            _ => return None,
        }
    }
    match mode {
        // A writer field without a mode is not a state Redisson's scripts leave.
        None if holders > 0 && writers == 0 => Some(Kind::Redisson),
        Some(_) if holders + writers > 0 => Some(Kind::RedissonReadWrite),
        _ => None,
    }
}

/// `<uuid, 8-4-4-4-12 hex digits>:<thread id, decimal>`.
fn is_holder(field: &str) -> bool {
    let Some((uuid, thread)) = field.rsplit_once(':') else {
        return false;
    };
    let groups: Vec<&str> = uuid.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
        && !thread.is_empty()
        && thread.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    const U: &str = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";

    #[test]
    fn redisson_hashes_read_as_their_kind_and_other_hashes_do_not() {
        let h = format!("{U}:12");
        let w = format!("{U}:12:write");
        assert_eq!(redisson_kind(&fields(&[(&h, "1")])), Some(Kind::Redisson));
        assert_eq!(
            redisson_kind(&fields(&[("mode", "read"), (&h, "2")])),
            Some(Kind::RedissonReadWrite)
        );
        assert_eq!(
            redisson_kind(&fields(&[("mode", "write"), (&w, "1"), (&h, "1")])),
            Some(Kind::RedissonReadWrite)
        );
        for other in [
            fields(&[]),
            fields(&[("mode", "read")]),
            fields(&[("mode", "sideways"), (&h, "1")]),
            fields(&[(&h, "x")]),
            fields(&[(&h, "0")]),
            fields(&[(&w, "1")]),
            fields(&[(&h, "1"), ("name", "ann")]),
            fields(&[("0f1e2d3c-4b5a-4978-8695:1", "1")]),
            fields(&[(&format!("{U}:"), "1")]),
            fields(&[(&format!("{U}:1a"), "1")]),
            // dlock's own plain lock: `<32 hex client id>:<sequence>`.
            fields(&[("0123456789abcdef0123456789abcdef:1", "1")]),
        ] {
            assert_eq!(redisson_kind(&other), None, "{other:?}");
        }
    }
}
