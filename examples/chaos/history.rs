//! The history: one JSON line per event, stamped with one clock every process shares.
//!
//! `CLOCK_MONOTONIC` is system-wide on Linux (it counts from boot, for every process alike), so
//! raw readings taken in the runner and in each client process are comparable; `Instant` reads
//! the same clock but does not show its value, hence `rustix`. Every timestamp in a history is
//! nanoseconds since the run's origin, a reading the runner took at start and passed to every
//! client.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn mono_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The process id of the nemesis (and of the runner's own notes) in [`Event::p`].
pub const NEMESIS: i32 = -1;

/// What happened. Clients write everything but the fault events, which come from the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ev {
    /// A client process (re)started.
    Start,
    /// An acquire was sent (`wait`: its wait bound).
    Invoke,
    /// The acquire was granted (`token`; none for a semaphore permit).
    Ok,
    /// The acquire failed (`detail`: the error kind) or was cancelled (`detail`: `cancelled`).
    Fail,
    /// A re-entry inside the hold's scope (`token`: the token it reported; `detail`: `ok` or
    /// the error kind).
    Reenter,
    /// `is_lost()` turned true (seen by `lost()` or by a look before an action).
    Lost,
    /// A fenced write of `(client, seq)` to the register (`detail`: `written`, `stale` or the
    /// error kind; `token`: the token sent; `highest`: the register's when refused; `at`: when
    /// it was sent).
    Fence,
    /// The hold ends from the client's side (`detail`: `release`, `release_written`, `drop` or
    /// `cancel`).
    ReleaseStart,
    /// The release's reply (`detail`: `ok`, `not_held` or the error kind; `written` once a
    /// written release is on the wire).
    Released,
    /// The client finished its loop and shut its `LockClient` down.
    Exit,
    /// A fault began (`detail`: its kind, `target`: whom it hit, `op`: its number).
    FaultStart,
    /// A fault healed (`op`: its number; `data_loss`: whether it lost acknowledged writes).
    FaultEnd,
    /// Something the runner saw, for people reading the history.
    Note,
}

/// One line of the history. Fields an event does not use are left out of its JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Nanoseconds since the run's origin.
    pub t: u64,
    /// The client (0..N), or [`NEMESIS`].
    pub p: i32,
    pub ev: Ev,
    /// The operation: unique per client across its restarts (faults: unique per run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// `plain`, `fair`, `read`, `write` or `sem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// An acquire's wait bound in ms (on `invoke`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_loss: bool,
}

impl Event {
    /// An event of `p` at `t` with every optional field empty.
    pub fn new(t: u64, p: i32, ev: Ev) -> Self {
        Event {
            t,
            p,
            ev,
            op: None,
            lock: None,
            mode: None,
            token: None,
            highest: None,
            detail: None,
            target: None,
            at: None,
            wait: None,
            data_loss: false,
        }
    }

    pub fn op(mut self, op: u64) -> Self {
        self.op = Some(op);
        self
    }

    pub fn lock(mut self, lock: &str, mode: &str) -> Self {
        self.lock = Some(lock.to_owned());
        self.mode = Some(mode.to_owned());
        self
    }

    pub fn token(mut self, token: Option<u64>) -> Self {
        self.token = token;
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }
}

/// Appends events to a JSON-lines file, one `write` per line so a SIGKILL loses at most the
/// line being written; shared by the tasks (or threads) of one process.
pub struct Recorder {
    origin: u64,
    p: i32,
    file: Mutex<File>,
}

impl Recorder {
    pub fn create(path: &Path, origin: u64, p: i32) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder {
            origin,
            p,
            file: Mutex::new(file),
        })
    }

    /// Now, in the run's time.
    pub fn now(&self) -> u64 {
        mono_ns().saturating_sub(self.origin)
    }

    /// A new event of this process, stamped now.
    pub fn event(&self, ev: Ev) -> Event {
        Event::new(self.now(), self.p, ev)
    }

    pub fn record(&self, event: &Event) {
        let mut line = serde_json::to_vec(event).expect("events serialize");
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A full disk must not stop the run; the checker then sees a shorter history.
        let _ = file.write_all(&line);
    }
}

/// Every event of every file in `dir` ending in `.jsonl`, sorted by time. A line cut short by
/// a SIGKILL is skipped.
pub fn read_dir(dir: &Path) -> io::Result<Vec<Event>> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for line in BufReader::new(File::open(&path)?).lines() {
                if let Ok(event) = serde_json::from_str::<Event>(&line?) {
                    events.push(event);
                }
            }
        }
    }
    events.sort_by_key(|e| (e.t, e.p));
    Ok(events)
}

/// Writes `events` as JSON lines.
pub fn write(path: &Path, events: &[Event]) -> io::Result<()> {
    let mut out = io::BufWriter::new(File::create(path)?);
    for event in events {
        serde_json::to_writer(&mut out, event)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}
