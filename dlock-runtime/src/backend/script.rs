//! The Lua scripts of the lock protocol, built once.
//!
//! Each call sends EVALSHA; on NOSCRIPT (SCRIPT FLUSH, a restart, a failover to a replica that
//! never saw the script) it re-sends the call as EVAL with the script's text, which also puts the
//! script back in the server's cache. redis-rs's own `Script::invoke_async` instead does SCRIPT
//! LOAD then EVALSHA again, and a flush landing between those two fails the call: for a release
//! that would leave the lock held by nobody until its TTL (found by tests/trust/faults.rs).
//! The scripts themselves are `.lua` files under `dlock-runtime/lua/`, one folder per lock kind
//! (loaded by that kind's file under `kinds/`), plus `stock/` and `fence/`.

use redis::aio::ConnectionLike;

use crate::backend::conn::Conn;
use crate::backend::slots::NodeAddr;
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
