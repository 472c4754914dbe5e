//! Where segments live (keys whose hash tags land in distinct cluster slots) and which order an
//! order id visits them in.

use crate::store::redis::backend::names::{cluster_slot, hash_tagged};

/// Redis Cluster has 16384 slots.
const SLOTS: u32 = 16384;

/// The Redis keys of one segment; both share the segment's hash tag, so each script touches
/// one slot.
#[derive(Debug, Clone)]
pub(crate) struct SegmentKeys {
    /// Hash `{left, initial}`.
    pub(crate) stock: String,
    /// Hash order id -> record (see lua/stock/take.lua).
    pub(crate) records: String,
}

/// `<prefix>stock:{<name>#<i>}` for each segment; the metadata key is `<prefix>stock:{<name>}:meta`.
pub(crate) fn segment_keys(prefix: &str, name: &str, segments: u32) -> Vec<SegmentKeys> {
    let prefix = format!("{prefix}stock:");
    (0..segments)
        .map(|i| {
            // The suffix has no character that needs escaping, so the tag is the escaped
            // name followed by the suffix, as before.
            let tag = spread(
                i,
                segments,
                |suffix| format!("{name}#{i}{suffix}"),
                |tag| cluster_slot(&hash_tagged("", tag)),
            );
            let stock = hash_tagged(&prefix, &tag);
            SegmentKeys {
                records: format!("{stock}:orders"),
                stock,
            }
        })
        .collect()
}

pub(crate) fn meta_key(prefix: &str, name: &str) -> String {
    format!("{}:meta", hash_tagged(&format!("{prefix}stock:"), name))
}

/// Picks the candidate `make("")`, `make(".1")`, `make(".2")`, ... whose slot falls in the
/// `i`-th of `n` equal slot ranges. Hash tags that merely differ (`#0`, `#1`, ...) can share a
/// slot by chance (about 1 in 140 for 16 segments); ranges make the slots distinct, and since
/// `redis-cli --cluster create` gives each master a contiguous range, they also spread the
/// segments evenly over the masters. Deterministic: every client derives the same keys.
pub(crate) fn spread(
    i: u32,
    n: u32,
    make: impl Fn(&str) -> String,
    slot: impl Fn(&str) -> u16,
) -> String {
    let (lo, hi) = (i * SLOTS / n, (i + 1) * SLOTS / n);
    // Expected tries: n. The bound only guards against an impossible endless loop.
    for k in 0..1_000_000u32 {
        let suffix = if k == 0 {
            String::new()
        } else {
            format!(".{k}")
        };
        let candidate = make(&suffix);
        if (lo..hi).contains(&u32::from(slot(&candidate))) {
            return candidate;
        }
    }
    make("")
}

/// The order in which an order id visits the segments: a home segment from the id's hash, then
/// a stride coprime with the segment count, so the path covers every segment once and buyers
/// whose home is drained spread over the others instead of all piling onto the next one.
#[derive(Debug)]
pub(crate) struct Routing {
    segments: u32,
    strides: Vec<u32>,
}

impl Routing {
    pub(crate) fn new(segments: u32) -> Self {
        let strides: Vec<u32> = (1..segments.max(2))
            .filter(|s| gcd(*s, segments) == 1)
            .collect();
        Routing { segments, strides }
    }

    pub(crate) fn home(&self, id: &str) -> u32 {
        (hash(id) % u64::from(self.segments)) as u32
    }

    /// Every segment once, home first. A pure function of the id: every attempt of one order,
    /// in any process, walks the same path (the idempotency of takes depends on it).
    pub(crate) fn path(&self, id: &str) -> Vec<u32> {
        let h = hash(id);
        let n = u64::from(self.segments);
        let home = h % n;
        let stride = u64::from(self.strides[((h >> 32) % self.strides.len() as u64) as usize]);
        (0..n).map(|j| ((home + j * stride) % n) as u32).collect()
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// FNV-1a then a splitmix64 finaliser: stable across processes, platforms and Rust versions
/// (std's hashers promise none of that), and well mixed in the low bits used for the home.
fn hash(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_visit_every_segment_once_home_first() {
        for n in [1, 2, 3, 16, 17, 256] {
            let r = Routing::new(n);
            for id in ["a", "order-1", "order-2", ""] {
                let mut p = r.path(id);
                assert_eq!(p[0], r.home(id));
                p.sort_unstable();
                assert_eq!(p, (0..n).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn segments_get_distinct_slots_in_their_range() {
        let keys = segment_keys("p:", "sku:{42}", 16);
        let slots: Vec<u16> = keys.iter().map(|k| cluster_slot(&k.stock)).collect();
        for (i, s) in slots.iter().enumerate() {
            assert_eq!(u32::from(*s) * 16 / SLOTS, i as u32, "{keys:?}");
        }
        for k in &keys {
            assert_eq!(cluster_slot(&k.stock), cluster_slot(&k.records));
        }
        assert!(keys[0].stock.starts_with("p:stock:{sku:%7B42%7D#0"));
    }
}
