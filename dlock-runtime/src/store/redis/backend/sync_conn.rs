//! The connections that carry replica-synced calls: a script and its WAIT.
//!
//! WAIT counts the replicas that acknowledged the writes *of the connection it is sent on*
//! (on Redis 7.0, everything written up to its last command), so it must follow the script on
//! one connection; and it blocks that connection until it answers, so it cannot share the
//! client's command connections (every other request would wait behind it) nor the
//! watchdog's. A client opens one connection per sync setting (replicas, bound) and purpose
//! (acquires, renewals) the first time a call needs it, on the client's own thread: a handle
//! waiting for two replicas does not hold up one waiting for one, and acquires do not hold up
//! renewals. Calls that share a connection queue behind each other's WAIT: while a replica is
//! down, the k-th call in line takes up to k times its bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::OnceCell;

use crate::settings::ReplicaSync;
use crate::store::redis::backend::conn::Conn;
use crate::store::redis::backend::library::Mode;
use crate::store::redis::backend::topology::Topology;

/// What a synced connection carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Purpose {
    Acquire,
    Renew,
}

pub(crate) struct SyncConn {
    topology: Topology,
    bg: Handle,
    mode: Arc<Mode>,
    response_timeout: Duration,
    connect_timeout: Duration,
    conns: Mutex<HashMap<(ReplicaSync, Purpose), Slot>>,
}

/// One connection, opened once by whichever call needs it first.
type Slot = Arc<OnceCell<Conn>>;

impl SyncConn {
    /// Opens nothing yet: see [`SyncConn::get`].
    pub(crate) fn new(
        topology: Topology,
        bg: Handle,
        mode: Arc<Mode>,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        SyncConn {
            topology,
            bg,
            mode,
            response_timeout,
            connect_timeout,
            conns: Mutex::default(),
        }
    }

    /// The connection for `sync` and `purpose`, opened on first use (a failed open is tried
    /// again by the next call). It reconnects on its own afterwards, like the command
    /// connections.
    pub(crate) async fn get(
        &self,
        sync: ReplicaSync,
        purpose: Purpose,
    ) -> redis::RedisResult<Conn> {
        let cell = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((sync, purpose))
            .or_default()
            .clone();
        let open = || {
            self.topology.open_one(
                self.bg.clone(),
                self.mode.clone(),
                self.response_timeout,
                self.connect_timeout,
            )
        };
        cell.get_or_try_init(open).await.cloned()
    }
}
