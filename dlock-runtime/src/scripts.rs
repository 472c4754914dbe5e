//! The Lua scripts of the lock protocol, built once.
//!
//! Each call sends EVALSHA; on NOSCRIPT (SCRIPT FLUSH, a restart, a failover to a replica that
//! never saw the script) it re-sends the call as EVAL with the script's text, which also puts the
//! script back in the server's cache. redis-rs's own `Script::invoke_async` instead does SCRIPT
//! LOAD then EVALSHA again, and a flush landing between those two fails the call: for a release
//! that would leave the lock held by nobody until its TTL (found by tests/lock_faults.rs).
//! Scripts live in `scripts/lock/` (one set per lock kind, called through `kind::LockKind`)
//! and `scripts/stock/`.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;

use crate::conn::Conn;
use crate::slots::NodeAddr;
use redis::{FromRedisValue, RedisResult, ToRedisArgs, Value};

/// A Lua script: its text and its SHA1, computed once.
pub(crate) struct Script {
    source: std::borrow::Cow<'static, str>,
    sha: String,
}

/// One call of a script, built like redis-rs's `ScriptInvocation`.
#[derive(Clone)]
pub(crate) struct Call<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Script {
    pub(crate) fn new(source: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        let source = source.into();
        Script {
            sha: redis::Script::new(&source).get_hash().to_owned(),
            source,
        }
    }

    pub(crate) fn prepare_invoke(&self) -> Call<'_> {
        Call {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    pub(crate) fn key<T: ToRedisArgs>(&self, key: T) -> Call<'_> {
        let mut call = self.prepare_invoke();
        call.key(key);
        call
    }
}

impl Call<'_> {
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    fn command(&self, verb: &str, body: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(body).arg(self.keys.len());
        for k in &self.keys {
            cmd.arg(k.as_slice());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// Like [`Call::invoke_async`], sent to one cluster node (on one server: to it).
    pub(crate) async fn invoke_on<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        node: &NodeAddr,
    ) -> RedisResult<T> {
        // A routed command returns server errors as values: make them errors first.
        let reply = match conn
            .query_on(node, &self.command("EVALSHA", &self.script.sha))
            .await
            .and_then(Value::extract_error)
        {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                conn.query_on(node, &self.command("EVAL", &self.script.source))
                    .await
                    .and_then(Value::extract_error)
            }
            other => other,
        }?;
        redis::from_redis_value(reply).map_err(Into::into)
    }

    /// EVALSHA, and EVAL with the text when the server does not know the SHA.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut (impl ConnectionLike + Send),
    ) -> RedisResult<T> {
        match self
            .command("EVALSHA", &self.script.sha)
            .query_async(conn)
            .await
        {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.command("EVAL", &self.script.source)
                    .query_async(conn)
                    .await
            }
            other => other,
        }
    }
}

pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/lock/acquire.lua")));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/lock/release.lua")));
pub(crate) static UNDO_REENTRY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/lock/undo_reentry.lua")));
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/lock/renew.lua")));
/// The renew script for one cluster node: Redis 7's `allow-cross-slot-keys` flag lets one call
/// reach keys of many slots as long as this node serves them all (undeclared: see the script),
/// so a tick costs one call per node instead of one per slot. Servers before 7.0 reject the
/// flag; the watchdog then falls back to one call per slot.
pub(crate) static RENEW_NODE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/lock/renew_node.lua")));
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/lock/force_unlock.lua")));

// Segmented stock (stock.rs): one script per step, each touching the keys of one segment only.
pub(crate) static STOCK_META: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock/meta.lua")));
pub(crate) static STOCK_INIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock/init.lua")));
pub(crate) static STOCK_TAKE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock/take.lua")));
pub(crate) static STOCK_GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock/give_back.lua")));
pub(crate) static STOCK_AUDIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock/audit.lua")));
