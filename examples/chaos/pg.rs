//! The PostgreSQL deployment (`--store postgres`): a primary with a streaming standby, behind
//! a switch the clients' proxies forward to; its faults (crash and restart, terminated
//! backends, a frozen server, promotion of the standby) and the rows a run leaves behind.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::sleep;
use std::time::{Duration, Instant};

use dlock::testing::PgServer;

use crate::history::{Ev, Recorder};
use crate::keys_left::KeyLeft;
use crate::switch::Switch;

/// dlock's schema (the builder's default, which the clients keep).
const SCHEMA: &str = "dlock";
/// Every client connects as `application_name = chaos-c<id>`, so the nemesis can find one
/// client's backends (through the proxies, every backend's address is the switch's).
pub const APP_PREFIX: &str = "chaos-c";
/// A fencing counter is swept once it is a day behind the clock (sql/common.sql).
const FENCE_HORIZON_MS: i64 = 86_400_000;

pub struct PgDeployment {
    pub primary: PgServer,
    /// The next promotion's target; `None` once one could not be made (no more promotions).
    pub standby: Option<PgServer>,
    /// What the proxies forward to: the primary, whichever server that is.
    pub switch: Switch,
    /// Promotions so far (each one made a new standby from the new primary).
    pub promotions: u32,
}

impl PgDeployment {
    pub fn start() -> io::Result<Self> {
        let primary = PgServer::start()?;
        let standby = primary.standby()?;
        let switch = Switch::start(primary.port())?;
        Ok(PgDeployment {
            primary,
            standby: Some(standby),
            switch,
            promotions: 0,
        })
    }

    /// The URL client `id` connects with, through its proxy on `proxy_port`.
    pub fn client_url(proxy_port: u16, id: usize) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{proxy_port}/postgres?application_name={APP_PREFIX}{id}"
        )
    }

    /// SIGKILL of every server process, then a start from the same data directory after
    /// `down` (at most 1 s): crash recovery replays the WAL, so every committed grant survives
    /// (the harness runs with fsync off, which only an operating-system crash would punish).
    pub fn restart(&mut self, rec: &Recorder, down: Duration) -> Result<(), String> {
        self.primary.kill();
        sleep(down.min(Duration::from_secs(1)));
        let started = Instant::now();
        self.primary.start_again().map_err(|e| e.to_string())?;
        rec.record(&rec.event(Ev::Note).detail(format!(
            "port {} restarted (crash recovery); loaded for {:.1}s",
            self.primary.port(),
            started.elapsed().as_secs_f64()
        )));
        Ok(())
    }

    /// `pg_terminate_backend` of every backend of client `id` (`None`: of every client),
    /// sent to the primary directly, not through a proxy. Returns how many were ended.
    pub fn terminate(&self, id: Option<usize>) -> Result<usize, String> {
        let filter = match id {
            Some(id) => format!("application_name = '{APP_PREFIX}{id}'"),
            None => format!("application_name LIKE '{APP_PREFIX}%'"),
        };
        let answer = self
            .primary
            .psql(&format!(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE {filter} AND pid <> pg_backend_pid()"
            ))
            .map_err(|e| e.to_string())?;
        answer
            .parse()
            .map_err(|_| format!("pg_terminate_backend answered {answer:?}"))
    }

    /// SIGSTOP of every server process for `length`, then SIGCONT.
    pub fn pause(&self, length: Duration) -> Result<(), String> {
        catch_unwind(AssertUnwindSafe(|| self.primary.pause()))
            .map_err(|_| "the server did not stop (see its log)".to_owned())?;
        sleep(length);
        catch_unwind(AssertUnwindSafe(|| self.primary.resume()))
            .map_err(|_| "the server could not be resumed".to_owned())
    }

    /// The primary is SIGKILLed (what it had not streamed to the standby is lost: replication
    /// is asynchronous), the standby promoted, the switch repointed at it (the proxies' open
    /// connections close, new ones reach the new primary), and a new standby made from it for
    /// the next promotion. Notes how far the standby had replayed when the primary died.
    pub fn promote(&mut self, rec: &Recorder) -> Result<(), String> {
        let standby = self.standby.take().ok_or("no standby to promote")?;
        // Read before the kill, for people: how far behind the standby was. Not streaming
        // (after a restart of the primary it retries every 5 s, `wal_retrieve_retry_interval`)
        // means every write since it last was is lost.
        let lag = match self
            .primary
            .psql("SELECT max(pg_current_wal_lsn() - replay_lsn) FROM pg_stat_replication")
        {
            Ok(bytes) if bytes.is_empty() => "standby not streaming".to_owned(),
            Ok(bytes) => format!("standby replay lag {bytes} bytes"),
            Err(e) => format!("lag unknown: {e}"),
        };
        self.primary.kill();
        standby.promote().map_err(|e| e.to_string())?;
        self.switch.repoint(standby.port());
        let old = std::mem::replace(&mut self.primary, standby);
        let old_port = old.port();
        drop(old);
        self.promotions += 1;
        let made = Instant::now();
        let next = self.primary.standby();
        rec.record(&rec.event(Ev::Note).detail(format!(
            "port {old_port} killed ({lag}), port {} promoted; next standby: {}",
            self.primary.port(),
            match &next {
                Ok(s) => format!("port {} in {:.1}s", s.port(), made.elapsed().as_secs_f64()),
                Err(e) => format!("not made ({e}): no more promotions"),
            }
        )));
        self.standby = next.ok();
        Ok(())
    }

    /// Every row of dlock's tables on the primary, as the key check reads keys: one per row,
    /// named `pg:<table>:<key>`, with the ms until it ends (`pttl`).
    ///
    /// * a row with an `expires_at` (holds, a held plain lock's row in plain_locks, markers,
    ///   intents, latches; a fair lock's queue
    ///   place, `keep_until`) ends then; one already
    ///   past it counts as absent everywhere (the next op on its key deletes it, `sweep()` an
    ///   abandoned one), so it is listed as `pg:<table>(expired):` with pttl 0, and kept;
    /// * release latches are kept on purpose until they expire;
    /// * a fencing counter is kept on purpose: `sweep()` deletes it a day after its last token
    ///   (so is a free plain lock's row, which keeps its counter: not listed);
    /// * a semaphore's permit count lives as long as its holders' rows (listed as expired once
    ///   they all are), and never ends (-1) when it has none at all.
    pub fn rows_left(&self) -> Result<Vec<KeyLeft>, String> {
        let ms = |col: &str| {
            format!("floor(extract(epoch FROM ({col} - clock_timestamp())) * 1000)::bigint")
        };
        let sql = format!(
            "SELECT coalesce(json_agg(json_build_array(t, k, ms)), '[]') FROM ( \
               SELECT 'holds' t, key k, {holds} ms FROM {SCHEMA}.holds \
               UNION ALL SELECT 'plain_locks', key, {holds} FROM {SCHEMA}.plain_locks \
                 WHERE owner IS NOT NULL \
               UNION ALL SELECT 'markers', id, {markers} FROM {SCHEMA}.markers \
               UNION ALL SELECT 'intents', key, {intents} FROM {SCHEMA}.intents \
               UNION ALL SELECT 'latches', id, {latches} FROM {SCHEMA}.latches \
               UNION ALL SELECT 'fair_queue', key || ' ' || owner, {queue} FROM {SCHEMA}.fair_queue \
               UNION ALL SELECT 'fences', key, (last / 1000 + {FENCE_HORIZON_MS}) \
                 - floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM {SCHEMA}.fences \
               UNION ALL SELECT 'permits', p.key, coalesce((SELECT max({hexp}) FROM {SCHEMA}.holds h \
                 WHERE h.key = p.key)) FROM {SCHEMA}.permits p \
             ) rows",
            holds = ms("expires_at"),
            markers = ms("expires_at"),
            intents = ms("expires_at"),
            latches = ms("expires_at"),
            queue = ms("keep_until"),
            hexp = ms("h.expires_at"),
        );
        let answer = self.primary.psql(&sql).map_err(|e| e.to_string())?;
        // A permit count without holder rows has no end: null.
        let rows: Vec<(String, String, Option<i64>)> =
            serde_json::from_str(&answer).map_err(|e| format!("{e}: {answer}"))?;
        let port = self.primary.port();
        Ok(rows
            .into_iter()
            .map(|(table, key, ms)| {
                let (table, pttl) = match ms {
                    None => (table, -1),
                    Some(ms) if ms <= 0 => (format!("{table}(expired)"), 0),
                    Some(ms) => (table, ms),
                };
                KeyLeft {
                    key: format!("pg:{table}:{key}"),
                    ty: "row".into(),
                    pttl,
                    port,
                }
            })
            .collect())
    }
}

/// Rows kept on purpose: fencing counters, release latches, and rows already expired (absent
/// to every op, deleted by the next op on their key or by a later sweep).
pub fn kept_on_purpose(key: &str) -> bool {
    key.starts_with("pg:fences:") || key.starts_with("pg:latches:") || key.contains("(expired):")
}
