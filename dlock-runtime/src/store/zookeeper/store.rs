//! `ZkStore`: this client's ZooKeeper session (a new one when the server expired it), and the
//! children its owners made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, SessionState};

use super::errors::ZkError;
use super::url::ZkUrl;

/// What the waiters and the watchdog hear from the store.
pub(crate) struct ZkHooks {
    /// A watched child changed or went: wake the waiter of this channel to look again.
    pub(crate) dispatch: Box<dyn Fn(&str) + Send + Sync>,
    /// The session ended and a new one replaced it: every child of the old one is gone, so
    /// every waiter must ask again and every holder learn it lost its lock.
    pub(crate) session_replaced: Box<dyn Fn() + Send + Sync>,
}

/// One owner's child of a lock.
#[derive(Debug)]
pub(crate) struct Owned {
    /// The child's whole path; empty while its create is unanswered (it may exist: found by
    /// `protected` under `lock`).
    pub(crate) path: String,
    /// The lock's node.
    pub(crate) lock: String,
    /// The child's protected name prefix (`_c_<uuid>-lock-`).
    pub(crate) protected: String,
    /// Its creation zxid: the hold's fencing token.
    pub(crate) czxid: i64,
    /// Holds of its owner (0 while it waits, re-entries counted here).
    pub(crate) count: i64,
    /// Re-entries in flight that may be undone once (see `Link::undo_reentry`).
    pub(crate) markers: Vec<String>,
    /// The session that made it: an older session's child is gone.
    pub(crate) session: i64,
    /// The child this owner's waiter watches (one watch task per child it waits behind).
    pub(crate) watched: Option<String>,
}

/// A `zk+tls://` client's TLS settings. Without the `zookeeper-tls` feature there are none: the
/// settings refuse a `zk+tls://` URL before a store is opened.
#[cfg(feature = "zookeeper-tls")]
pub(crate) type Tls = super::tls::ZkTls;
#[cfg(not(feature = "zookeeper-tls"))]
pub(crate) type Tls = std::convert::Infallible;

/// Bound on reopening a session after the server expired the last one.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub(crate) struct ZkStore {
    url: ZkUrl,
    /// TLS to every host (a `zk+tls://` URL), on every session opened.
    tls: Option<Tls>,
    asked_timeout: Duration,
    connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    client: RwLock<Client>,
    /// This client's owners that have a child somewhere, by owner id.
    pub(crate) owners: Mutex<HashMap<String, Owned>>,
    hooks: OnceLock<ZkHooks>,
    rt: Handle,
    /// Told when a new session replaced an ended one.
    replaced: tokio::sync::Notify,
}

impl ZkStore {
    /// Opens a session (on the client's own runtime, `rt`, which drives it from then on) and
    /// starts following it: a session the server expired is replaced, until `stop`.
    pub(crate) async fn connect(
        url: ZkUrl,
        tls: Option<Tls>,
        session_timeout: Duration,
        connect_timeout: Duration,
        response_timeout: Duration,
        rt: &Handle,
        stop: CancellationToken,
    ) -> Result<Arc<Self>, ZkError> {
        let client = open(&url, tls.as_ref(), session_timeout, connect_timeout, rt).await?;
        let store = Arc::new(ZkStore {
            url,
            tls,
            asked_timeout: session_timeout,
            connect_timeout,
            response_timeout,
            client: RwLock::new(client),
            owners: Mutex::default(),
            hooks: OnceLock::new(),
            rt: rt.clone(),
            replaced: tokio::sync::Notify::new(),
        });
        rt.spawn(follow_session(Arc::downgrade(&store), stop));
        Ok(store)
    }

    pub(crate) fn set_hooks(&self, hooks: ZkHooks) {
        let _ = self.hooks.set(hooks);
    }

    /// The session's client (clones share it).
    pub(crate) fn client(&self) -> Client {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The session's client, or, while an ended session is being replaced, the new one once it
    /// is open (waited for at most the response timeout): a request sent meanwhile would only
    /// fail at once with "session expired", however long its caller may wait.
    pub(crate) async fn live_client(&self) -> Client {
        let client = self.client();
        if !client.state().is_terminated() {
            return client;
        }
        let replaced = self.replaced.notified();
        tokio::pin!(replaced);
        replaced.as_mut().enable();
        let client = self.client();
        if !client.state().is_terminated() {
            return client;
        }
        let _ = tokio::time::timeout(self.response_timeout, replaced).await;
        self.client()
    }

    /// Waits (until `until`) for the session's client to be connected again after its
    /// connection broke: true once it is, false if the session ended or time ran out.
    pub(crate) async fn reconnected(&self, until: tokio::time::Instant) -> bool {
        let mut watcher = self.client().state_watcher();
        let mut state = watcher.state();
        loop {
            match state {
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => return true,
                SessionState::Disconnected => {}
                _ => return false,
            }
            match tokio::time::timeout_at(until, watcher.changed()).await {
                Ok(next) => state = next,
                Err(_) => return false,
            }
        }
    }

    /// The session timeout the ensemble granted.
    pub(crate) fn session_timeout(&self) -> Duration {
        self.client().session_timeout()
    }

    /// Every hold's lease on this store: two thirds of the granted session timeout. The server
    /// expires a session no earlier than a whole timeout after the last request it received,
    /// which came at or after its send; a holder that heard nothing for two thirds of that reads
    /// lost with a third to spare (the server's one-tick rounding, scheduling, clock rates).
    pub(crate) fn lease(&self) -> Duration {
        self.session_timeout() * 2 / 3
    }

    pub(crate) fn rt(&self) -> &Handle {
        &self.rt
    }

    /// Wakes the waiter of `channel` (a watched child changed or went).
    pub(crate) fn dispatch(&self, channel: &str) {
        if let Some(h) = self.hooks.get() {
            (h.dispatch)(channel);
        }
    }

    /// Deletes the children of `owners`, holds the machinery read lost (their validity ran
    /// out before a renewal got through: a paused or cut-off holder). Their session may well
    /// be alive, and then the child would keep the lock held by an owner that believes it is
    /// not: deleted, the next in line takes it, as a Redis lease ends. Retried through passing
    /// faults for as long as the session that made them lives (a session that ends takes them
    /// with it).
    /// `owners`: entries of the owners map (`link::entry_key`).
    pub(crate) fn abandon(self: &Arc<Self>, owners: Vec<String>) {
        let store = Arc::downgrade(self);
        self.rt.spawn(async move {
            for owner in owners {
                let mut pause = Duration::from_millis(50);
                loop {
                    let Some(s) = store.upgrade() else { return };
                    let client = s.client();
                    let (child, lock, protected) = match s.owners().get(&owner) {
                        Some(o) if o.session == client.session_id().0 => {
                            (o.path.clone(), o.lock.clone(), o.protected.clone())
                        }
                        _ => break,
                    };
                    let deleted = tokio::time::timeout(
                        s.response_timeout,
                        delete_child(&client, &child, &lock, &protected),
                    )
                    .await;
                    match deleted {
                        Ok(Ok(())) => {
                            s.owners().remove(&owner);
                            break;
                        }
                        // A refusal (no rights) will not change: the session's end frees it.
                        Ok(Err(e))
                            if !super::errors::ZkError::client("", e.clone()).is_link_error() =>
                        {
                            tracing::warn!(error = %e, lock, "dlock: cannot delete a lost hold's child; it goes with the session");
                            break;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, lock, "dlock: deleting a lost hold's child failed; trying again");
                        }
                        Err(_) => {}
                    }
                    drop(s);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_BACKOFF);
                }
            }
        });
    }

    /// The owners map; poisoning is ignored (its entries stay consistent per operation).
    pub(crate) fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owned>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Deletes the child `child` (gone already counts as done), or, when its create was never
/// answered (`child` empty), every child of `lock` with the `protected` name prefix.
pub(crate) async fn delete_child(
    client: &Client,
    child: &str,
    lock: &str,
    protected: &str,
) -> Result<(), zookeeper_client::Error> {
    let children = if child.is_empty() {
        match client.list_children(lock).await {
            Ok(c) => c
                .into_iter()
                .filter(|c| c.starts_with(protected))
                .map(|c| format!("{lock}/{c}"))
                .collect(),
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        }
    } else {
        vec![child.to_owned()]
    };
    for c in children {
        match client.delete(&c, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens a session: the client's session task runs on `rt`, the runtime it is spawned from.
/// With `tls`, over TLS to every host; a failed handshake is repeated to say why (`tls.rs`),
/// within what is left of the connect timeout.
async fn open(
    url: &ZkUrl,
    tls: Option<&Tls>,
    session_timeout: Duration,
    connect_timeout: Duration,
    rt: &Handle,
) -> Result<Client, ZkError> {
    let (connect_string, digest) = (url.connect_string.clone(), url.digest.clone());
    let doing = match tls {
        Some(_) => format!("opening a session to {} over TLS", url.connect_string),
        None => format!("opening a session to {}", url.connect_string),
    };
    let started = tokio::time::Instant::now();
    let mut connector = Client::connector()
        .with_session_timeout(session_timeout)
        .with_connection_timeout(connect_timeout.min(session_timeout))
        .with_fail_eagerly();
    if let Some(d) = digest {
        connector = connector.with_auth("digest", d.as_bytes());
    }
    #[cfg(feature = "zookeeper-tls")]
    if let Some(tls) = tls {
        super::tls::check_hosts(&connect_string).map_err(|why| ZkError::refused(&doing, why))?;
        // Before the client builds its rustls config (see `tls.rs`).
        super::tls::ensure_provider();
        connector = connector.with_tls(tls.options().map_err(|why| ZkError::refused(&doing, why))?);
    }
    let secure = tls.is_some();
    let opened = rt.spawn(async move {
        let connecting = async move {
            #[cfg(feature = "zookeeper-tls")]
            if secure {
                return connector.secure_connect(&connect_string).await;
            }
            connector.connect(&connect_string).await
        };
        tokio::time::timeout(connect_timeout, connecting).await
    });
    let failed = match opened.await {
        Ok(Ok(Ok(client))) => return Ok(client),
        Ok(Ok(Err(e))) => ZkError::client(&doing, e),
        Ok(Err(_)) => ZkError::timeout(&doing),
        Err(e) => {
            return Err(ZkError::refused(
                doing,
                format!("the client's thread failed: {e}"),
            ))
        }
    };
    #[cfg(feature = "zookeeper-tls")]
    if let Some(tls) = tls {
        // The client says only that no host could be reached; the handshake says why, in
        // what is left of the connect timeout (nothing is left when the servers were silent
        // all along, and then a handshake would learn nothing more).
        let left = connect_timeout.saturating_sub(started.elapsed());
        if left >= Duration::from_millis(100) {
            let (tls, hosts) = (tls.clone(), url.connect_string.clone());
            let why = tokio::task::spawn_blocking(move || super::tls::diagnose(&tls, &hosts, left))
                .await
                .ok()
                .flatten();
            if let Some(why) = why {
                return Err(ZkError::refused(doing, why));
            }
        }
    }
    // Both are read only with the `zookeeper-tls` feature.
    let _ = (started, secure);
    Err(failed)
}

/// Follows the session: when the server expires it (or refuses its authentication), opens a
/// new one and tells the hooks, until `stop` or the store is gone.
async fn follow_session(store: Weak<ZkStore>, stop: CancellationToken) {
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(mut watcher) = store.upgrade().map(|s| s.client().state_watcher()) else {
            return;
        };
        // A session that ended before it was watched says so at once: `changed` would wait
        // for a change that never comes.
        let ended_already = watcher.peek_state().is_terminated();
        if !ended_already {
            loop {
                let state = tokio::select! {
                    () = stop.cancelled() => return,
                    state = watcher.changed() => state,
                };
                if state.is_terminated() {
                    tracing::warn!(
                        ?state,
                        "dlock: the ZooKeeper session ended; opening a new one"
                    );
                    break;
                }
                if state == SessionState::Disconnected {
                    tracing::debug!(
                        "dlock: the ZooKeeper connection dropped; the client reconnects"
                    );
                }
            }
        }
        loop {
            let Some(s) = store.upgrade() else { return };
            match open(
                &s.url,
                s.tls.as_ref(),
                s.asked_timeout,
                s.connect_timeout,
                &s.rt,
            )
            .await
            {
                Ok(client) => {
                    *s.client.write().unwrap_or_else(|e| e.into_inner()) = client;
                    s.replaced.notify_waiters();
                    pause = Duration::from_millis(50);
                    if let Some(h) = s.hooks.get() {
                        (h.session_replaced)();
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "dlock: cannot open a new ZooKeeper session yet");
                    drop(s);
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}
