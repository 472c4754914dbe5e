//! The connection that carries replica-synced calls: a script and its WAIT.
//!
//! WAIT counts the replicas that acknowledged the writes *of the connection it is sent on*, so
//! it must follow the script on one connection; and it blocks that connection until it
//! answers, so it cannot share the client's command connections (every other request would
//! wait behind it) nor the watchdog's. Each client opens this one the first time a synced call
//! needs it, on the client's own thread. Synced calls of one client queue behind each other's
//! WAIT here: while a replica is down, each takes up to its bound.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::OnceCell;

use crate::backend::conn::Conn;
use crate::backend::library::Mode;
use crate::backend::topology::Topology;

pub(crate) struct SyncConn {
    topology: Topology,
    bg: Handle,
    mode: Arc<Mode>,
    response_timeout: Duration,
    connect_timeout: Duration,
    conn: OnceCell<Conn>,
}

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
            conn: OnceCell::new(),
        }
    }

    /// The connection, opened on first use (a failed open is tried again by the next call).
    /// It reconnects on its own afterwards, like the command connections.
    pub(crate) async fn get(&self) -> redis::RedisResult<Conn> {
        let open = || {
            self.topology.open_one(
                self.bg.clone(),
                self.mode.clone(),
                self.response_timeout,
                self.connect_timeout,
            )
        };
        self.conn.get_or_try_init(open).await.cloned()
    }
}
