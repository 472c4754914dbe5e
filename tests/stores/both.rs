//! The stores a shared test runs against: a throw-away Redis server, a throw-away PostgreSQL
//! server and a throw-away ZooKeeper, each with the calls a test needs to break it. A call a
//! store has no way to make (killing ZooKeeper's client connections from the server's side)
//! says so: [`Store::can`] tells a test first, and the test prints what it skipped.

use std::time::Duration;

use std::sync::Mutex;

use dlock::testing::{
    postgres_available, zookeeper_available, Persistence, PgServer, RedisServer, ZkServer,
};
use dlock::LockClient;

/// One throw-away server of one store.
pub enum Store {
    Redis(RedisServer),
    Postgres(PgServer),
    /// Behind a mutex: its signals take `&mut`, a test holds the store by `&`.
    Zookeeper(Mutex<ZkServer>),
}

/// The session timeout of the tests' ZooKeeper clients: every hold's lease there is two
/// thirds of it (2 s), like the short leases the other stores' fault tests use.
pub const ZK_SESSION: Duration = Duration::from_secs(3);

/// What a test may need of a store beyond locking.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Need {
    /// The semaphore (ZooKeeper: not offered yet, refused by name).
    Semaphore,
    /// Closing the clients' connections from the server's side.
    KillConnections,
    /// Reading a lock's owner ids as the store keeps them.
    Owners,
    /// The fair lock's queue as the store keeps it.
    FairQueue,
    /// `dlock::inspect::stored_locks`: the store answers queries of its locks (Redis does not:
    /// its keys are scanned and read by kind).
    StoredLocks,
    /// Every kind's waiters in `stored_locks`' `queue`, in line order (ZooKeeper: a waiter's
    /// child is its place; PostgreSQL's waiters LISTEN on sessions no other session sees, so
    /// only its fair queue is visible).
    WaitersInLine,
}

/// A Redis server and, where PostgreSQL is installed, a PostgreSQL server (else the test says
/// `skipped: ...` for PostgreSQL: CI installs it, so nothing is skipped there).
pub fn stores() -> Vec<Store> {
    // Persistent, so a restart keeps what was written, as PostgreSQL does.
    let redis = RedisServer::start_persistent(Persistence::Aof).expect("start redis-server");
    let mut all = vec![Store::Redis(redis)];
    if postgres_available() {
        all.push(Store::Postgres(
            PgServer::start().expect("start PostgreSQL"),
        ));
    } else {
        super::common::skipped("the PostgreSQL store", "no PostgreSQL server binaries");
    }
    if zookeeper_available() {
        all.push(Store::Zookeeper(Mutex::new(
            ZkServer::start().expect("start ZooKeeper"),
        )));
    } else {
        super::common::skipped(
            "the ZooKeeper store",
            "no ZooKeeper server (java and its jar)",
        );
    }
    all
}

impl Store {
    /// "redis", "postgres" or "zookeeper", for assertion messages.
    pub fn name(&self) -> &'static str {
        match self {
            Store::Redis(_) => "redis",
            Store::Postgres(_) => "postgres",
            Store::Zookeeper(_) => "zookeeper",
        }
    }

    /// Whether this store gives what a test needs beyond locking; if not, the test's
    /// `skipped: ...` line says so (the refusals themselves are tested in `errors.rs`).
    pub fn can(&self, need: Need) -> bool {
        let can = match (self, need) {
            (Store::Redis(_), Need::StoredLocks | Need::WaitersInLine) => false,
            (Store::Postgres(_), Need::WaitersInLine) => false,
            (Store::Zookeeper(_), Need::Semaphore | Need::StoredLocks | Need::WaitersInLine) => {
                true
            }
            (Store::Zookeeper(_), _) => false,
            _ => true,
        };
        if !can {
            super::common::skipped(
                &format!("{need:?} on {}", self.name()),
                "not offered by this store",
            );
        }
        can
    }

    pub fn url(&self) -> String {
        match self {
            Store::Redis(s) => s.url(),
            Store::Postgres(s) => s.url(),
            Store::Zookeeper(s) => zk(s).url(),
        }
    }

    /// A client with default settings except the response timeout (`response`).
    pub async fn client_with(&self, response: Duration) -> LockClient {
        LockClient::builder(self.url())
            .response_timeout(response)
            .zookeeper_session_timeout(ZK_SESSION)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", self.name()))
    }

    pub async fn client(&self) -> LockClient {
        self.client_with(Duration::from_secs(2)).await
    }

    /// Stops every process of the server (SIGSTOP): it keeps its sockets and answers nothing.
    pub fn pause(&self) {
        match self {
            Store::Redis(s) => s.stop().expect("SIGSTOP redis-server"),
            Store::Postgres(s) => s.pause(),
            Store::Zookeeper(s) => zk(s).stop().expect("SIGSTOP ZooKeeper"),
        }
    }

    pub fn resume(&self) {
        match self {
            Store::Redis(s) => s.cont().expect("SIGCONT redis-server"),
            Store::Postgres(s) => s.resume(),
            Store::Zookeeper(s) => zk(s).cont().expect("SIGCONT ZooKeeper"),
        }
    }

    /// Kills the server (SIGKILL: every connection drops) and starts it again from what it
    /// wrote to disk (Redis: its AOF, fsynced before each reply; PostgreSQL: its WAL).
    pub fn crash_and_restart(&mut self) {
        match self {
            Store::Redis(s) => s.restart().expect("restart redis-server"),
            Store::Postgres(s) => {
                s.kill();
                s.start_again().expect("restart PostgreSQL");
            }
            // Its snapshot and transaction log keep the nodes and the sessions.
            Store::Zookeeper(s) => zk(s).restart().expect("restart ZooKeeper"),
        }
    }
}

/// The ZooKeeper server behind its mutex.
fn zk(s: &Mutex<ZkServer>) -> std::sync::MutexGuard<'_, ZkServer> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl Store {
    /// The owner ids a plain lock's `key` holds, as the store keeps them (Redis: the hash's
    /// fields; PostgreSQL: the holder of its `plain_locks` row, and the `holds` rows a schema
    /// of version 4 kept it in).
    pub fn owners(&self, key: &str) -> Vec<String> {
        match self {
            Store::Redis(s) => s
                .cli(&["HKEYS", key])
                .expect("HKEYS")
                .lines()
                .map(str::to_owned)
                .collect(),
            Store::Postgres(s) => s
                .psql(&format!(
                    "SELECT owner FROM dlock.holds WHERE key = '{k}' UNION ALL \
                     SELECT owner FROM dlock.plain_locks WHERE key = '{k}' \
                       AND owner IS NOT NULL ORDER BY owner",
                    k = key.replace('\'', "''")
                ))
                .expect("SELECT owner")
                .lines()
                .map(str::to_owned)
                .collect(),
            Store::Zookeeper(_) => panic!("owners: ask `can(Need::Owners)` first"),
        }
    }
}

impl Store {
    /// Kills the server (SIGKILL) and leaves it down: its port refuses connections until
    /// [`Store::start_again`].
    pub fn kill(&mut self) {
        match self {
            Store::Redis(s) => s.kill(),
            Store::Postgres(s) => s.kill(),
            Store::Zookeeper(s) => zk(s).kill(),
        }
    }

    /// Starts a killed server again on its port, from what it wrote to disk.
    pub fn start_again(&mut self) {
        match self {
            Store::Redis(s) => s.restart().expect("restart redis-server"),
            Store::Postgres(s) => s.start_again().expect("restart PostgreSQL"),
            Store::Zookeeper(s) => zk(s).restart().expect("restart ZooKeeper"),
        }
    }
}

impl Store {
    /// The server's TCP port (a proxy in front of it forwards there).
    pub fn port(&self) -> u16 {
        match self {
            Store::Redis(s) => s.port(),
            Store::Postgres(s) => s.port(),
            Store::Zookeeper(s) => zk(s).port(),
        }
    }

    /// The URL of this store's server reached through a proxy listening on `port`.
    pub fn url_via(&self, port: u16) -> String {
        match self {
            Store::Redis(_) => format!("redis://127.0.0.1:{port}"),
            Store::Postgres(_) => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            Store::Zookeeper(_) => format!("zk://127.0.0.1:{port}"),
        }
    }

    /// Closes every client connection from the server's side (Redis: `CLIENT KILL` of every
    /// normal and pub/sub client; PostgreSQL: `pg_terminate_backend` of every client
    /// backend), as an operator or a failing load balancer would. Returns how many it ended.
    pub fn kill_connections(&self) -> usize {
        match self {
            Store::Redis(s) => ["normal", "pubsub"]
                .iter()
                .map(|t| {
                    let out = s.cli(&["CLIENT", "KILL", "TYPE", t]).expect("CLIENT KILL");
                    out.trim().parse::<usize>().unwrap_or(0)
                })
                .sum(),
            Store::Postgres(s) => {
                let out = s
                    .psql(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                    )
                    .expect("pg_terminate_backend");
                out.trim().parse().expect("a count")
            }
            Store::Zookeeper(_) => {
                panic!("kill_connections: ask `can(Need::KillConnections)` first")
            }
        }
    }

    /// The ids of the connections that are subscribed to some release channel right now
    /// (Redis: pub/sub clients with a subscription; PostgreSQL: sessions whose last
    /// statement was a LISTEN; the listener's next health query, 2 s later, replaces that).
    pub fn listening_connections(&self) -> Vec<String> {
        match self {
            Store::Redis(s) => {
                let list = s
                    .cli(&["CLIENT", "LIST", "TYPE", "pubsub"])
                    .expect("CLIENT LIST");
                list.lines()
                    .filter(|line| {
                        line.split(' ').any(|f| {
                            f.split_once('=').is_some_and(|(k, v)| {
                                matches!(k, "sub" | "ssub" | "psub")
                                    && v.parse::<u64>().is_ok_and(|n| n > 0)
                            })
                        })
                    })
                    .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
                    .map(str::to_owned)
                    .collect()
            }
            Store::Postgres(s) => s
                .psql(
                    "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' \
                     AND query LIKE 'LISTEN %'",
                )
                .expect("pg_stat_activity")
                .lines()
                .map(str::to_owned)
                .collect(),
            // Watches, not a connection: nothing listens.
            Store::Zookeeper(_) => Vec::new(),
        }
    }
}

impl Store {
    /// Places in the queue of the fair lock stored at `key` (a fair lock's `Lock::key`),
    /// counted as the store keeps them: a dead waiter's place counts until an op on the lock
    /// drops it. PostgreSQL counts every fair lock's queue: each test server holds one.
    pub fn fair_queue(&self, key: &str) -> usize {
        let out = match self {
            // A connection of its own rather than redis-cli, whose arguments cannot hold the
            // NUL a lock name may have.
            Store::Redis(s) => {
                let mut conn = (dlock::redis::Client::open(s.url()))
                    .and_then(|c| c.get_connection())
                    .expect("connect to redis");
                let n: usize = (dlock::redis::cmd("ZCARD").arg(format!("{key}:queue")))
                    .query(&mut conn)
                    .expect("ZCARD");
                return n;
            }
            Store::Postgres(s) => s.psql("SELECT count(*) FROM dlock.fair_queue"),
            Store::Zookeeper(_) => panic!("fair_queue: ask `can(Need::FairQueue)` first"),
        };
        let out = out.expect("read the fair queue");
        out.trim().parse().expect("a count")
    }

    /// The keep-alive deadlines of the queue of the fair lock at `key`, as the store prints
    /// them: they change at every visit of a waiter keeping its place.
    pub fn fair_keep_alive(&self, key: &str) -> String {
        match self {
            Store::Redis(s) => s.cli(&["ZRANGE", &format!("{key}:alive"), "0", "-1", "WITHSCORES"]),
            Store::Postgres(s) => {
                s.psql("SELECT owner, keep_until FROM dlock.fair_queue ORDER BY owner")
            }
            Store::Zookeeper(_) => panic!("fair_keep_alive: ask `can(Need::FairQueue)` first"),
        }
        .expect("read the fair queue's keep-alive deadlines")
    }
}
