//! Each kind's Redis keys ([`Layout`]) and how a key found by `SCAN` reads back as a lock
//! ([`parse_key`]); see the table in `dlock::inspect`'s docs.

use std::sync::Arc;

#[cfg(doc)]
use crate::handles::client::LockClient;
use crate::store::redis::backend::names::{self, LockKeys};
use crate::store::redis::kinds::{self, LockKind};

/// A kind of lock, as far as its keys go (the read and write sides of one read-write lock
/// share theirs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Kind {
    /// [`LockClient::lock`] (and the locks of a multi-lock).
    Plain,
    /// [`LockClient::read_write_lock`].
    ReadWrite,
    /// [`LockClient::fair_lock`].
    Fair,
    /// [`LockClient::semaphore`].
    Semaphore,
    /// [`LockClient::redisson_lock`] and [`LockClient::redisson_fenced_lock`] (Redisson's
    /// `RLock` and `RFencedLock`: one lock, the fenced one also counts its grants).
    Redisson,
    /// [`LockClient::redisson_read_write_lock`] (Redisson's `RReadWriteLock`).
    RedissonReadWrite,
}

impl Kind {
    /// Every kind keyed under the prefix, in the order tools list them.
    pub const ALL: [Kind; 4] = [Kind::Plain, Kind::ReadWrite, Kind::Fair, Kind::Semaphore];

    /// The kinds in Redisson's layout (no prefix: see the module docs).
    pub const REDISSON: [Kind; 2] = [Kind::Redisson, Kind::RedissonReadWrite];

    /// A short stable name: `plain`, `rw`, `fair`, `semaphore`, `redisson`, `redisson-rw`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::ReadWrite => "rw",
            Kind::Fair => "fair",
            Kind::Semaphore => "semaphore",
            Kind::Redisson => "redisson",
            Kind::RedissonReadWrite => "redisson-rw",
        }
    }

    /// Whether the kind writes Redisson's layout (the lock's name is its key, no prefix).
    pub fn is_redisson(self) -> bool {
        matches!(self, Kind::Redisson | Kind::RedissonReadWrite)
    }

    /// The runtime's own description of the kind's keys, as a client with `sharded` pub/sub
    /// uses it (only the Redisson kinds care); for a force unlock, the sides it takes in turn.
    /// The write side stands for both sides of dlock's read-write lock (its force unlock
    /// deletes both); Redisson's deletes one side only in its own mode, so both are tried. The
    /// semaphore's permit count plays no part in its keys.
    pub(super) fn seams(self, sharded: bool) -> Vec<Arc<dyn LockKind>> {
        match self {
            Kind::Plain => vec![Arc::new(kinds::Plain)],
            Kind::ReadWrite => vec![Arc::new(kinds::Write)],
            Kind::Fair => vec![Arc::new(kinds::Fair)],
            Kind::Semaphore => vec![Arc::new(kinds::Semaphore { permits: 1 })],
            // RLock's and RFencedLock's force unlocks are one script: the same hash.
            Kind::Redisson => vec![Arc::new(kinds::RedissonLock {
                sharded,
                fenced: false,
            })],
            Kind::RedissonReadWrite => vec![
                Arc::new(kinds::RedissonWrite { sharded }),
                Arc::new(kinds::RedissonRead { sharded }),
            ],
        }
    }

    fn seam(self) -> Arc<dyn LockKind> {
        self.seams(false).swap_remove(0)
    }

    /// What follows the hash tag in the kind's main key (`:rw`; empty for the plain lock and
    /// for Redisson's kinds, whose key is the bare name).
    pub fn suffix(self) -> &'static str {
        self.seam().key_suffix()
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which of a lock's keys a key is (see the table in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Part {
    /// The main key: the holders.
    Holders,
    /// A release latch or re-entry marker (short-lived).
    Latch,
    /// A fair lock's queue.
    Queue,
    /// A fair lock's keep-place deadlines.
    KeepAlive,
    /// A read-write lock's reader leases.
    Readers,
    /// A read-write lock's waiting-writer marker.
    WriterWaiting,
    /// A semaphore's permit count.
    Permits,
}

/// The Redis names of one lock of one kind. Fields a kind does not have are `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Layout {
    /// The kind.
    pub kind: Kind,
    /// The lock's name, as users give it.
    pub name: String,
    /// The main key (the holders).
    pub key: String,
    /// Where releases are published (a fair lock's waiters listen on [`Layout::grant_channel`]
    /// instead).
    pub channel: String,
    /// The fencing counter (no semaphore has one): the one of the lock's cluster slot,
    /// `<prefix>fence:{<t>}`, shared by every lock whose key is in that slot. It belongs to no
    /// single lock, so [`parse_key`] reads it as foreign. For [`Kind::Redisson`],
    /// `RFencedLock`'s own counter `redisson_lock_token:{<name>}` (present once a fenced lock
    /// of that name was granted); `None` for [`Kind::RedissonReadWrite`].
    pub fence: Option<String>,
    /// A fair lock's queue.
    pub queue: Option<String>,
    /// A fair lock's keep-place deadlines.
    pub keep_alive: Option<String>,
    /// A read-write lock's reader leases.
    pub readers: Option<String>,
    /// A read-write lock's waiting-writer marker.
    pub writer_waiting: Option<String>,
    /// A semaphore's permit count.
    pub permits: Option<String>,
}

impl Layout {
    /// The keys of the lock `name` of `kind` under the key `prefix` (the client's
    /// `key_prefix`, [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX) unless changed).
    /// The Redisson kinds ignore `prefix`: their key is `name`.
    pub fn new(prefix: &str, kind: Kind, name: &str) -> Self {
        if kind.is_redisson() {
            let keys = kind.seam().keys(prefix, name);
            return Layout {
                kind,
                name: name.to_owned(),
                // RFencedLock's token counter; RReadWriteLock keeps none.
                fence: (kind == Kind::Redisson).then_some(keys.counter),
                queue: None,
                keep_alive: None,
                readers: None,
                writer_waiting: None,
                permits: None,
                channel: keys.channel,
                key: keys.key,
            };
        }
        let keys = LockKeys::new(prefix, name, kind.suffix());
        let beside = |on: bool, suffix: &str| on.then(|| format!("{}{suffix}", keys.key));
        Layout {
            kind,
            name: name.to_owned(),
            fence: (kind != Kind::Semaphore).then(|| keys.counter.clone()),
            queue: beside(kind == Kind::Fair, ":queue"),
            keep_alive: beside(kind == Kind::Fair, ":alive"),
            readers: beside(kind == Kind::ReadWrite, ":readers"),
            writer_waiting: beside(kind == Kind::ReadWrite, ":wwait"),
            permits: beside(kind == Kind::Semaphore, ":permits"),
            channel: keys.channel,
            key: keys.key,
        }
    }

    /// The channel a queued fair-lock waiter `owner` listens on (its grant); `None` for other
    /// kinds.
    pub fn grant_channel(&self, owner: &str) -> Option<String> {
        (self.kind == Kind::Fair).then(|| format!("{}:grant:{owner}", self.key))
    }
}

/// The fencing counter a lock whose main key is `key` draws its tokens from, under `prefix`:
/// the one of `key`'s cluster slot (the same as [`Layout::fence`] for that lock).
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// use dlock::inspect::{fence_counter, Kind, Layout};
///
/// let layout = Layout::new("dlock:", Kind::Plain, "order:42");
/// assert_eq!(fence_counter("dlock:", &layout.key), layout.fence.unwrap());
/// ```
pub fn fence_counter(prefix: &str, key: &str) -> String {
    names::slot_counter(prefix, names::cluster_slot(key))
}

/// A Redis key read back as a part of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyInfo {
    /// The lock's name, unescaped.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Which of its keys this is.
    pub part: Part,
}

/// Reads `key` back as a part of a lock under `prefix`; `None` for any key dlock's locks do
/// not write (a segmented stock's keys, a fence store's, somebody else's).
pub fn parse_key(prefix: &str, key: &str) -> Option<KeyInfo> {
    let tagged = key.strip_prefix(prefix)?.strip_prefix('{')?;
    // Names escape `}`, so the first one closes the tag.
    let (escaped, rest) = tagged.split_once('}')?;
    let name = unescape(escaped)?;
    if name.is_empty() {
        return None;
    }
    let (kind, rest) = [Kind::ReadWrite, Kind::Fair, Kind::Semaphore]
        .into_iter()
        .find_map(|k| {
            let after = rest.strip_prefix(k.suffix())?;
            (after.is_empty() || after.starts_with(':')).then_some((k, after))
        })
        .unwrap_or((Kind::Plain, rest));
    let part = match (kind, rest) {
        (_, "") => Part::Holders,
        (_, latch) if latch.starts_with(":latch:") => Part::Latch,
        (Kind::Fair, ":queue") => Part::Queue,
        (Kind::Fair, ":alive") => Part::KeepAlive,
        (Kind::ReadWrite, ":readers") => Part::Readers,
        (Kind::ReadWrite, ":wwait") => Part::WriterWaiting,
        (Kind::Semaphore, ":permits") => Part::Permits,
        _ => return None,
    };
    Some(KeyInfo { name, kind, part })
}

/// The inverse of the escaping in `store/redis/backend/names.rs` (`%`, `{`, `}` as `%XX`), and of the
/// PostgreSQL store's `%00` for NUL (a Redis key never has it: its `%` are escaped); `None`
/// for text that escaping cannot have produced, so a foreign key is not mistaken for a lock.
fn unescape(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find(['%', '{']) {
        if rest.as_bytes()[at] == b'{' {
            return None;
        }
        out.push_str(&rest[..at]);
        let c = match rest.get(at + 1..at + 3)? {
            "25" => '%',
            "00" => '\0',
            "7B" => '{',
            "7D" => '}',
            _ => return None,
        };
        out.push(c);
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_every_kind_reads_back_as_its_lock() {
        for kind in Kind::ALL {
            for name in ["a", "order:{7}", "50%", "x}y", "héllo:wörld", "a\0b"] {
                let l = Layout::new("dlock:", kind, name);
                let parts = [
                    (Some(l.key.clone()), Part::Holders),
                    (Some(format!("{}:latch:abc", l.key)), Part::Latch),
                    (l.queue.clone(), Part::Queue),
                    (l.keep_alive.clone(), Part::KeepAlive),
                    (l.readers.clone(), Part::Readers),
                    (l.writer_waiting.clone(), Part::WriterWaiting),
                    (l.permits.clone(), Part::Permits),
                ];
                for (key, part) in parts {
                    let Some(key) = key else { continue };
                    let info = parse_key("dlock:", &key).expect(&key);
                    assert_eq!(
                        (info.name.as_str(), info.kind, info.part),
                        (name, kind, part)
                    );
                }
            }
        }
    }

    #[test]
    fn the_layout_matches_the_runtime_keys() {
        // The suffixes the kinds' scripts are given (store/redis/kinds/*.rs).
        let l = Layout::new("p:", Kind::ReadWrite, "n");
        assert_eq!(l.key, "p:{n}:rw");
        assert_eq!(l.channel, "p:{n}:rw:chan");
        assert_eq!(l.readers.as_deref(), Some("p:{n}:rw:readers"));
        let s = Layout::new("p:", Kind::Semaphore, "n");
        assert_eq!(s.key, "p:{n}:sem");
        assert_eq!(s.permits.as_deref(), Some("p:{n}:sem:permits"));
        assert_eq!(s.fence, None);
        assert_eq!(
            Layout::new("p:", Kind::Plain, "n").fence,
            Layout::new("p:", Kind::Fair, "n").fence
        );
        let f = Layout::new("p:", Kind::Fair, "n");
        assert_eq!(
            f.grant_channel("o:1").as_deref(),
            Some("p:{n}:fair:grant:o:1")
        );
        assert_eq!(Layout::new("p:", Kind::Plain, "n").key, "p:{n}");
        // The PostgreSQL store writes a name's NUL as `%00`: read back as the same lock.
        let info = parse_key("p:", "p:{a%00b}:rw").unwrap();
        assert_eq!((info.name.as_str(), info.kind), ("a\0b", Kind::ReadWrite));
        // Redisson's kinds: the bare name, Redisson's channels and RFencedLock's counter.
        let r = Layout::new("p:", Kind::Redisson, "n");
        assert_eq!(
            (r.key.as_str(), r.channel.as_str(), r.fence.as_deref()),
            (
                "n",
                "redisson_lock__channel:{n}",
                Some("redisson_lock_token:{n}")
            )
        );
        let rw = Layout::new("p:", Kind::RedissonReadWrite, "n");
        assert_eq!(
            (rw.key.as_str(), rw.channel.as_str()),
            ("n", "redisson_rwlock:{n}")
        );
        assert_eq!(rw.fence, None);
    }

    #[test]
    fn foreign_keys_are_not_locks() {
        for key in [
            "dlock:stock:{item#0}",
            "dlock:{item}:meta",
            "dlock:{}",
            "dlock:{a%zz}",
            "dlock:{a%7}",
            "dlock:{a{b}",
            "dlock:{a}:sem:fence",
            "dlock:{a}:fence",
            "dlock:fence:{3560}",
            "dlock:{a}:chan",
            "other:{a}",
            "dlock:a",
            "dlock:{a",
        ] {
            assert_eq!(parse_key("dlock:", key), None, "{key}");
        }
    }
}
