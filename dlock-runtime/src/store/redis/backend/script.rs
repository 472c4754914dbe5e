//! Calling dlock's Lua scripts.
//!
//! Through a client's connections ([`Conn`]), a call is an FCALL of the script's function in
//! dlock's library (see `library.rs`). When the server lost the library, the call is re-sent
//! as EVAL with the script's text while the library is loaded again beside it, so the call
//! costs one more round trip and no FUNCTION FLUSH, however timed, can fail it. When the
//! server has no FUNCTION, or the user may not use it, the client switches to EVALSHA.
//!
//! EVALSHA (the fallback, and the fenced write on a caller's connection) answers NOSCRIPT
//! (SCRIPT FLUSH, a restart, a failover to a replica that never saw the script) by re-sending
//! the call as EVAL with the script's text, which also puts the script back in the server's
//! cache. redis-rs's own `Script::invoke_async` instead does SCRIPT LOAD then EVALSHA again,
//! and a flush landing between those two fails the call: for a release that would leave the
//! lock held by nobody until its TTL (found by tests/trust/faults.rs).
//! The scripts themselves are `.lua` files under `dlock-runtime/lua/`, one folder per lock kind,
//! plus `stock/` and `fence/`.

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, RedisResult, ToRedisArgs, Value};

use crate::store::redis::backend::conn::Conn;
use crate::store::redis::backend::library::{self, Source, LIBRARY};
use crate::store::redis::backend::slots::NodeAddr;

/// A Lua script: its text, its SHA1, and its function in dlock's library, computed once.
pub(crate) struct Script {
    source: std::borrow::Cow<'static, str>,
    sha: String,
    /// `None` for a script outside the library (the fenced write): EVALSHA only.
    function: Option<String>,
    /// The text with the function's flags, for EVAL while the library is reloaded.
    flagged: Option<String>,
}

/// One call of a script, built like redis-rs's `ScriptInvocation`.
#[derive(Clone)]
pub(crate) struct Call<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// Send a PING ahead of the call in the same write (see [`Call::reply_last`]).
    reply_last: bool,
}

impl Script {
    /// A script outside the library, always sent with EVALSHA.
    pub(crate) fn new(source: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        let source = source.into();
        Script {
            sha: redis::Script::new(&source).get_hash().to_owned(),
            source,
            function: None,
            flagged: None,
        }
    }

    /// A script of dlock's library.
    pub(crate) fn of(source: &Source) -> Self {
        Script {
            function: Some(LIBRARY.function(source)),
            flagged: Some(source.flagged_text()),
            ..Script::new(source.text)
        }
    }

    pub(crate) fn prepare_invoke(&self) -> Call<'_> {
        Call {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
            reply_last: false,
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

    /// Has the caller's reply leave Redis after the messages the script publishes.
    ///
    /// Redis writes the replies and messages of one event-loop pass to their sockets newest
    /// client first. A call alone makes its caller the newest (its reply is queued after the
    /// script's PUBLISH), so the caller's reply goes out first and the subscriber waits for
    /// that write; on loopback that write also wakes the caller, measured at 15-70 µs on a
    /// 2-core VM. A PING sent ahead in the same write queues the caller first, so the message
    /// goes out first. For a release whose message hands the lock over (a fair lock's grant),
    /// the next holder is waiting and the releaser is not. Costs a PING in Redis (~1 µs).
    ///
    /// Measured (examples/peers, fair handoff across two clients, p50): 2-5 % sooner, in every
    /// one of 9 interleaved runs. Not used for the plain lock's release: there the woken
    /// waiter still has its acquire to send, and it came out 12-16 % later.
    pub(crate) fn reply_last(&mut self) -> &mut Self {
        self.reply_last = true;
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

    /// Through one of the client's connections, routed by the first key.
    pub(crate) async fn invoke_async<T: FromRedisValue>(&self, conn: &mut Conn) -> RedisResult<T> {
        redis::from_redis_value(self.run(conn, None).await?).map_err(Into::into)
    }

    /// Like [`Call::invoke_async`], sent to one cluster node (on one server: to it).
    pub(crate) async fn invoke_on<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        node: &NodeAddr,
    ) -> RedisResult<T> {
        redis::from_redis_value(self.run(conn, Some(node)).await?).map_err(Into::into)
    }

    /// The call, then WAIT for `replicas` replicas at most `within`, in one round trip on the
    /// connection the script ran on (WAIT counts that connection's writes): the script's
    /// reply, and apart from it WAIT's (how many replicas confirmed, or why WAIT failed). A call
    /// that needs its fallback (the library or the script lost) runs that first, then WAITs
    /// on its own.
    pub(crate) async fn invoke_then_wait<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        replicas: u32,
        within: std::time::Duration,
    ) -> RedisResult<(T, RedisResult<u32>)> {
        let first = match (&self.script.function, conn.mode.functions()) {
            (Some(function), true) => self.command("FCALL", function),
            _ => self.command("EVALSHA", &self.script.sha),
        };
        let mut wait = redis::pipe();
        wait.cmd("WAIT")
            .arg(replicas)
            .arg(within.as_millis().max(1) as u64);
        let mut both = redis::pipe();
        both.add_command(first)
            .add_command(wait.cmd_iter().next().cloned().expect("WAIT"));
        let key = self.first_key();
        let replies = conn.pipeline_to_key(&both, 2, &key).await?;
        let [reply, acked]: [Value; 2] = replies.try_into().map_err(|got: Vec<Value>| {
            redis::RedisError::from(std::io::Error::other(format!(
                "{} replies to a script and its WAIT",
                got.len()
            )))
        })?;
        let (reply, acked) = match reply.extract_error() {
            Err(e) if needs_fallback(&e) => {
                let reply = self.run(conn, None).await?;
                let acked = conn
                    .pipeline_to_key(&wait, 1, &key)
                    .await
                    .map(|mut v| v.remove(0));
                (reply, acked)
            }
            other => (other?, Ok(acked)),
        };
        let acked = acked
            .and_then(Value::extract_error)
            .and_then(|v| redis::from_redis_value(v).map_err(Into::into));
        Ok((redis::from_redis_value(reply)?, acked))
    }

    /// The first key, which routes the call (empty for a call without keys).
    fn first_key(&self) -> String {
        String::from_utf8_lossy(self.keys.first().map_or(&[][..], |k| k)).into_owned()
    }

    /// On a connection dlock knows nothing of (the caller's): EVALSHA, then EVAL on NOSCRIPT.
    pub(crate) async fn invoke_plain<T: FromRedisValue>(
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

    /// FCALL while the client uses the library, else EVALSHA (see the module docs).
    async fn run(&self, conn: &mut Conn, node: Option<&NodeAddr>) -> RedisResult<Value> {
        // Not on a cluster: redis-rs follows MOVED and ASK for a lone command, not for a
        // pipeline sent to a chosen node.
        if self.reply_last && node.is_none() && !conn.is_cluster() {
            if let Some(reply) = self.run_behind_ping(conn).await? {
                return Ok(reply);
            }
        }
        self.run_alone(conn, node).await
    }

    /// The call behind a PING, in one write to the key's node (see [`Call::reply_last`]):
    /// its reply, or `None` when it needs the fallback ladder, which runs it again alone.
    async fn run_behind_ping(&self, conn: &mut Conn) -> RedisResult<Option<Value>> {
        let first = match (&self.script.function, conn.mode.functions()) {
            (Some(function), true) => self.command("FCALL", function),
            _ => self.command("EVALSHA", &self.script.sha),
        };
        let mut both = redis::pipe();
        both.cmd("PING").ignore().add_command(first);
        let mut replies = conn.pipeline_to_key(&both, 2, &self.first_key()).await?;
        let reply = replies.pop().ok_or_else(|| {
            redis::RedisError::from(std::io::Error::other("no reply to a script behind a PING"))
        })?;
        match reply.extract_error() {
            Err(e) if needs_fallback(&e) => Ok(None),
            other => other.map(Some),
        }
    }

    /// [`Call::run`] without the PING.
    async fn run_alone(&self, conn: &mut Conn, node: Option<&NodeAddr>) -> RedisResult<Value> {
        if let (Some(function), true) = (&self.script.function, conn.mode.functions()) {
            match send(conn, node, &self.command("FCALL", function)).await {
                Err(e) if library::is_missing(&e) => {
                    // This call runs from its text (with the function's flags: the server has
                    // them), while the library is loaded again where the call went, for the
                    // next calls; the reply does not wait for the load.
                    let mut loader = conn.clone();
                    let target = match node {
                        Some(node) => Target::Node(node.clone()),
                        None => Target::Key(self.first_key()),
                    };
                    tokio::spawn(async move {
                        if let Err(e) = load_library(&mut loader, &target).await {
                            library_refused(&loader, &e);
                        }
                    });
                    let text = self
                        .script
                        .flagged
                        .as_deref()
                        .unwrap_or(&self.script.source);
                    return send(conn, node, &self.command("EVAL", text)).await;
                }
                Err(e) if library::is_unavailable(&e) => library_refused(conn, &e),
                other => return other,
            }
        }
        match send(conn, node, &self.command("EVALSHA", &self.script.sha)).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                send(conn, node, &self.command("EVAL", &self.script.source)).await
            }
            other => other,
        }
    }
}

/// The first try of a call failed only because the server lost the library or the script, or
/// has no FUNCTION: [`Call::run`]'s ladder answers it.
fn needs_fallback(e: &redis::RedisError) -> bool {
    library::is_missing(e)
        || library::is_unavailable(e)
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Sends `cmd` by its key, or to `node`; a server error in the reply is an error.
async fn send(conn: &mut Conn, node: Option<&NodeAddr>, cmd: &redis::Cmd) -> RedisResult<Value> {
    match node {
        Some(node) => conn.query_on(node, cmd).await,
        None => cmd.query_async(conn).await,
    }
    .and_then(Value::extract_error)
}

/// Where to load the library.
enum Target {
    /// Every master (at connect).
    All,
    /// The node a call went to.
    Node(NodeAddr),
    /// The node serving a call's key.
    Key(String),
}

/// `FUNCTION LOAD` of dlock's library. Finding it there already is success.
async fn load_library(conn: &mut Conn, target: &Target) -> RedisResult<()> {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg(&LIBRARY.code);
    let loaded = match target {
        Target::All => send(conn, None, &load).await,
        Target::Node(node) => send(conn, Some(node), &load).await,
        Target::Key(key) => {
            let mut one = redis::pipe();
            one.add_command(load);
            match conn.pipeline_to_key(&one, 1, key).await {
                Ok(mut v) => v.remove(0).extract_error(),
                Err(e) => Err(e),
            }
        }
    };
    match loaded {
        Err(e) if !library::is_loaded_already(&e) => Err(e),
        _ => Ok(()),
    }
}

/// A load or a call of the library failed: with no FUNCTION on the server, or no right to
/// it, the client uses EVALSHA from now on. Anything else (a connection lost) changes nothing.
fn library_refused(conn: &Conn, e: &redis::RedisError) {
    if library::is_unavailable(e) {
        tracing::info!(error = %e, library = %LIBRARY.name,
            "Redis FUNCTION is unavailable (Redis before 7.0, or the ACL user lacks +function \
             and +fcall): calling scripts with EVALSHA");
        conn.mode.use_scripts();
    } else {
        tracing::debug!(error = %e, library = %LIBRARY.name,
            "loading dlock's function library failed; the next call that misses it retries");
    }
}

/// Loads dlock's library at connect, so the first call needs no fallback; decides between
/// FCALL and EVALSHA for the client.
pub(crate) async fn install_library(conn: &mut Conn) {
    if !conn.mode.functions() {
        return;
    }
    match load_library(conn, &Target::All).await {
        Ok(()) => tracing::debug!(library = %LIBRARY.name, "dlock's function library is loaded"),
        Err(e) => library_refused(conn, &e),
    }
}
