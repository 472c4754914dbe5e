//! The stores a shared test runs against: a throw-away Redis server and a throw-away
//! PostgreSQL server, each with the calls a test needs to break it.

use std::time::Duration;

use dlock::testing::{postgres_available, Persistence, PgServer, RedisServer};
use dlock::LockClient;

/// One throw-away server of one store.
pub enum Store {
    Redis(RedisServer),
    Postgres(PgServer),
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
    all
}

impl Store {
    /// "redis" or "postgres", for assertion messages.
    pub fn name(&self) -> &'static str {
        match self {
            Store::Redis(_) => "redis",
            Store::Postgres(_) => "postgres",
        }
    }

    pub fn url(&self) -> String {
        match self {
            Store::Redis(s) => s.url(),
            Store::Postgres(s) => s.url(),
        }
    }

    /// A client with default settings except the response timeout (`response`).
    pub async fn client_with(&self, response: Duration) -> LockClient {
        LockClient::builder(self.url())
            .response_timeout(response)
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
        }
    }

    pub fn resume(&self) {
        match self {
            Store::Redis(s) => s.cont().expect("SIGCONT redis-server"),
            Store::Postgres(s) => s.resume(),
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
        }
    }
}
