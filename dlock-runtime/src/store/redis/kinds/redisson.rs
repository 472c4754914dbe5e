//! Redisson's `RLock` on the wire: the same keys, fields, messages and semantics as Redisson
//! 3.24+ and 4.x, so a Java service using Redisson and a Rust service using dlock exclude each
//! other on one lock (see the `dlock::redisson` docs page).
//!
//! * the hash is the lock's name itself, no prefix, no hash tag added;
//! * its field is `<client uuid>:<thread id>`: the uuid is this client's id written as a
//!   36-character UUID, the "thread id" the number of the hold's call chain (every top-level
//!   acquire gets a new one; re-entries along the chain reuse it);
//! * release messages are Redisson's `0` on `redisson_lock__channel:{<name>}`, published with
//!   SPUBLISH on a cluster with sharded pub/sub, PUBLISH elsewhere;
//! * release latches are `redisson_unlock_latch:{<name>}:<request id>`;
//! * `RLock` writes nothing else, so neither does the plain kind: its tokens are the server's
//!   clock in µs at the grant, read and never stored. The fenced kind (`RFencedLock`) also
//!   INCRs the counter `redisson_lock_token:{<name>}` on every grant and never expires it, as
//!   Java's does, since Java holders count on from it;
//! * renewal is Redisson's: PEXPIRE while the field exists (dlock's plain renew scripts do
//!   exactly that, so they are reused).

use std::sync::LazyLock;
use std::time::Duration;

use super::seam::{flag, millis, Attempt, Claim, LockKind};
use crate::store::redis::backend::library;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::{Call, Script};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::REDISSON_LOCK_ACQUIRE));
/// Re-entries of `RLock` have a script of their own: the marker and the hard-lease flag they
/// need would be a key and three arguments more on every top-level acquire.
static REENTER: LazyLock<Script> = LazyLock::new(|| Script::of(&library::REDISSON_LOCK_REENTER));
static FENCED_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_FENCED_LOCK_ACQUIRE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::REDISSON_LOCK_RELEASE));
static UNDO_REENTRY: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_LOCK_UNDO_REENTRY));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_LOCK_FORCE_UNLOCK));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_RENEW));
static RENEW_NODE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_RENEW_NODE));

/// Redisson's default lease (`Config.lockWatchdogTimeout`), renewed every third of it.
pub(crate) const REDISSON_LEASE: Duration = Duration::from_secs(30);

/// How a lock's names are spelled in Redisson (`RedissonObject.prefixName`): `<prefix>:{<name>}`,
/// or `<prefix>:<name>` when the name has a `{` already (its own hash tag then rules).
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `RedissonObject.suffixName`: `{<name>}:<suffix>`, or `<name>:<suffix>` when the name has a
/// `{` already.
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The names Redisson gives the lock `name`, with `channel` its channel prefix
/// (`redisson_lock__channel` for `RLock`, `redisson_rwlock` for `RReadWriteLock`).
pub(crate) fn keys(name: &str, channel: &str) -> LockKeys {
    LockKeys {
        key: name.to_owned(),
        channel: prefix_name(channel, name),
        fence: prefix_name("redisson_lock_token", name),
        counter: prefix_name("redisson_lock_token", name),
        latch_prefix: format!("{}:", prefix_name("redisson_unlock_latch", name)),
    }
}

/// The 36-character UUID (`8-4-4-4-12`, version 4) this client stands for in Redisson's fields,
/// made from its 128-bit random id.
pub(crate) fn client_uuid(client_id: &str) -> String {
    let bits = u128::from_str_radix(client_id, 16).unwrap_or_else(|_| {
        // Not hex (never, for ids this crate makes): hash it, still 128 bits per client.
        let mut h: u128 = 0xcbf2_9ce4_8422_2325;
        for b in client_id.bytes() {
            h = (h ^ u128::from(b)).wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
        h
    });
    // Version 4, variant 10xx, as Java's UUID.randomUUID() writes them.
    let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The hash field of `hold`'s owner: `<uuid>:<chain number>`. Owner ids are
/// `<client id>:<sequence>` (see `Shared::unique_id`); the sequence plays Redisson's thread id.
pub(crate) fn field(hold: &Claim) -> String {
    let unique = crate::settings::holder::unique_part(&hold.owner);
    let chain = unique.rsplit(':').next().unwrap_or("0");
    format!("{}:{chain}", client_uuid(&hold.client_id))
}

/// The publish command of a deployment: SPUBLISH where Redisson's sharded-subscription mode
/// AUTO picks it (a cluster that answers `PUBSUB SHARDNUMSUB`), PUBLISH elsewhere.
pub(crate) fn publish(sharded: bool) -> &'static str {
    if sharded {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}

/// Redisson's reentrant lock: `RLock`, or `RFencedLock` (the same lock plus its token counter).
#[derive(Debug)]
pub(crate) struct RedissonLock {
    /// Whether this deployment publishes and subscribes on shard channels.
    pub(crate) sharded: bool,
    /// `RFencedLock`: every grant INCRs `redisson_lock_token:{<name>}`, and the token is its
    /// value. Off (`RLock`), nothing but the hash is written.
    pub(crate) fenced: bool,
}

impl LockKind for RedissonLock {
    /// Java reads these fields: they stay Redisson's `<uuid>:<thread id>`, with no label.
    fn labels_owner(&self) -> bool {
        false
    }

    fn id(&self) -> &'static str {
        // Distinct ids: a fenced handle must not re-enter a plain hold (its guard would carry
        // the plain hold's clock token, not a counter value), nor the other way round.
        if self.fenced {
            "redisson_fenced"
        } else {
            "redisson"
        }
    }

    fn keys(&self, _prefix: &str, name: &str) -> LockKeys {
        keys(name, "redisson_lock__channel")
    }

    fn default_lease(&self) -> Option<Duration> {
        Some(REDISSON_LEASE)
    }

    fn scales_tokens(&self) -> bool {
        false
    }

    fn sharded_wait(&self) -> bool {
        self.sharded
    }

    fn renews_per_node(&self) -> bool {
        true
    }

    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
        if !self.fenced {
            return match reentry {
                Some(marker) => {
                    let mut call = REENTER.key(&hold.keys.key);
                    call.key(marker)
                        .arg(millis(hold.lease))
                        .arg(field(hold))
                        .arg(millis(latch_ttl))
                        // A hard lease ends where the first acquire set it.
                        .arg(flag(hold.hard));
                    call
                }
                None => {
                    let mut call = ACQUIRE.key(&hold.keys.key);
                    call.arg(millis(hold.lease)).arg(field(hold));
                    call
                }
            };
        }
        let marker = reentry.map_or_else(
            || format!("{}reentry", hold.keys.latch_prefix),
            str::to_owned,
        );
        let mut call = FENCED_ACQUIRE.key(&hold.keys.key);
        call.key(&hold.keys.fence)
            .key(marker)
            .arg(millis(hold.lease))
            .arg(field(hold))
            .arg(millis(latch_ttl))
            .arg(flag(reentry.is_some()))
            .arg(flag(hold.hard));
        call
    }

    fn decode_acquire(&self, (count, x): (i64, i64)) -> Attempt {
        if count > 0 {
            Attempt::Acquired { count, token: x }
        } else {
            Attempt::Held { pttl: x }
        }
    }

    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static> {
        let mut call = RELEASE.key(&hold.keys.key);
        call.key(&hold.keys.channel)
            .key(latch)
            .arg(field(hold))
            .arg(if hold.hard { 0 } else { millis(hold.lease) })
            .arg(millis(latch_ttl))
            .arg(publish(self.sharded));
        call
    }

    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        let mut call = UNDO_REENTRY.key(&hold.keys.key);
        call.key(marker)
            .key(&hold.keys.channel)
            .arg(field(hold))
            .arg(publish(self.sharded));
        call
    }

    fn renew(&self, holds: &[&Claim], cross_slot: bool) -> Call<'static> {
        // Redisson's LockTask: PEXPIRE the hash while the owner's field exists.
        if cross_slot {
            let mut call = RENEW_NODE.key(&holds[0].keys.key);
            for h in holds {
                call.arg(&h.keys.key).arg(field(h)).arg(millis(h.lease));
            }
            return call;
        }
        let mut call = RENEW.prepare_invoke();
        for h in holds {
            call.key(&h.keys.key).arg(field(h)).arg(millis(h.lease));
        }
        call
    }

    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        let mut call = FORCE_UNLOCK.key(&keys.key);
        call.key(&keys.channel).arg(publish(self.sharded));
        call
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::backend::names::cluster_slot;

    #[test]
    fn names_are_redissons() {
        let k = keys("order:42", "redisson_lock__channel");
        assert_eq!(k.key, "order:42");
        assert_eq!(k.channel, "redisson_lock__channel:{order:42}");
        assert_eq!(k.fence, "redisson_lock_token:{order:42}");
        assert_eq!(k.latch_prefix, "redisson_unlock_latch:{order:42}:");
        // Every name of the lock lands in the hash's slot, so one script can touch them all.
        for name in [&k.channel, &k.fence, &k.latch_prefix] {
            assert_eq!(cluster_slot(name), cluster_slot(&k.key), "{name}");
        }
        let tagged = keys("a{b}c", "redisson_rwlock");
        assert_eq!(tagged.channel, "redisson_rwlock:a{b}c");
        assert_eq!(cluster_slot(&tagged.channel), cluster_slot("a{b}c"));
        assert_eq!(suffix_name("x", "u:1"), "{x}:u:1");
        assert_eq!(suffix_name("a{b}c", "u:1"), "a{b}c:u:1");
    }

    #[test]
    fn the_uuid_is_a_36_character_version_4_uuid_per_client() {
        let a = client_uuid(&format!("{:032x}", u128::MAX));
        let b = client_uuid(&format!("{:032x}", 7u128));
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert_ne!(a, b);
        assert_eq!(b, client_uuid(&format!("{:032x}", 7u128)));
    }
}
