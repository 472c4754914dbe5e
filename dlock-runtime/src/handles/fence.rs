//! Fence checks on the resource side: the store keeps the highest fencing token it has seen
//! for each resource and refuses writes that carry a lower one.
//!
//! # Why the store has to check
//!
//! A lease cannot stop a holder that does not know its lease ran out. A holder pauses (a long
//! GC or VM pause, a SIGSTOP, swapping, a write stuck in a congested network) for longer than
//! its lease; the lock expires, another process takes it and writes; then the first holder
//! resumes and sends the write it was about to send. Nothing on the lock's side can take that
//! write back: [`LockGuard::is_lost`](crate::LockGuard::is_lost) only helps code that looks
//! before it writes, and a write can already be on its way. Only the resource can tell the late
//! write from the current one, and it can if every write carries the hold's fencing token
//! ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token): each new holder of a lock
//! gets a larger one) and the resource refuses a token lower than the highest it has accepted.
//!
//! Fence one resource with the tokens of one lock, the one that guards it: tokens of two
//! different lock names are not ordered against each other (on a Redis Cluster they come from
//! different nodes' clocks).
//!
//! # Values kept in Redis
//!
//! [`set_if_newer`] is that check and the write in one Lua script; [`get`] reads back the value
//! and the token that wrote it. Both take any redis-rs async connection (a
//! `MultiplexedConnection`, a `ConnectionManager`, a cluster connection), not a
//! [`LockClient`](crate::LockClient): the resource may live on another Redis than the locks.
//!
//! ```no_run
//! # extern crate dlock_runtime as dlock;
//! # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
//! use dlock::fence::{self, Outcome};
//!
//! let mut store = dlock::redis::Client::open("redis://127.0.0.1:6380")
//!     .expect("a valid URL")
//!     .get_multiplexed_async_connection()
//!     .await
//!     .expect("connect");
//! let guard = client.lock("report:7").acquire().await?;
//! let totals = "..."; // computed while holding the lock
//! match fence::set_if_newer(&mut store, "report:7", guard.fencing_token(), totals).await? {
//!     Outcome::Written => println!("stored"),
//!     // Our hold ended while we worked and a later holder of `report:7` wrote since.
//!     Outcome::Stale { highest } => eprintln!("refused: token {highest} wrote after us"),
//!     // `Outcome` may grow: anything else is not a write either.
//!     other => eprintln!("not written: {other:?}"),
//! }
//! guard.release().await?;
//! if let Some(stored) = fence::get::<String, _>(&mut store, "report:7").await? {
//!     println!("{} (written with token {})", stored.value, stored.token);
//! }
//! # Ok(()) }
//! ```
//!
//! * **One key per resource**: the key you pass is a hash with two fields, `value` and
//!   `fence` (the highest token written). A script may only touch keys of one cluster slot, and
//!   one key always is in one slot whatever its name, so this works on a Redis Cluster without
//!   a hash tag, and the value and its fence change together or not at all.
//! * **An equal token writes**: a token names one hold of the lock, and only its holder has it.
//!   A holder that writes twice under one hold, or sends a write again because the first reply
//!   was lost, must not be refused by its own earlier write. (Concurrent tasks inside one hold
//!   that re-enter the lock share its token: the lock does not order them, and neither does the
//!   fence.) Two different holders get one token only where tokens stop rising altogether (a
//!   failover to a server whose clock is behind; see the guide's bounds), and there a lower
//!   token is as likely, which refusing equal ones would not catch either.
//! * **Tokens**: any `u64` from 1 up, compared exactly (as decimal strings, not Lua's doubles,
//!   which are exact only up to 2^53). Token 0 is refused as an argument: dlock never hands it
//!   out, so it is a token that was never set.
//! * **The fence lives as long as the key**: deleting the key, or letting it expire, forgets the
//!   highest token, and a late holder's write is then accepted. Keep the key while holders of
//!   older tokens may still be running; to delete a value, write a tombstone through
//!   [`set_if_newer`] instead. A TTL you set on the key is kept by writes.
//! * **Errors** are [`LockError`]s whose `name` is the key: [`LockError::InvalidArgument`] for
//!   an empty key or token 0, [`LockError::WrongType`] (role `fenced value`) when the key holds
//!   something else (another type, or a hash without a valid `fence` field: the script checks
//!   before it writes, so that key is left as it was), [`LockError::Redis`] with op
//!   `fence write` or `fence read` otherwise (its `url` reads `the caller's connection`: dlock
//!   does not know where your connection goes).
//!
//! # Values kept in SQL
//!
//! Keep a `fence` column beside the data and make the token part of the write's condition, so
//! the check and the write are one statement:
//!
//! ```sql
//! UPDATE reports SET body = $2, fence = $3 WHERE id = $1 AND fence <= $3
//! ```
//!
//! The row count is the answer. **1**: written. **0**: a holder with a higher token wrote this
//! row (or the row does not exist, below): the write is stale, so refuse it. Do not retry it,
//! do not fall back to a write without the condition, and treat the hold as lost. Never read
//! the fence first and write after: another holder can write in between; only the condition
//! inside the write is atomic. `fence <= $3` lets the same hold write again, like
//! [`set_if_newer`]; `fence < $3` allows one write per hold.
//!
//! A row that may not exist yet needs the insert fenced too. In PostgreSQL, one statement:
//!
//! ```sql
//! INSERT INTO reports (id, body, fence) VALUES ($1, $2, $3)
//! ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, fence = EXCLUDED.fence
//!     WHERE reports.fence <= EXCLUDED.fence
//! ```
//!
//! 1 row: inserted or updated; 0 rows: stale. Elsewhere: run the `UPDATE`; on 0 rows, insert
//! (with `ON CONFLICT DO NOTHING`, `INSERT IGNORE`, or catching the unique-key violation); if
//! the row appeared meanwhile (0 rows, or the violation), run the `UPDATE` once more: the row
//! exists now, so its answer is final. MySQL counts *changed* rows by default, so an equal
//! token writing the same data reports 0: connect with `CLIENT_FOUND_ROWS`, or use `<`.
//! Deleting the row forgets its fence (as with Redis above): mark it deleted instead.
//!
//! The token goes in a `bigint` column: dlock's tokens are the Redis server's clock in µs times
//! 1024 (about 2^61 today), below `i64::MAX` until the year 2255; convert with
//! `i64::try_from`, never `as`.
//! `examples/fenced_sql.rs` is the whole pattern with tokio-postgres.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::FromRedisValue;

use crate::error::LockError;
use crate::store::redis::backend::script::Script;

static SET_IF_NEWER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/fence/set_if_newer.lua")));

/// What [`LockError::WrongType`] says dlock keeps at a fenced key.
const ROLE: &str = "fenced value";

/// What [`LockError::Redis`] gives as the URL: the caller's connection is opaque to dlock.
const CALLER_CONNECTION: &str = "the caller's connection";

/// What [`set_if_newer`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The value and the token were stored: no higher token had been written at the key.
    Written,
    /// Refused, nothing changed: a higher token was written at the key, so the writer's hold
    /// ended and a later holder of the lock wrote since.
    Stale {
        /// The highest token written at the key.
        highest: u64,
    },
}

impl Outcome {
    /// True for [`Outcome::Written`].
    pub fn is_written(&self) -> bool {
        matches!(self, Outcome::Written)
    }
}

/// A value read back with [`get`], and the token that wrote it (the highest written at its key).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fenced<V> {
    /// The value.
    pub value: V,
    /// The fencing token of the write that stored it.
    pub token: u64,
}

/// Writes `value` at `key` unless a higher fencing token was written there, in one Lua script
/// (EVALSHA, re-sent as EVAL when the server lost the script).
///
/// `token` is the writer's [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)
/// (or [`CurrentLock::fencing_token`](crate::CurrentLock::fencing_token)). An equal token
/// writes: see the [module docs](self) for why, for the key's layout and for the errors.
pub async fn set_if_newer<C>(
    conn: &mut C,
    key: &str,
    token: u64,
    value: impl AsRef<[u8]>,
) -> Result<Outcome, LockError>
where
    C: ConnectionLike + Send,
{
    check_key(key)?;
    check_token(key, token)?;
    let mut call = SET_IF_NEWER.key(key);
    call.arg(token.to_string()).arg(value.as_ref());
    let (written, highest): (i64, String) = call
        .invoke_plain(conn)
        .await
        .map_err(|e| redis_error(key, "fence write", e))?;
    if written == 1 {
        return Ok(Outcome::Written);
    }
    // Digits only (the script checked), so only a number above u64::MAX fails here.
    let highest = highest.parse().map_err(|_| wrong_type(key))?;
    tracing::debug!(
        key,
        token,
        highest,
        "fenced write refused: a higher token wrote"
    );
    Ok(Outcome::Stale { highest })
}

/// Reads what [`set_if_newer`] stored at `key`: the value and its token, or `None` when nothing
/// was written there. `V` is any redis-rs reply type (`String`, `Vec<u8>`, a number, ...).
pub async fn get<V, C>(conn: &mut C, key: &str) -> Result<Option<Fenced<V>>, LockError>
where
    V: FromRedisValue,
    C: ConnectionLike + Send,
{
    check_key(key)?;
    // One HMGET reads both fields at once: no script needed to read them consistently.
    let (value, fence): (Option<V>, Option<String>) = redis::cmd("HMGET")
        .arg(key)
        .arg("value")
        .arg("fence")
        .query_async(conn)
        .await
        .map_err(|e| redis_error(key, "fence read", e))?;
    match (value, fence) {
        (None, None) => Ok(None),
        (Some(value), Some(fence)) => {
            let token = parse_token(&fence).ok_or_else(|| wrong_type(key))?;
            Ok(Some(Fenced { value, token }))
        }
        // One field without the other: a hash that set_if_newer did not write.
        _ => Err(wrong_type(key)),
    }
}

/// A stored fence as set_if_newer writes it: 1 ..= u64::MAX in plain decimal.
fn parse_token(fence: &str) -> Option<u64> {
    let well_formed = !fence.starts_with('0') && fence.bytes().all(|b| b.is_ascii_digit());
    fence.parse().ok().filter(|_| well_formed)
}

fn check_key(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::invalid(
            "",
            "the fenced key is empty: pass the Redis key of the resource the value belongs to",
        ));
    }
    Ok(())
}

fn check_token(key: &str, token: u64) -> Result<(), LockError> {
    if token == 0 {
        return Err(LockError::invalid(
            key,
            "fencing token 0: dlock hands out tokens from 1 up, so 0 is a token that was never \
             set; pass the hold's `fencing_token()`",
        ));
    }
    Ok(())
}

fn wrong_type(key: &str) -> LockError {
    LockError::WrongType {
        name: key.to_owned(),
        key: key.to_owned(),
        role: ROLE.to_owned(),
    }
}

/// A redis-rs error as a `LockError` naming the key. WRONGTYPE comes from the script's own
/// check (another type, or a hash without a fence) or from HMGET on another type.
fn redis_error(key: &str, op: &'static str, e: redis::RedisError) -> LockError {
    if e.code() == Some("WRONGTYPE") {
        return wrong_type(key);
    }
    LockError::Redis {
        name: key.to_owned(),
        op,
        url: CALLER_CONNECTION.to_owned(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_fences_parse_only_as_the_script_writes_them() {
        assert_eq!(parse_token("1"), Some(1));
        assert_eq!(parse_token("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "0",
            "007",
            "+5",
            "-1",
            "1e3",
            " 5",
            "18446744073709551616",
        ] {
            assert_eq!(parse_token(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bad_arguments_say_what_to_pass() {
        let e = check_key("").unwrap_err();
        assert!(matches!(e, LockError::InvalidArgument { .. }));
        assert!(e.to_string().contains("fenced key is empty"), "{e}");
        let e = check_token("report:7", 0).unwrap_err();
        assert!(e.to_string().contains("`report:7`"), "{e}");
        assert!(e.to_string().contains("fencing token 0"), "{e}");
        assert!(check_token("report:7", 1).is_ok());
    }
}
