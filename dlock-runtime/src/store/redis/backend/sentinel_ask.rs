//! Asking the sentinels where the primary is.
//!
//! Every sentinel is asked (`SENTINEL MASTER <name>`), in parallel, and the answer with the
//! highest `config-epoch` wins: a sentinel that has not yet heard of a failover (it learns
//! through hello messages, up to seconds later) names the old primary with the old epoch and
//! cannot send a client back to it. An answer whose flags say a failover is under way is not
//! followed: the sentinel leading it raises the epoch when the failover starts but keeps naming
//! the old primary until the promotion is done. The node named must then answer ROLE as
//! master.

use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{RedisResult, Value};
use tokio::time::Instant;

/// Bound on each question to a sentinel or to the node it names.
pub(crate) const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Once a majority of the sentinels answered, how long the rest may still take: a frozen
/// sentinel must not hold up a resolution for the whole `ASK_TIMEOUT`, but the one that led a
/// failover (which others learn of later) deserves a moment.
const GRACE: Duration = Duration::from_millis(200);

/// A primary the sentinels name, with the configuration epoch they name it under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub(crate) addr: (String, u16),
    pub(crate) epoch: u64,
}

/// One sentinel's view of the master.
#[derive(Debug)]
struct View {
    addr: (String, u16),
    epoch: u64,
    failing_over: bool,
}

/// The primary the sentinels agree on (the highest epoch among answers not in a failover),
/// checked with ROLE. `master_client` makes a client for an address.
pub(crate) async fn resolve(
    sentinels: &[redis::Client],
    name: &str,
    master_client: impl Fn(&(String, u16)) -> RedisResult<redis::Client>,
) -> RedisResult<Resolved> {
    let best = ask_all(sentinels, name).await?;
    let client = master_client(&best.addr)?;
    let mut node = tokio::time::timeout(ASK_TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| timed_out("connecting to the primary"))??;
    let role: Vec<Value> =
        tokio::time::timeout(ASK_TIMEOUT, redis::cmd("ROLE").query_async(&mut node))
            .await
            .map_err(|_| timed_out("asking the primary its ROLE"))??;
    match role.first() {
        Some(Value::BulkString(r)) if r.as_slice() == b"master" => Ok(best),
        _ => Err(redis::RedisError::from(std::io::Error::other(format!(
            "{}:{} is not a primary yet",
            best.addr.0, best.addr.1
        )))),
    }
}

/// Asks every sentinel at once; see the module docs for which answer wins.
async fn ask_all(sentinels: &[redis::Client], name: &str) -> RedisResult<Resolved> {
    let mut pending: FuturesUnordered<_> = sentinels.iter().map(|s| ask(s, name)).collect();
    let majority = sentinels.len() / 2 + 1;
    let (mut views, mut last_err) = (Vec::new(), None);
    let mut grace_until = None;
    loop {
        let next = match grace_until {
            Some(until) => match tokio::time::timeout_at(until, pending.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => pending.next().await,
        };
        match next {
            None => break,
            Some(Ok(view)) => views.push(view),
            Some(Err(e)) => last_err = Some(e),
        }
        if views.len() >= majority && grace_until.is_none() {
            grace_until = Some(Instant::now() + GRACE);
        }
    }
    best_of(&views).ok_or_else(|| {
        last_err.unwrap_or_else(|| {
            redis::RedisError::from(std::io::Error::other(if views.is_empty() {
                "no sentinel to ask".to_owned()
            } else {
                format!("every sentinel reports a failover of {name:?} under way")
            }))
        })
    })
}

/// The answer to follow: the highest epoch among those not in a failover.
fn best_of(views: &[View]) -> Option<Resolved> {
    views
        .iter()
        .filter(|v| !v.failing_over)
        .max_by_key(|v| v.epoch)
        .map(|v| Resolved {
            addr: v.addr.clone(),
            epoch: v.epoch,
        })
}

async fn ask(sentinel: &redis::Client, name: &str) -> RedisResult<View> {
    let question = async {
        let mut conn = sentinel.get_multiplexed_async_connection().await?;
        redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(name)
            .query_async::<Vec<String>>(&mut conn)
            .await
    };
    let fields = match tokio::time::timeout(ASK_TIMEOUT, question).await {
        Err(_) => return Err(timed_out("asking a sentinel")),
        Ok(Err(e)) if e.to_string().contains("No such master") => {
            return Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the sentinels know no master named {name:?}"),
            )))
        }
        Ok(r) => r?,
    };
    view_of(&fields).ok_or_else(|| {
        redis::RedisError::from(std::io::Error::other(format!(
            "a sentinel's SENTINEL MASTER {name:?} reply lacks ip, port or config-epoch"
        )))
    })
}

/// Reads the flat field/value list SENTINEL MASTER answers with.
fn view_of(fields: &[String]) -> Option<View> {
    let get = |key: &str| {
        fields
            .chunks(2)
            .find(|kv| kv.len() == 2 && kv[0] == key)
            .map(|kv| kv[1].as_str())
    };
    let flags = get("flags").unwrap_or("");
    Some(View {
        addr: (get("ip")?.to_owned(), get("port")?.parse().ok()?),
        epoch: get("config-epoch")?.parse().ok()?,
        failing_over: flags
            .split(',')
            .any(|f| f == "failover_in_progress" || f.starts_with("promoted")),
    })
}

pub(crate) fn timed_out(what: &str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("timed out {what}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(port: u16, epoch: u64, failing_over: bool) -> View {
        View {
            addr: ("127.0.0.1".into(), port),
            epoch,
            failing_over,
        }
    }

    #[test]
    fn the_highest_epoch_wins_over_a_lagging_sentinel() {
        let views = [view(1, 0, false), view(2, 1, false), view(1, 0, false)];
        assert_eq!(best_of(&views).unwrap().addr.1, 2);
    }

    #[test]
    fn a_sentinel_leading_a_failover_is_not_followed_to_the_old_primary() {
        // The leader raised the epoch but still names the old primary.
        let views = [view(1, 1, true), view(1, 0, false)];
        assert_eq!(
            best_of(&views).unwrap(),
            Resolved {
                addr: ("127.0.0.1".into(), 1),
                epoch: 0
            }
        );
        assert!(best_of(&[view(1, 1, true)]).is_none());
    }

    #[test]
    fn sentinel_master_replies_are_read_by_field_name() {
        let fields: Vec<String> = [
            "name",
            "m",
            "ip",
            "127.0.0.1",
            "port",
            "6380",
            "flags",
            "master,failover_in_progress",
            "config-epoch",
            "3",
        ]
        .map(String::from)
        .to_vec();
        let v = view_of(&fields).unwrap();
        assert_eq!((v.addr.1, v.epoch, v.failing_over), (6380, 3, true));
        assert!(view_of(&fields[..4]).is_none());
    }
}
