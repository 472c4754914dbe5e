//! Lock keys -> the text PostgreSQL stores for them.
//!
//! A lock name may hold any text (`LockClient::lock`), and on Redis any text is a key. In
//! PostgreSQL two things are not: a `text` value cannot hold NUL, and a btree index entry
//! (every table here is keyed by a lock's key or an id built from it) has at most 2704 bytes.
//! So every key and id this store sends (a lock's key and fence, a release latch, a re-entry
//! marker) goes through [`stored`]:
//!
//! - NUL is written `%00`, the percent-escape `store/redis/backend/names.rs` uses for `%`, `{` and `}`.
//!   That stays injective: the name sits between the key's braces with every `%` of it escaped
//!   (`%25`), so `%00` there always stands for NUL; the prefix may not hold NUL on this store
//!   (`Settings::validate_postgres`), and the rest of a key is dlock's own fixed text.
//! - Text longer than [`LONGEST`] bytes after that is stored as `sha256:` and the 64 hex digits
//!   of its SHA-256. Such text never collides with one stored as it is: dlock's keys and ids
//!   all hold the lock name's `{`, a hash holds none; and two long keys collide only if SHA-256
//!   does. The whole text of a hashed lock key is kept in the `long_names` table
//!   (`sql/names.sql`), written with each acquire, so an inspector can show the name.
//!
//! Names that need neither (nearly all) are stored exactly as before: the same rows, no
//! allocation, no extra statement.

use std::borrow::Cow;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::store::redis::backend::names::escape;

/// The longest text stored as it is. Well below btree's 2704-byte limit for an index entry,
/// which `holds` shares between the key and an owner id, with room for PostgreSQL's own
/// overhead; far above the keys of names people type (ids, paths, composite keys), so hashing
/// stays the rare path.
pub(crate) const LONGEST: usize = 512;

/// What PostgreSQL stores for the key or id `id` (see the module docs).
pub(crate) fn stored(id: &str) -> Cow<'_, str> {
    let escaped = escape(id, &['\0']);
    if escaped.len() <= LONGEST {
        return escaped;
    }
    Cow::Owned(hashed(&escaped))
}

/// `(stored, whole)`: what [`stored`] gives, and when that is a hash, the text it hashed (what
/// `long_names` keeps for it).
pub(crate) fn stored_and_whole(id: &str) -> (Cow<'_, str>, Option<Cow<'_, str>>) {
    let escaped = escape(id, &['\0']);
    if escaped.len() <= LONGEST {
        return (escaped, None);
    }
    (Cow::Owned(hashed(&escaped)), Some(escaped))
}

/// `sha256:<64 lowercase hex digits>` of `text`. SHA-256 because two different names must
/// never share a lock: a hash an adversary (or a very large set of ids) can collide would let
/// two names exclude each other or, worse, pass for one another's holder; the standard library
/// has no collision-resistant hash, and `sha2` is already in the build with this feature
/// (tokio-postgres's SCRAM authentication uses it).
fn hashed(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest.iter() {
        // Writing into a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::backend::names::LockKeys;

    #[test]
    fn short_names_are_stored_as_they_are() {
        let keys = LockKeys::new("dlock:", "order:42", "");
        assert!(matches!(
            stored(&keys.key),
            Cow::Borrowed("dlock:{order:42}")
        ));
        assert_eq!(stored_and_whole(&keys.fence).1, None);
        let longest = "x".repeat(LONGEST);
        assert_eq!(stored(&longest), longest);
    }

    #[test]
    fn nul_is_escaped_injectively() {
        let key = |name: &str| LockKeys::new("dlock:", name, "").key;
        assert_eq!(stored(&key("a\0b")), "dlock:{a%00b}");
        // `%00` typed into a name is `%2500` in its key: it cannot meet an escaped NUL.
        assert_eq!(stored(&key("a%00b")), "dlock:{a%2500b}");
        assert_ne!(stored(&key("a\0")), stored(&key("a")));
        assert!(!stored(&key("\0\0")).contains('\0'));
    }

    #[test]
    fn long_text_is_hashed_and_kept_whole() {
        let long = format!("dlock:{{{}}}", "n".repeat(LONGEST));
        let (key, whole) = stored_and_whole(&long);
        assert_eq!(key.len(), 71);
        assert!(key.starts_with("sha256:") && !key.contains('{'), "{key}");
        assert_eq!(whole.as_deref(), Some(long.as_str()));
        assert_eq!(stored(&long), key);
        // Names sharing everything but their last byte, and NUL beside its escape.
        let other = format!("dlock:{{{}m}}", "n".repeat(LONGEST - 1));
        assert_ne!(stored(&other), key);
        let nul = format!("dlock:{{{}\0}}", "n".repeat(LONGEST));
        let (nul_key, nul_whole) = stored_and_whole(&nul);
        assert_eq!(
            nul_whole.as_deref(),
            Some(&*format!("dlock:{{{}%00}}", "n".repeat(LONGEST)))
        );
        assert_ne!(nul_key, key);
    }

    #[test]
    fn the_hash_is_sha256() {
        // FIPS 180-2's test vector for "abc".
        assert_eq!(
            hashed("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
