//! Lock names -> Redis keys and channels.
//!
//! Every key and channel of one lock is `<prefix>{<escaped name>}...`, so all of them share one
//! Redis Cluster hash tag and every script touches one slot. The name is percent-escaped (`%`,
//! `{`, `}`) before it goes between the braces: user text can then neither end the hash tag early
//! nor make two different names produce the same key.

use std::borrow::Cow;
use std::fmt;

/// Percent-escapes `%`, `{`, `}` and `:` in a value, so it can be pasted into a lock name
/// between `:` separators without colliding with another tuple of values.
///
/// `#[distributed_lock(key = "order:{id}")]` renders every placeholder through `KeyPart`, so
/// `client.lock(format!("order:{}", KeyPart(&id)))` takes the same lock as the macro does.
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// use dlock::KeyPart;
/// assert_eq!(format!("a:{}", KeyPart(&"b:c")), "a:b%3Ac");
/// assert_eq!(KeyPart(&7).to_string(), "7");
/// ```
pub struct KeyPart<'a, T: ?Sized>(pub &'a T);

impl<T: fmt::Display + ?Sized> fmt::Display for KeyPart<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Render once, then escape; values are short (ids), so one String is fine.
        let raw = self.0.to_string();
        f.write_str(&escape(&raw, &['%', '{', '}', ':']))
    }
}

pub(crate) fn escape<'a>(raw: &'a str, special: &[char]) -> Cow<'a, str> {
    if !raw.contains(special) {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 8);
    for c in raw.chars() {
        if special.contains(&c) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The Redis names belonging to one lock.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    /// The hash: owner id -> hold count; its PTTL is the lease.
    pub(crate) key: String,
    /// Release messages are published here.
    pub(crate) channel: String,
    /// A fencing counter of this lock's own, for stores that keep one per name (PostgreSQL's
    /// fence rows) and for Redisson's RFencedLock (`redisson_lock_token:{<name>}`).
    pub(crate) fence: String,
    /// The fencing counter the Redis scripts draw tokens from: for dlock's kinds the one of the
    /// key's cluster slot, shared by every lock in that slot (see [`slot_counter`]); for
    /// Redisson's, `fence`.
    pub(crate) counter: String,
    /// Prefix of the per-request release latches.
    pub(crate) latch_prefix: String,
}

/// `<prefix>{<name, percent-escaped>}`: the one way a name becomes a Redis key whose hash tag
/// is exactly that name. Every key of a lock or of a stock segment is this plus a suffix.
pub(crate) fn hash_tagged(prefix: &str, name: &str) -> String {
    format!("{prefix}{{{}}}", escape(name, &['%', '{', '}']))
}

impl LockKeys {
    /// The keys of the lock `name` of a kind whose keys end in `suffix` (see
    /// `LockKind::key_suffix`: empty for the plain lock).
    pub(crate) fn new(prefix: &str, name: &str, suffix: &str) -> Self {
        let key = hash_tagged(prefix, name) + suffix;
        LockKeys {
            channel: format!("{key}:chan"),
            fence: format!("{key}:fence"),
            counter: slot_counter(prefix, cluster_slot(&key)),
            latch_prefix: format!("{key}:latch:"),
            key,
        }
    }
}

/// `<prefix>fence:{<t>}`: the fencing counter of every lock in cluster slot `slot`, `t` being
/// the smallest decimal number whose hash tag falls in that slot (so every client, of any
/// version, names the same key).
///
/// Why one counter per slot and not one per lock name: a token only has to rise for each lock
/// name, and a counter that rises for all the names of a slot does. One per name was one more
/// key created by each first acquire of a name (a new key with an expiry costs the server
/// about a microsecond more than writing one that exists) and kept for a day: a service that
/// locks a million order ids a day kept a million counters. At most 16,384 of these exist.
/// No lock key can equal one: a lock's key has its `{` right after the prefix.
pub(crate) fn slot_counter(prefix: &str, slot: u16) -> String {
    format!("{prefix}fence:{{{}}}", SLOT_TAGS[usize::from(slot)])
}

/// For each slot, the smallest number whose decimal digits hash to it: 110,000 CRCs of short
/// strings, computed once per process (a few milliseconds).
static SLOT_TAGS: std::sync::LazyLock<Vec<u32>> = std::sync::LazyLock::new(|| {
    const UNSET: u32 = u32::MAX;
    let mut tags = vec![UNSET; 16384];
    let mut left = tags.len();
    let mut n: u32 = 0;
    // Bounded: every slot is reached at 109,757 (a test checks it).
    while left > 0 && n < 1 << 22 {
        let slot = usize::from(crc16_xmodem(n.to_string().as_bytes()) % 16384);
        if tags[slot] == UNSET {
            tags[slot] = n;
            left -= 1;
        }
        n += 1;
    }
    tags
});

/// The Redis Cluster slot of a key (CRC16/XMODEM of its hash tag, mod 16384), as `CLUSTER
/// KEYSLOT` computes it. Lets tests and users check that keys share, or do not share, a slot
/// without running a cluster.
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// assert_eq!(dlock::stock::cluster_slot("foo"), 12182);
/// assert_eq!(dlock::stock::cluster_slot("{user1000}.following"),
///            dlock::stock::cluster_slot("{user1000}.followers"));
/// ```
pub fn cluster_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            // An empty tag `{}` does not count: Redis hashes the whole key then.
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16_xmodem(hashed) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_cluster_spec_check_value() {
        // The Redis Cluster spec gives 0x31C3 for "123456789".
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
    }

    #[test]
    fn braces_in_names_cannot_escape_the_tag() {
        let keys = LockKeys::new("dlock:", "a}b{c", "");
        assert_eq!(keys.key, "dlock:{a%7Db%7Bc}");
        assert_eq!(cluster_slot(&keys.key), cluster_slot(&keys.channel));
        assert_eq!(cluster_slot(&keys.key), cluster_slot(&keys.fence));
        assert_eq!(cluster_slot(&keys.key), cluster_slot(&keys.counter));
    }

    #[test]
    fn every_slot_has_a_counter_in_that_slot() {
        let mut names = std::collections::HashSet::new();
        for slot in 0..16384u16 {
            let counter = slot_counter("dlock:", slot);
            assert_eq!(cluster_slot(&counter), slot, "{counter}");
            assert!(names.insert(counter));
        }
        // The names are part of the key layout: they must never change.
        assert_eq!(slot_counter("dlock:", 0), "dlock:fence:{3560}");
        assert_eq!(SLOT_TAGS.iter().max(), Some(&109_757));
    }

    #[test]
    fn escaping_is_injective_on_percent() {
        assert_ne!(
            LockKeys::new("p:", "{", "").key,
            LockKeys::new("p:", "%7B", "").key
        );
        assert_ne!(KeyPart(&"a:b").to_string(), KeyPart(&"a%3Ab").to_string());
    }
}
