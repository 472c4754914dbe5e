//! What is measured: each of dlock's kinds through its real API, and the peers' commands sent
//! with raw redis-rs: Redisson's own RLock scripts (written here from their documented
//! behaviour) and rslock's SET NX PX with a compare-and-delete script.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use dlock::redis::{self, aio::ConnectionLike, Script, Value};
use dlock::{LockClient, LockGuard, MultiGuard, Permit};

use crate::ceiling::Load;
use crate::support::Db;

/// The watchdog's lease for dlock's holds: long enough that no renewal (which is a script
/// call too) lands inside a measured stretch.
const TTL: Duration = Duration::from_secs(600);

/// Lease of the peers' holds, ms.
const PEER_LEASE_MS: u64 = 600_000;

/// How long a Redisson unlock latch lives, ms (Redisson keeps it for its command timeout).
const LATCH_MS: u64 = 5_000;

/// Redisson's RLock acquire (`tryLockInner`) as its documentation describes it: the lock is a
/// hash of owner -> hold count whose PTTL is the lease. Granted when the hash is missing or
/// already counts this owner: one more hold, the lease set again; answers nil. Otherwise the
/// holder's PTTL.
/// KEYS[1] lock hash; ARGV[1] lease ms, ARGV[2] owner field (`<uuid>:<thread id>`).
const REDISSON_ACQUIRE: &str = r"
local mine = redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1
if not mine then
  return redis.call('PTTL', KEYS[1])
end
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return nil
";

/// Redisson's RFencedLock acquire as its documentation describes it: RLock's grant, and on
/// every grant (re-entries too) its token counter goes up by one (INCR, never expired); the
/// answer carries the token. KEYS[1] lock hash, KEYS[2] token counter; ARGV as RLock's.
const REDISSON_FENCED_ACQUIRE: &str = r"
local mine = redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1
if not mine then
  return {redis.call('PTTL', KEYS[1]), false}
end
local token = redis.call('INCR', KEYS[2])
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {false, token}
";

/// Redisson's RLock release (`unlockInner`, 3.24+: with the unlock latch that answers a retried
/// request id as it was answered the first time). A hold fewer; the last one deletes the hash
/// and publishes the unlock message, a remaining one sets the lease again. The latch stores 1
/// (freed) or 0 (holds remain).
/// KEYS[1] lock hash, KEYS[2] channel, KEYS[3] latch of this request id; ARGV[1] owner field,
/// ARGV[2] lease ms, ARGV[3] latch lifetime ms.
const REDISSON_RELEASE: &str = r"
local answered = redis.call('GET', KEYS[3])
if answered then
  return tonumber(answered)
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return nil
end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[3])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], 0)
redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
return 1
";

/// rslock's release: delete the key only while it still holds this owner's value.
const RSLOCK_RELEASE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('DEL', KEYS[1])
";

// Hashed once: each call sends EVALSHA of the hash.
static REDISSON_ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REDISSON_ACQUIRE));
static REDISSON_FENCED_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDISSON_FENCED_ACQUIRE));
static REDISSON_RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REDISSON_RELEASE));
static RSLOCK_RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RSLOCK_RELEASE));

/// The sources of the raw scripts, for `SCRIPT LOAD` on every node before anything is
/// measured (a pipelined EVALSHA does not fall back to EVAL).
pub const RAW_SCRIPTS: [&str; 4] = [
    REDISSON_ACQUIRE,
    REDISSON_FENCED_ACQUIRE,
    REDISSON_RELEASE,
    RSLOCK_RELEASE,
];

/// dlock's kinds, each through its public constructor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    RwRead,
    RwWrite,
    Fair,
    /// One permit, so it excludes like a lock.
    Semaphore,
    /// `multi_lock` of two plain locks.
    Multi2,
    RedissonLock,
    RedissonFencedLock,
    RedissonRead,
    RedissonWrite,
}

/// One row of the table.
pub enum Subject {
    Dlock {
        client: LockClient,
        kind: Kind,
    },
    /// Redisson's own scripts: RLock's, or with `fenced` RFencedLock's acquire (RLock's release).
    RedissonScripts {
        db: Db,
        ids: Ids,
        fenced: bool,
    },
    Rslock {
        db: Db,
        ids: Ids,
    },
    /// dlock's own scripts for a top-level acquire and a release, sent as the peers' are (one
    /// EVALSHA each on a shared connection): beside the API's row of the same kind, this
    /// separates what the scripts cost from how the client's calls reach the server.
    DlockRaw {
        db: Db,
        ids: Ids,
        load: Load,
    },
}

/// Fresh owner and request ids for the raw peers.
pub struct Ids {
    run: String,
    next: AtomicU64,
}

impl Ids {
    pub fn new(run: &str) -> Ids {
        Ids {
            run: run.to_owned(),
            next: AtomicU64::new(0),
        }
    }

    fn fresh(&self) -> String {
        format!("{}:{}", self.run, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// One hold of any row.
pub enum Held {
    Lock {
        name: String,
        guard: LockGuard,
    },
    Permit(Permit),
    Multi {
        names: [String; 2],
        guard: MultiGuard,
    },
    Raw {
        key: String,
        owner: String,
    },
}

impl Subject {
    /// The commands this row's client sends, whose `INFO commandstats` lines are its cost. A
    /// dlock client calls functions (FCALL), or EVALSHA and EVAL where it does not.
    pub fn sent(&self) -> &'static [&'static str] {
        match self {
            Subject::Dlock { .. } => &["fcall", "evalsha", "eval"],
            Subject::RedissonScripts { .. } => &["evalsha", "eval"],
            Subject::Rslock { .. } => &["set", "evalsha", "eval"],
            Subject::DlockRaw { .. } => &["evalsha", "eval"],
        }
    }

    pub fn reentrant(&self) -> bool {
        match self {
            Subject::Dlock { kind, .. } => *kind != Kind::Semaphore,
            Subject::RedissonScripts { .. } => true,
            // A re-entry goes through another script (lua/lock/reenter.lua); the API's rows
            // measure it.
            Subject::Rslock { .. } | Subject::DlockRaw { .. } => false,
        }
    }

    /// Acquires `name`, which nobody holds.
    pub async fn acquire(&self, name: &str) -> Held {
        match self {
            Subject::Dlock { client, kind } => acquire_dlock(client, *kind, name).await,
            Subject::RedissonScripts { db, ids, fenced } => {
                let owner = ids.fresh();
                let key = format!("{{{name}}}");
                redisson_acquire(db, &key, &owner, *fenced).await;
                Held::Raw { key, owner }
            }
            Subject::Rslock { db, ids } => {
                let owner = ids.fresh();
                let key = name.to_owned();
                let ok: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(PEER_LEASE_MS)
                    .query_async(&mut db.clone())
                    .await
                    .expect("SET NX PX");
                assert!(ok.is_some(), "{key} was taken");
                Held::Raw { key, owner }
            }
            Subject::DlockRaw { db, ids, load } => {
                let owner = ids.fresh();
                let key = format!("{{{name}}}");
                let reply: Value = crate::ceiling::acquire_call(*load, &key, &owner)
                    .query_async(&mut db.clone())
                    .await
                    .expect("dlock acquire script");
                crate::ceiling::check_acquire(*load, &reply);
                Held::Raw { key, owner }
            }
        }
    }

    /// Acquires the lock `outer` holds once more, as its holder (a re-entry).
    pub async fn reenter(&self, outer: &Held) -> Held {
        match (self, outer) {
            // Outside the scope this acquire would wait for the outer hold and time out.
            (Subject::Dlock { client, kind }, Held::Lock { name, guard }) => {
                guard.scope(acquire_dlock(client, *kind, name)).await
            }
            (Subject::Dlock { client, .. }, Held::Multi { names, guard }) => {
                guard
                    .scope(async {
                        let g = client
                            .multi_lock(names.clone())
                            .ttl(TTL)
                            .acquire()
                            .await
                            .expect("multi re-entry");
                        Held::Multi {
                            names: names.clone(),
                            guard: g,
                        }
                    })
                    .await
            }
            (Subject::RedissonScripts { db, fenced, .. }, Held::Raw { key, owner }) => {
                redisson_acquire(db, key, owner, *fenced).await;
                Held::Raw {
                    key: key.clone(),
                    owner: owner.clone(),
                }
            }
            _ => unreachable!("no re-entry for this row"),
        }
    }

    /// Releases one hold (for a re-entry, one count of the shared hold).
    pub async fn release(&self, held: Held) {
        match (self, held) {
            (_, Held::Lock { guard, .. }) => guard.release().await.expect("release"),
            (_, Held::Permit(p)) => p.release().await.expect("release"),
            (_, Held::Multi { guard, .. }) => guard.release().await.expect("release"),
            (Subject::RedissonScripts { db, ids, .. }, Held::Raw { key, owner }) => {
                let left: Option<i64> = REDISSON_RELEASE_SCRIPT
                    .key(&key)
                    .key(format!("redisson_lock__channel:{key}"))
                    .key(format!("redisson_unlock_latch:{key}:{}", ids.fresh()))
                    .arg(&owner)
                    .arg(PEER_LEASE_MS)
                    .arg(LATCH_MS)
                    .invoke_async(&mut db.clone())
                    .await
                    .expect("Redisson unlock");
                assert!(
                    matches!(left, Some(0 | 1)),
                    "{key}: unlock answered {left:?}"
                );
            }
            (Subject::DlockRaw { db, ids, load }, Held::Raw { key, owner }) => {
                let reply: Value = crate::ceiling::release_call(*load, &key, &owner, &ids.fresh())
                    .query_async(&mut db.clone())
                    .await
                    .expect("dlock release script");
                crate::ceiling::check_release(*load, &reply);
            }
            (Subject::Rslock { db, .. }, Held::Raw { key, owner }) => {
                let n: i64 = RSLOCK_RELEASE_SCRIPT
                    .key(&key)
                    .arg(&owner)
                    .invoke_async(&mut db.clone())
                    .await
                    .expect("compare-and-delete");
                assert_eq!(n, 1, "{key}: not released");
            }
            _ => unreachable!("a hold of another row"),
        }
    }
}

async fn acquire_dlock(client: &LockClient, kind: Kind, name: &str) -> Held {
    let lock = match kind {
        Kind::Plain => client.lock(name),
        Kind::RwRead => client.read_write_lock(name).read(),
        Kind::RwWrite => client.read_write_lock(name).write(),
        Kind::Fair => client.fair_lock(name),
        Kind::RedissonLock => client.redisson_lock(name),
        Kind::RedissonFencedLock => client.redisson_fenced_lock(name),
        Kind::RedissonRead => client.redisson_read_write_lock(name).read(),
        Kind::RedissonWrite => client.redisson_read_write_lock(name).write(),
        Kind::Semaphore => {
            let permit = client
                .semaphore(name, 1)
                .ttl(TTL)
                .acquire()
                .await
                .expect("semaphore acquire");
            return Held::Permit(permit);
        }
        Kind::Multi2 => {
            let names = [format!("{name}:a"), format!("{name}:b")];
            let guard = client
                .multi_lock(names.clone())
                .ttl(TTL)
                .acquire()
                .await
                .expect("multi acquire");
            return Held::Multi { names, guard };
        }
    };
    let guard = lock.ttl(TTL).acquire().await.expect("acquire");
    Held::Lock {
        name: name.to_owned(),
        guard,
    }
}

async fn redisson_acquire(db: &Db, key: &str, owner: &str, fenced: bool) {
    if fenced {
        let reply: (Option<i64>, Option<i64>) = REDISSON_FENCED_ACQUIRE_SCRIPT
            .key(key)
            .key(format!("redisson_lock_token:{key}"))
            .arg(PEER_LEASE_MS)
            .arg(owner)
            .invoke_async(&mut db.clone())
            .await
            .expect("Redisson RFencedLock tryLock");
        assert!(
            matches!(reply, (None, Some(_))),
            "{key}: held by someone else"
        );
        return;
    }
    let reply: Value = REDISSON_ACQUIRE_SCRIPT
        .key(key)
        .arg(PEER_LEASE_MS)
        .arg(owner)
        .invoke_async(&mut db.clone())
        .await
        .expect("Redisson tryLock");
    assert_eq!(reply, Value::Nil, "{key}: held by someone else");
}

/// `SCRIPT LOAD` of every raw script on `node`.
pub async fn load_raw_scripts(node: &mut impl ConnectionLike) {
    for text in RAW_SCRIPTS {
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(text)
            .query_async(node)
            .await
            .expect("SCRIPT LOAD");
    }
}

/// The hashes the ceiling's pipelines send as EVALSHA.
pub fn redisson_acquire_hash() -> &'static str {
    REDISSON_ACQUIRE_SCRIPT.get_hash()
}

pub fn redisson_fenced_acquire_hash() -> &'static str {
    REDISSON_FENCED_ACQUIRE_SCRIPT.get_hash()
}

pub fn redisson_release_hash() -> &'static str {
    REDISSON_RELEASE_SCRIPT.get_hash()
}

pub fn rslock_release_hash() -> &'static str {
    RSLOCK_RELEASE_SCRIPT.get_hash()
}
