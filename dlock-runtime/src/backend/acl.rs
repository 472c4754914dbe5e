//! Whether the ACL user may use dlock's pub/sub channels.
//!
//! Since Redis 7 a new ACL user gets no channels (`acl-pubsub-default resetchannels`). Such a
//! user can take and free locks, but every release's PUBLISH is refused and the subscriber's
//! SUBSCRIBEs too, so waiters of other clients only wake at the holder's lease end. A client
//! checks once, when it is built: one PUBLISH on a command connection and one SUBSCRIBE on a
//! short-lived pub/sub connection, both on a channel under the key prefix. `ACL DRYRUN` would
//! say the same without sending anything, but a user without admin rights may not run it.

use std::time::Duration;

use redis::AsyncCommands;

use crate::backend::conn::Conn;

/// What the user may not do on the probed channel.
pub(crate) enum Refused {
    /// Redis answered NOPERM to this command (`PUBLISH` or `SUBSCRIBE`); its own words follow.
    Denied(&'static str, String),
    /// The probe could not be sent: the connection failed or did not answer in time.
    Unreachable(redis::RedisError),
}

/// Sends one PUBLISH on `conn`, and one SUBSCRIBE through the first of `pubsub` (the nodes
/// the subscriber may use, in its order) that answers, on `channel`; each bounded by
/// `timeout`.
pub(crate) async fn check_channel(
    conn: &mut Conn,
    pubsub: &[redis::Client],
    channel: &str,
    timeout: Duration,
) -> Result<(), Refused> {
    let publish = async {
        let _: i64 = conn.publish(channel, "dlock channel check").await?;
        Ok(())
    };
    bounded(timeout, "PUBLISH", publish).await?;
    let mut unreachable = None;
    for client in pubsub {
        let subscribe = async {
            let mut sub = client.get_async_pubsub().await?;
            sub.subscribe(channel).await?;
            sub.unsubscribe(channel).await
        };
        match bounded(timeout, "SUBSCRIBE", subscribe).await {
            Err(Refused::Unreachable(e)) => unreachable = Some(e),
            answered => return answered,
        }
    }
    unreachable.map_or(Ok(()), |e| Err(Refused::Unreachable(e)))
}

async fn bounded(
    timeout: Duration,
    command: &'static str,
    call: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> Result<(), Refused> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.code() == Some("NOPERM") => Err(Refused::Denied(command, e.to_string())),
        Ok(Err(e)) => Err(Refused::Unreachable(e)),
        Err(_) => Err(Refused::Unreachable(redis::RedisError::from(
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer to {command} within {timeout:?}"),
            ),
        ))),
    }
}
