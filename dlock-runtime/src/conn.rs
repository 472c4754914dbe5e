//! The topology seam: one connection type for every deployment dlock talks to.
//!
//! Commands, the watchdog, orphan clean-up and the stock helpers send through [`Conn`]; the
//! waiters' subscriber gets its `redis::Client` from [`Topology`]. Nothing above this module
//! knows whether it talks to one server, a cluster or a sentinel-managed primary.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::background::Background;
use crate::builder::LockClientBuilder;
use crate::error::LockError;

/// Where the client's Redis is, as the builder described it.
pub(crate) enum Topology {
    /// One server (or anything reached through one address).
    Single {
        client: redis::Client,
        /// For errors and logs: the URL with the password removed.
        url: String,
    },
}

impl Topology {
    pub(crate) fn from_builder(b: &LockClientBuilder) -> Result<Self, LockError> {
        let url = redact(&b.url);
        let client = redis::Client::open(b.url.as_str()).map_err(|source| LockError::Connect {
            url: url.clone(),
            source,
        })?;
        Ok(Topology::Single { client, url })
    }

    /// The deployment's address for messages, passwords removed.
    pub(crate) fn display_url(&self) -> String {
        match self {
            Topology::Single { url, .. } => url.clone(),
        }
    }

    /// Opens the command connections. On a multi-thread runtime (a service's `#[tokio::main]`)
    /// they are driven by that runtime, which saves two thread wake-ups per command; a
    /// second set, made on the client's own thread, connects only if that runtime shuts down
    /// while the client lives on. On any other runtime (a `#[tokio::test]`, which a `static`
    /// client may outlive) they are driven by the client's own thread from the start.
    pub(crate) async fn open_pool(
        &self,
        bg: &Background,
        n: usize,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> redis::RedisResult<Pool> {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(connect_timeout))
            .set_number_of_retries(2);
        let here = tokio::runtime::Handle::current();
        if here.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            let (client, config) = (self.client(), config);
            let conns = bg.run(open_managers(client, config, n)).await??;
            return Ok(Pool::new(conns, None));
        }
        let front = open_managers(self.client(), config.clone(), n).await?;
        // Lazy: no socket until the caller's runtime is gone and they are first used. Made
        // inside the client's runtime so redis-rs drives and reconnects them there.
        let _inside = bg.handle().enter();
        let back = (0..n)
            .map(|_| {
                ConnectionManager::new_lazy_with_config(self.client(), config.clone())
                    .map(Conn::Single)
            })
            .collect::<redis::RedisResult<Vec<_>>>()?;
        let alive = Arc::new(AtomicBool::new(true));
        here.spawn(Canary(alive.clone()).watch());
        Ok(Pool::new(back, Some((front, alive))))
    }

    fn client(&self) -> redis::Client {
        match self {
            Topology::Single { client, .. } => client.clone(),
        }
    }

    /// The client the waiters' subscriber connects with.
    pub(crate) fn pubsub_client(&self) -> redis::Client {
        match self {
            Topology::Single { client, .. } => client.clone(),
        }
    }
}

async fn open_managers(
    client: redis::Client,
    config: ConnectionManagerConfig,
    n: usize,
) -> redis::RedisResult<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(Conn::Single(
            ConnectionManager::new_with_config(client.clone(), config.clone()).await?,
        ));
    }
    Ok(conns)
}

/// Lives on the runtime that drives the front connections; dropped (when that runtime shuts
/// down and drops its tasks) it switches the pool over to the client's own connections.
struct Canary(Arc<AtomicBool>);

impl Canary {
    async fn watch(self) {
        std::future::pending::<()>().await;
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The command connections, used round-robin.
pub(crate) struct Pool {
    /// Driven by the caller's runtime while it is alive (see [`Topology::open_pool`]).
    front: Option<(Vec<Conn>, Arc<AtomicBool>)>,
    /// Driven by the client's own thread.
    back: Vec<Conn>,
    next: AtomicUsize,
}

impl Pool {
    fn new(back: Vec<Conn>, front: Option<(Vec<Conn>, Arc<AtomicBool>)>) -> Self {
        Pool {
            front,
            back,
            next: AtomicUsize::new(0),
        }
    }

    /// A command connection. Clones share the underlying socket, so a command sent on a clone
    /// is ordered after everything sent earlier on it (used by orphan clean-up).
    pub(crate) fn get(&self) -> Conn {
        let conns = match &self.front {
            Some((front, alive)) if alive.load(Ordering::Acquire) => front,
            _ => &self.back,
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        conns[i].clone()
    }
}

/// A command connection to the deployment: multiplexed, reconnecting, cheap to clone. Clones
/// share the socket(s), so a command sent on a clone is ordered after everything sent earlier
/// on it to the same server (orphan clean-up relies on that).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
        }
    }
}

/// `redis://user:secret@host` -> `redis://user:***@host`, so URLs can go into errors and logs.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.find('@') else {
        return url.to_owned();
    };
    let creds = &rest[..at];
    let user = creds.split(':').next().unwrap_or("");
    if creds.contains(':') {
        format!("{}{user}:***{}", &url[..scheme_end], &rest[at..])
    } else {
        format!("{}***{}", &url[..scheme_end], &rest[at..])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_passwords() {
        assert_eq!(super::redact("redis://a:pw@h:1"), "redis://a:***@h:1");
        assert_eq!(super::redact("redis://pw@h"), "redis://***@h");
        assert_eq!(super::redact("redis://h:1/0"), "redis://h:1/0");
    }
}
