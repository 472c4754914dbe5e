//! What a client learns when it is built, so that `connect` fails with a message saying what
//! to do, instead of returning a client whose first acquire fails with a protocol error.
//!
//! redis-rs opens a connection without a round trip when the URL carries no password, so a
//! server that wants one is only met at the first command ("NOAUTH"); a wrong password or a
//! database index the server lacks fails inside the connection's handshake with Redis's own
//! words. One check on a command connection (PING, HELLO, and an FCALL or EVALSHA of a script
//! that exists nowhere) proves authentication, the server's version and the right to run scripts; the
//! handshake's failures are translated by [`explain`].

use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::LockError;
use crate::store::redis::backend::conn::Conn;

/// The oldest server the scripts run on: `SET .. GET` (6.2) reads and writes the fencing
/// counter in one call.
const MIN_VERSION: (u32, u32) = (6, 2);

/// A failure of the check: a `LockError` to return as it is, or no answer at all (a slow or
/// loading server), which leaves the client to find out at its first command as before.
pub(crate) enum Checked {
    Refused(LockError),
    Unanswered(RedisError),
}

/// PING and HELLO on `conn` (pipelined by the multiplexed connection), each bounded by
/// `timeout`: authentication and the server's version. `user` names the ACL user in messages.
pub(crate) async fn check(
    conn: &mut Conn,
    url: &str,
    user: &str,
    timeout: Duration,
) -> Result<(), Checked> {
    let (ping, hello) = tokio::join!(
        bounded(conn.clone(), redis::cmd("PING"), timeout),
        bounded(conn.clone(), redis::cmd("HELLO"), timeout),
    );
    match ping {
        Ok(_) => {}
        Err(e) if e.code() == Some("NOAUTH") => {
            return Err(Checked::Refused(refused(
                url,
                "the server requires a password: put user:password@ in the URL (redis://:password@host:port for the default user)",
            )));
        }
        Err(e) if e.code() == Some("NOPERM") => {
            return Err(Checked::Refused(refused(
                url,
                &format!("the ACL user `{user}` may not run PING ({e}): grant it `+@connection`"),
            )));
        }
        Err(e) => return Err(Checked::Unanswered(e)),
    }
    match hello {
        Ok(reply) => {
            if let Some(version) = version_of(&reply) {
                if parse_version(&version).is_some_and(|v| v < MIN_VERSION) {
                    return Err(Checked::Refused(too_old(url, &version)));
                }
            }
            Ok(())
        }
        // HELLO came with Redis 6.0: a server that does not know it is older than 6.2.
        Err(e) if is_unknown_command(&e) => Err(Checked::Refused(too_old(url, "older than 6.0"))),
        // Denied HELLO, or another answer: the version stays unknown, the scripts tell.
        Err(_) => Ok(()),
    }
}

/// Whether the user may run dlock's scripts the way the client will call them, asked after
/// the function library was loaded or refused (which decides FCALL or EVALSHA): the call,
/// naming nothing that exists, runs nothing (allowed: "not found" / NOSCRIPT; denied:
/// NOPERM). Denied FCALL falls back to EVALSHA in the client as here.
pub(crate) async fn check_scripts(
    conn: &mut Conn,
    url: &str,
    user: &str,
    timeout: Duration,
) -> Result<(), Checked> {
    let evalsha = || {
        let mut c = redis::cmd("EVALSHA");
        c.arg("0".repeat(40)).arg(0);
        c
    };
    let mut reply = if conn.mode.functions() {
        let mut c = redis::cmd("FCALL");
        c.arg("dlock_connect_check_no_such_function").arg(0);
        bounded(conn.clone(), c, timeout).await
    } else {
        bounded(conn.clone(), evalsha(), timeout).await
    };
    let fcall_refused = |e: &RedisError| is_unknown_command(e) || e.code() == Some("NOPERM");
    if conn.mode.functions() && reply.as_ref().is_err_and(fcall_refused) {
        reply = bounded(conn.clone(), evalsha(), timeout).await;
    }
    match reply {
        Err(e) if e.code() == Some("NOPERM") => Err(Checked::Refused(refused(
            url,
            &format!(
                "the ACL user `{user}` may not run scripts ({e}); dlock's locks are scripts: grant it `+@scripting` (or at least `+evalsha +eval +fcall +function|load`)"
            ),
        ))),
        _ => Ok(()),
    }
}

fn is_unknown_command(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.to_string()
            .to_ascii_lowercase()
            .contains("unknown command")
}

async fn bounded(mut conn: Conn, cmd: redis::Cmd, timeout: Duration) -> Result<Value, RedisError> {
    match tokio::time::timeout(timeout, cmd.query_async::<Value>(&mut conn)).await {
        Ok(reply) => reply,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {timeout:?}"),
        ))),
    }
}

/// The `version` field of HELLO's reply (a flat list in RESP2, a map in RESP3).
fn version_of(reply: &Value) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .find(|kv| kv.first().and_then(text).as_deref() == Some("version"))
            .and_then(|kv| kv.get(1).and_then(text)),
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some("version"))
            .and_then(|(_, v)| text(v)),
        _ => None,
    }
}

fn parse_version(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn too_old(url: &str, version: &str) -> LockError {
    refused(
        url,
        &format!(
            "the server is Redis {version}; dlock needs Redis {}.{} or later, or Valkey",
            MIN_VERSION.0, MIN_VERSION.1
        ),
    )
}

fn refused(url: &str, why: &str) -> LockError {
    LockError::invalid("", format!("cannot use redis at {url}: {why}"))
}

/// A failure to open the client's connections, in words that say what to do where Redis's
/// own are known (a wrong password, a database the server lacks); `None` for anything else,
/// which stays a [`LockError::Connect`] with redis-rs's error.
pub(crate) fn explain(url: &str, user: &str, db: Option<i64>, e: &RedisError) -> Option<LockError> {
    let text = e.to_string();
    if e.kind() == ErrorKind::AuthenticationFailed
        || e.code() == Some("WRONGPASS")
        || text.contains("WRONGPASS")
        || text.contains("invalid password")
    {
        return Some(refused(
            url,
            &format!("wrong password for user `{user}` (or the user does not exist or is disabled): check user:password@ in the URL"),
        ));
    }
    if text.contains("NOAUTH") {
        return Some(refused(
            url,
            "the server requires a password: put user:password@ in the URL (redis://:password@host:port for the default user)",
        ));
    }
    if text.contains("DB index is out of range") {
        let db = db.map_or_else(|| "the URL's".to_owned(), |d| d.to_string());
        return Some(refused(
            url,
            &format!("database {db} does not exist on the server (its `databases` setting is lower; Redis Cluster has only database 0): change the number after the port in the URL"),
        ));
    }
    None
}

/// The user and database index a Redis URL names (`default` and `None` when it names none).
pub(crate) fn url_user_db(url: &str) -> (Option<String>, Option<i64>) {
    use redis::IntoConnectionInfo;
    match url.into_connection_info() {
        Ok(info) => {
            let redis = info.redis_settings();
            let db = Some(redis.db()).filter(|d| *d != 0);
            (redis.username().map(str::to_owned), db)
        }
        Err(_) => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_right() {
        let reply = Value::Array(vec![
            Value::BulkString(b"server".to_vec()),
            Value::BulkString(b"redis".to_vec()),
            Value::BulkString(b"version".to_vec()),
            Value::BulkString(b"6.0.16".to_vec()),
        ]);
        assert_eq!(version_of(&reply).as_deref(), Some("6.0.16"));
        assert!(parse_version("6.0.16").unwrap() < MIN_VERSION);
        assert!(parse_version("6.2.0").unwrap() >= MIN_VERSION);
        assert!(parse_version("8.1.4").unwrap() >= MIN_VERSION);
    }
}
