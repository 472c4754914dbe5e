//! The "Java side": a second client written here that speaks Redisson's protocol as Redisson
//! sends it, so the tests can check dlock against it without a JVM.
//!
//! Each script below is written for this test from the protocol facts of one Redisson source
//! file (read at Redisson 3.52.0 and 4.7.0, where they agree; the unlock latch exists since
//! 3.24): the same KEYS and ARGV in the same order, the same replies, the same writes and
//! messages. The client around them does what Redisson's does with them: `tryLock` takes, then
//! subscribes, then retries and sleeps on the channel until a message or the PTTL; a watchdog
//! renews every third of `lockWatchdogTimeout`; `unlock` sends a fresh request id and deletes
//! its latch afterwards. Thread ids are plain numbers given by the test.
//!
//! These texts are this project's own. The whole suite was also run with each constant
//! replaced by Redisson's verbatim script text of 4.7.0 (all nine) and of 3.24.0 (the lock,
//! read, write and fenced scripts), locally and not committed: it passed unchanged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::redis::aio::{ConnectionLike, MultiplexedConnection};
use dlock::redis::cluster_async::ClusterConnection;
use dlock::redis::{self, Cmd, Pipeline, RedisFuture, Script, Value};
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// RedissonLock.java, `tryLockInnerAsync`. KEYS[1] lock; ARGV[1] lease ms, ARGV[2] lock name
/// (`<uuid>:<thread id>`). nil when granted, else the PTTL.
pub const TRY_LOCK: &str = r"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])";

/// RedissonLock.java, `unlockInnerAsync`. KEYS[1] lock, KEYS[2] channel, KEYS[3] unlock latch;
/// ARGV[1] unlock message 0, ARGV[2] lease ms, ARGV[3] lock name, ARGV[4] publish command,
/// ARGV[5] latch lifetime ms. A latched answer again, nil when not held, 0 when holds remain,
/// 1 when freed.
pub const UNLOCK: &str = r"
local latched = redis.call('get', KEYS[3])
if latched ~= false then
  return tonumber(latched)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1";

/// RedissonFencedLock.java, `tryLockInnerAsync`. KEYS[1] lock, KEYS[2] token counter; ARGV as
/// TRY_LOCK. {-1, token} when granted, {pttl, -1} otherwise.
pub const FENCED_TRY_LOCK: &str = r"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {-1, token}
end
return {redis.call('pttl', KEYS[1]), -1}";

/// renewal/LockTask.java. KEYS the locks; ARGV[1] lease ms, ARGV[i+1] the lock name of
/// KEYS[i]. One 1 (renewed) or 0 (gone) per lock.
pub const RENEW: &str = r"
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out";

/// RedissonReadLock.java, `tryLockInnerAsync`. KEYS[1] lock, KEYS[2] the holder's timeout
/// prefix `{<name>}:<lock name>:rwlock_timeout`; ARGV[1] lease ms, ARGV[2] lock name,
/// ARGV[3] the same thread's writer name `<lock name>:write`. nil when granted, else PTTL.
pub const READ_TRY_LOCK: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1)
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local timeout = KEYS[2] .. ':' .. n
  redis.call('set', timeout, 1)
  redis.call('pexpire', timeout, ARGV[1])
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])";

/// RedissonReadLock.java, `unlockInnerAsync`. KEYS[1] lock, KEYS[2] channel
/// `redisson_rwlock:{<name>}`, KEYS[3] the timeout prefix, KEYS[4] the key prefix `{<name>}`,
/// KEYS[5] unlock latch; ARGV[1] message 0, ARGV[2] lock name, ARGV[3] publish command,
/// ARGV[4] latch lifetime ms.
pub const READ_UNLOCK: &str = r"
local latched = redis.call('get', KEYS[5])
if latched ~= false then
  return tonumber(latched)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  redis.call('set', KEYS[5], 1, 'px', ARGV[4])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if n == 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (n + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], field))
    if type(count) == 'number' then
      for i = count, 1, -1 do
        longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    redis.call('set', KEYS[5], 0, 'px', ARGV[4])
    return 0
  end
  if mode == 'write' then
    redis.call('set', KEYS[5], 0, 'px', ARGV[4])
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1";

/// RedissonWriteLock.java, `tryLockInnerAsync`. KEYS[1] lock; ARGV[1] lease ms, ARGV[2] the
/// writer name `<uuid>:<thread id>:write`. nil when granted, else the PTTL.
pub const WRITE_TRY_LOCK: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])";

/// RedissonWriteLock.java, `unlockInnerAsync`. KEYS[1] lock, KEYS[2] channel, KEYS[3] latch;
/// ARGV[1] message 1 (READ_UNLOCK_MESSAGE: wake every waiter), ARGV[2] lease ms, ARGV[3]
/// writer name, ARGV[4] publish command, ARGV[5] latch lifetime ms.
pub const WRITE_UNLOCK: &str = r"
local latched = redis.call('get', KEYS[3])
if latched ~= false then
  return tonumber(latched)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  redis.call('set', KEYS[3], 1, 'px', ARGV[5])
  return nil
end
if mode == 'write' then
  if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
  end
  if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
  end
  redis.call('hdel', KEYS[1], ARGV[3])
  if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], ARGV[1])
  else
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  redis.call('set', KEYS[3], 1, 'px', ARGV[5])
  return 1
end
return nil";

/// renewal/ReadLockTask.java. KEYS pairs (lock, key prefix `{<name>}`); ARGV[1] lease ms, then
/// per lock: the number of lock names, the names. One 1 or 0 per lock.
pub const READ_RENEW: &str = r"
local out = {}
local a = 2
for i = 1, #KEYS, 2 do
  local alive = false
  local names = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, names do
    local count = redis.call('hget', KEYS[i], ARGV[a])
    if count ~= false then
      alive = true
      for c = count, 1, -1 do
        redis.call('pexpire', KEYS[i + 1] .. ':' .. ARGV[a] .. ':rwlock_timeout:' .. c, ARGV[1])
      end
    end
    a = a + 1
  end
  if alive then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out";

/// Redisson's latch lifetime with default settings: (timeout 3 s + retry delay) x attempts;
/// any value longer than a retry works the same.
const LATCH_TTL_MS: u64 = 15_000;

/// Redisson's names (`RedissonObject.prefixName`).
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `RedissonObject.suffixName`.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The command connection: one server or a cluster.
#[derive(Clone)]
pub enum JConn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for JConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            JConn::Single(c) => c.req_packed_command(cmd),
            JConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            JConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            JConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// Which side of the lock a Java "thread" takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Plain,
    Read,
    Write,
}

/// One Redisson instance: its uuid, its connection, its subscriptions and watchdog.
pub struct JavaClient {
    pub uuid: String,
    conn: JConn,
    /// Subscribes a channel and returns once the server confirmed it.
    subscriber: Subscriber,
    channels: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    publish: &'static str,
    /// `lockWatchdogTimeout`.
    pub watchdog_timeout: Duration,
    renewals: Mutex<HashMap<(String, u64, Side), JoinHandle<()>>>,
    /// Attempts refused so far (a test waits for a waiter's retry after it subscribed).
    pub refused: AtomicU64,
}

enum Subscriber {
    Classic(tokio::sync::Mutex<redis::aio::PubSubSink>),
    Sharded(tokio::sync::Mutex<ClusterConnection>),
}

impl JavaClient {
    /// A client of one server: PUBLISH and SUBSCRIBE.
    pub async fn single(url: &str, watchdog_timeout: Duration) -> JavaClient {
        let client = redis::Client::open(url).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let (sink, mut stream) = client.get_async_pubsub().await.unwrap().split();
        let channels: Arc<Mutex<HashMap<String, Arc<Notify>>>> = Arc::default();
        let map = channels.clone();
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let payload: String = msg.get_payload().unwrap_or_default();
                deliver(&map, msg.get_channel_name(), &payload);
            }
        });
        JavaClient::new(
            JConn::Single(conn),
            Subscriber::Classic(tokio::sync::Mutex::new(sink)),
            channels,
            "PUBLISH",
            watchdog_timeout,
        )
    }

    /// A client of a Redis 7 cluster: SPUBLISH and SSUBSCRIBE (Redisson's sharded mode AUTO).
    pub async fn cluster(urls: &[String], watchdog_timeout: Duration) -> JavaClient {
        let conn = redis::cluster::ClusterClient::new(urls.to_vec())
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<redis::PushInfo>();
        let sub = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        let channels: Arc<Mutex<HashMap<String, Arc<Notify>>>> = Arc::default();
        let map = channels.clone();
        tokio::spawn(async move {
            while let Some(push) = rx.recv().await {
                if push.kind != redis::PushKind::SMessage {
                    continue;
                }
                let text = |v: &Value| redis::from_redis_value::<String>(v.clone()).ok();
                if let (Some(ch), Some(payload)) = (
                    push.data.first().and_then(text),
                    push.data.get(1).and_then(text),
                ) {
                    deliver(&map, &ch, &payload);
                }
            }
        });
        JavaClient::new(
            JConn::Cluster(conn),
            Subscriber::Sharded(tokio::sync::Mutex::new(sub)),
            channels,
            "SPUBLISH",
            watchdog_timeout,
        )
    }

    fn new(
        conn: JConn,
        subscriber: Subscriber,
        channels: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
        publish: &'static str,
        watchdog_timeout: Duration,
    ) -> JavaClient {
        // Java's UUID.randomUUID().toString(), from the clock: unique per test client.
        let bits: u128 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        let hex = format!("{bits:032x}");
        let uuid = format!(
            "{}-{}-4{}-a{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[13..16],
            &hex[17..20],
            &hex[20..]
        );
        JavaClient {
            uuid,
            conn,
            subscriber,
            channels,
            publish,
            watchdog_timeout,
            renewals: Mutex::default(),
            refused: AtomicU64::new(0),
        }
    }

    pub fn conn(&self) -> JConn {
        self.conn.clone()
    }

    /// `getLockName(threadId)`.
    pub fn lock_name(&self, tid: u64) -> String {
        format!("{}:{tid}", self.uuid)
    }

    /// Subscribes `channel` (once per client), confirmed by the server on return.
    async fn subscribe(&self, channel: &str) -> Arc<Notify> {
        let (notify, new) = {
            let mut map = self.channels.lock().unwrap();
            match map.get(channel) {
                Some(n) => (n.clone(), false),
                None => {
                    let n = Arc::new(Notify::new());
                    map.insert(channel.to_owned(), n.clone());
                    (n, true)
                }
            }
        };
        if new {
            self.resubscribe(channel).await;
        }
        notify
    }

    /// Sends the subscription again (what Redisson does after a failover).
    pub async fn resubscribe(&self, channel: &str) {
        match &self.subscriber {
            Subscriber::Classic(sink) => sink.lock().await.subscribe(channel).await.unwrap(),
            Subscriber::Sharded(conn) => conn.lock().await.ssubscribe(channel).await.unwrap(),
        }
    }

    /// The lock's channel as Redisson names it.
    pub fn channel(name: &str, side: Side) -> String {
        match side {
            Side::Plain => prefix_name("redisson_lock__channel", name),
            Side::Read | Side::Write => prefix_name("redisson_rwlock", name),
        }
    }

    /// One tryLockInner: `None` when granted, else the PTTL.
    async fn try_acquire(&self, name: &str, tid: u64, side: Side, lease: Duration) -> Option<i64> {
        let lease = lease.as_millis() as u64;
        let mut conn = self.conn.clone();
        let lock_name = self.lock_name(tid);
        let reply: Option<i64> = match side {
            Side::Plain => Script::new(TRY_LOCK)
                .key(name)
                .arg(lease)
                .arg(&lock_name)
                .invoke_async(&mut conn)
                .await
                .unwrap(),
            Side::Read => Script::new(READ_TRY_LOCK)
                .key(name)
                .key(self.timeout_prefix(name, tid))
                .arg(lease)
                .arg(&lock_name)
                .arg(format!("{lock_name}:write"))
                .invoke_async(&mut conn)
                .await
                .unwrap(),
            Side::Write => Script::new(WRITE_TRY_LOCK)
                .key(name)
                .arg(lease)
                .arg(format!("{lock_name}:write"))
                .invoke_async(&mut conn)
                .await
                .unwrap(),
        };
        reply
    }

    /// `getReadWriteTimeoutNamePrefix(threadId)`.
    pub fn timeout_prefix(&self, name: &str, tid: u64) -> String {
        suffix_name(name, &self.lock_name(tid)) + ":rwlock_timeout"
    }

    /// `tryLock(waitTime, -1, ms)` (or with a lease: no watchdog): Redisson's loop.
    pub async fn try_lock(
        &self,
        name: &str,
        tid: u64,
        side: Side,
        wait: Duration,
        lease: Option<Duration>,
    ) -> bool {
        let started = Instant::now();
        let lease_ms = lease.unwrap_or(self.watchdog_timeout);
        if self.try_acquire(name, tid, side, lease_ms).await.is_none() {
            self.granted(name, tid, side, lease);
            return true;
        }
        self.refused.fetch_add(1, Ordering::SeqCst);
        if started.elapsed() >= wait {
            return false;
        }
        let notify = self.subscribe(&JavaClient::channel(name, side)).await;
        // Bounded: every pass sleeps until a message or the PTTL, within the wait.
        for _ in 0..100_000 {
            let Some(ttl) = self.try_acquire(name, tid, side, lease_ms).await else {
                self.granted(name, tid, side, lease);
                return true;
            };
            self.refused.fetch_add(1, Ordering::SeqCst);
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return false;
            }
            let sleep = if ttl >= 0 {
                left.min(Duration::from_millis(ttl as u64))
            } else {
                left
            };
            let _ = tokio::time::timeout(sleep, notify.notified()).await;
        }
        false
    }

    /// `tryLockAndGetToken(waitTime, ms)` of RFencedLock (watchdog lease).
    pub async fn try_lock_fenced(&self, name: &str, tid: u64, wait: Duration) -> Option<i64> {
        let started = Instant::now();
        let notify = self
            .subscribe(&JavaClient::channel(name, Side::Plain))
            .await;
        for _ in 0..100_000 {
            let mut conn = self.conn.clone();
            let (ttl, token): (i64, i64) = Script::new(FENCED_TRY_LOCK)
                .key(name)
                .key(prefix_name("redisson_lock_token", name))
                .arg(self.watchdog_timeout.as_millis() as u64)
                .arg(self.lock_name(tid))
                .invoke_async(&mut conn)
                .await
                .unwrap();
            if ttl == -1 {
                self.granted(name, tid, Side::Plain, None);
                return Some(token);
            }
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return None;
            }
            let sleep = left.min(Duration::from_millis(ttl.max(1) as u64));
            let _ = tokio::time::timeout(sleep, notify.notified()).await;
        }
        None
    }

    /// Starts the watchdog of a hold taken without a lease (`scheduleExpirationRenewal`).
    fn granted(&self, name: &str, tid: u64, side: Side, lease: Option<Duration>) {
        if lease.is_some() {
            return;
        }
        let mut renewals = self.renewals.lock().unwrap();
        if renewals.contains_key(&(name.to_owned(), tid, side)) {
            return;
        }
        let mut conn = self.conn.clone();
        let timeout = self.watchdog_timeout;
        let name_owned = name.to_owned();
        let lock_name = match side {
            Side::Write => format!("{}:write", self.lock_name(tid)),
            _ => self.lock_name(tid),
        };
        let task = tokio::spawn(async move {
            // Bounded by the test's lifetime; stopped at unlock.
            for _ in 0..1_000_000 {
                tokio::time::sleep(timeout / 3).await;
                let ms = timeout.as_millis() as u64;
                let renewed: Vec<i64> = if side == Side::Read {
                    Script::new(READ_RENEW)
                        .key(&name_owned)
                        .key(suffix_name(&name_owned, "").trim_end_matches(':'))
                        .arg(ms)
                        .arg(1)
                        .arg(&lock_name)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap_or_default()
                } else {
                    Script::new(RENEW)
                        .key(&name_owned)
                        .arg(ms)
                        .arg(&lock_name)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap_or_default()
                };
                if renewed.first() != Some(&1) {
                    return;
                }
            }
        });
        renewals.insert((name.to_owned(), tid, side), task);
    }

    /// `unlock()`: `Ok(true)` when this freed the lock, `Ok(false)` when holds remain,
    /// `Err(())` when the thread held nothing (IllegalMonitorStateException).
    pub async fn unlock(&self, name: &str, tid: u64, side: Side) -> Result<bool, ()> {
        let request = format!("{:032x}", rand_u128());
        let latch = format!("{}:{request}", prefix_name("redisson_unlock_latch", name));
        let mut conn = self.conn.clone();
        let lease = self.watchdog_timeout.as_millis() as u64;
        let lock_name = self.lock_name(tid);
        let channel = JavaClient::channel(name, side);
        let reply: Option<i64> = match side {
            Side::Plain => Script::new(UNLOCK)
                .key(name)
                .key(&channel)
                .key(&latch)
                .arg(0)
                .arg(lease)
                .arg(&lock_name)
                .arg(self.publish)
                .arg(LATCH_TTL_MS)
                .invoke_async(&mut conn)
                .await
                .unwrap(),
            Side::Read => Script::new(READ_UNLOCK)
                .key(name)
                .key(&channel)
                .key(self.timeout_prefix(name, tid))
                .key(suffix_name(name, "").trim_end_matches(':'))
                .key(&latch)
                .arg(0)
                .arg(&lock_name)
                .arg(self.publish)
                .arg(LATCH_TTL_MS)
                .invoke_async(&mut conn)
                .await
                .unwrap(),
            Side::Write => Script::new(WRITE_UNLOCK)
                .key(name)
                .key(&channel)
                .key(&latch)
                .arg(1)
                .arg(lease)
                .arg(format!("{lock_name}:write"))
                .arg(self.publish)
                .arg(LATCH_TTL_MS)
                .invoke_async(&mut conn)
                .await
                .unwrap(),
        };
        // Redisson deletes the latch once the unlock's reply arrived.
        let _: i64 = redis::cmd("DEL")
            .arg(&latch)
            .query_async(&mut conn)
            .await
            .unwrap();
        if reply == Some(1) || reply.is_none() {
            // cancelExpirationRenewal
            if let Some(task) = self
                .renewals
                .lock()
                .unwrap()
                .remove(&(name.to_owned(), tid, side))
            {
                task.abort();
            }
        }
        match reply {
            None => Err(()),
            Some(1) => Ok(true),
            Some(_) => Ok(false),
        }
    }

    /// Stops every renewal, as a crashed JVM would.
    pub fn crash(&self) {
        for (_, task) in self.renewals.lock().unwrap().drain() {
            task.abort();
        }
    }
}

/// Starts a Java-side `try_lock` of `name` for thread `tid` (waiting up to 20 s) and returns
/// once it was refused twice, before subscribing and after: it sleeps on the channel now. The
/// handle gives when the attempt returned and whether it got the lock.
pub async fn parked_java_waiter(
    java: &Arc<JavaClient>,
    name: &str,
    tid: u64,
    side: Side,
) -> JoinHandle<(Instant, bool)> {
    let refused = java.refused.load(Ordering::SeqCst);
    let waiter = tokio::spawn({
        let (java, name) = (java.clone(), name.to_owned());
        async move {
            let ok = java
                .try_lock(&name, tid, side, Duration::from_secs(20), None)
                .await;
            (Instant::now(), ok)
        }
    });
    crate::common::eventually(
        Duration::from_secs(10),
        "the Java waiter parked",
        || async { java.refused.load(Ordering::SeqCst) >= refused + 2 },
    )
    .await;
    waiter
}

/// Releases `guard` while a Java waiter of `name` (thread `tid`) is parked, and returns how
/// long after the release the Java side got the lock (it must get it; it keeps it).
pub async fn java_woken_by_release(
    java: &Arc<JavaClient>,
    name: &str,
    tid: u64,
    guard: dlock::LockGuard,
) -> Duration {
    let java_waiter = parked_java_waiter(java, name, tid, Side::Plain).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (got, ok) = java_waiter.await.unwrap();
    assert!(ok, "the Java waiter did not get the lock");
    got - released
}

impl Drop for JavaClient {
    fn drop(&mut self) {
        self.crash();
    }
}

/// LockPubSub.onMessage: 0 wakes one waiter, 1 (a writer's unlock) wakes them all.
fn deliver(map: &Mutex<HashMap<String, Arc<Notify>>>, channel: &str, payload: &str) {
    if let Some(n) = map.lock().unwrap().get(channel) {
        match payload {
            "0" => n.notify_one(),
            "1" => {
                n.notify_waiters();
                n.notify_one();
            }
            // Anything else is not Redisson's: LockPubSub ignores it.
            _ => {}
        }
    }
}

fn rand_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let a = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let b = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (u128::from(a) << 64) | u128::from(b)
}
