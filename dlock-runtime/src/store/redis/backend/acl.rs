//! Whether the ACL user may use dlock's pub/sub channels.
//!
//! Since Redis 7 a new ACL user gets no channels (`acl-pubsub-default resetchannels`). Such a
//! user can take and free locks, but every release's PUBLISH is refused and the subscriber's
//! SUBSCRIBEs too, so waiters of other clients only wake at the holder's lease end. A client
//! checks once, when it is built: one PUBLISH on a command connection, on a channel under the
//! key prefix. Channel rules (`&pattern`) govern PUBLISH and SUBSCRIBE alike, so this one
//! answer covers both; a user denied the SUBSCRIBE *command* alone is met by the subscriber,
//! which logs the refusal and leaves its waiters to PTTL retries. No extra connection is
//! opened for the check (a client's connections stay what the docs count). `ACL DRYRUN` would
//! say the same without sending anything, but a user without admin rights may not run it.

use std::time::Duration;

use redis::AsyncCommands;

use crate::store::redis::backend::conn::Conn;

/// Why the check failed.
pub(crate) enum Refused {
    /// Redis answered NOPERM to the PUBLISH; its own words follow.
    Denied(String),
    /// No answer about rights: another error, or no reply in time.
    Unanswered(redis::RedisError),
}

/// Sends one PUBLISH on `conn` on `channel`, bounded by `timeout`.
pub(crate) async fn check_channel(
    conn: &mut Conn,
    channel: &str,
    timeout: Duration,
) -> Result<(), Refused> {
    let publish = conn.publish::<_, _, i64>(channel, "dlock channel check");
    match tokio::time::timeout(timeout, publish).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.code() == Some("NOPERM") => Err(Refused::Denied(e.to_string())),
        Ok(Err(e)) => Err(Refused::Unanswered(e)),
        Err(_) => Err(Refused::Unanswered(redis::RedisError::from(
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer to PUBLISH within {timeout:?}"),
            ),
        ))),
    }
}
