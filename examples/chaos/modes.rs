//! The lock modes a client takes, and what the checker may expect of each: one table, so a
//! kind whose promises change (e.g. Redisson's `RLock` turning fenced) changes one line.

use crate::{Kind, Store};

/// What a mode's fencing tokens promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokens {
    /// No token (semaphore permits).
    None,
    /// dlock's tokens: rise in grant order, across data loss too (they start from the server
    /// clock).
    Rise,
    /// A plain Redis counter (Redisson's `redisson_lock_token:{name}`): rises in grant order
    /// while Redis keeps its data; a data-loss fault may set it back.
    Counter,
    /// Not checked: the kind is not promised to fence (Redisson's `RLock`, whose counter is
    /// being made opt-in).
    Unchecked,
}

/// One mode: how the client takes it and what the checker expects.
pub struct Mode {
    pub name: &'static str,
    /// The lock names it uses: few, so clients contend.
    pub locks: &'static [&'static str],
    /// Held side by side with other holds of a shared mode of the same lock (reads).
    pub shared: bool,
    pub tokens: Tokens,
}

pub const MODES: &[Mode] = &[
    Mode {
        name: "plain",
        locks: &["plain:0", "plain:1", "plain:2"],
        shared: false,
        tokens: Tokens::Rise,
    },
    Mode {
        name: "fair",
        locks: &["fair:0", "fair:1"],
        shared: false,
        tokens: Tokens::Rise,
    },
    Mode {
        name: "read",
        locks: &["rw:0"],
        shared: true,
        tokens: Tokens::Rise,
    },
    Mode {
        name: "write",
        locks: &["rw:0"],
        shared: false,
        tokens: Tokens::Rise,
    },
    Mode {
        name: "sem",
        locks: &["sem:0"],
        shared: false,
        tokens: Tokens::None,
    },
    // Redisson's protocol (`RLock`, `RReadWriteLock`): its keys are the lock names themselves.
    Mode {
        name: "rlock",
        locks: &["rlock:0", "rlock:1"],
        shared: false,
        tokens: Tokens::Unchecked,
    },
    Mode {
        name: "rread",
        locks: &["rrw:0"],
        shared: true,
        tokens: Tokens::Counter,
    },
    Mode {
        name: "rwrite",
        locks: &["rrw:0"],
        shared: false,
        tokens: Tokens::Counter,
    },
];

/// The mode called `name` (an unknown one reads as an exclusive, unfenced lock).
pub fn mode(name: &str) -> &'static Mode {
    const UNKNOWN: Mode = Mode {
        name: "?",
        locks: &[],
        shared: false,
        tokens: Tokens::Unchecked,
    };
    MODES.iter().find(|m| m.name == name).unwrap_or(&UNKNOWN)
}

/// The modes a run of `kind` draws from (reads twice as often as writes, as readers are
/// usually the many). PostgreSQL does not offer Redisson's kinds: its mix is the rest (the
/// command line refuses `redisson` there).
pub fn of_kind(kind: Kind, store: Store) -> &'static [&'static str] {
    match kind {
        Kind::Mix if store != Store::Redis => &["plain", "fair", "read", "write", "sem"],
        Kind::Plain => &["plain"],
        Kind::Fair => &["fair"],
        Kind::Rw => &["read", "read", "write"],
        Kind::Semaphore => &["sem"],
        Kind::Redisson => &["rlock", "rread", "rread", "rwrite"],
        Kind::Mix => &[
            "plain", "fair", "read", "write", "sem", "rlock", "rread", "rwrite",
        ],
    }
}

/// Every lock name a run of `kind` may take (the slots a cluster migration moves).
pub fn locks_of(kind: Kind, store: Store) -> Vec<&'static str> {
    let mut locks: Vec<&'static str> = of_kind(kind, store)
        .iter()
        .flat_map(|m| mode(m).locks.iter().copied())
        .collect();
    locks.sort_unstable();
    locks.dedup();
    locks
}

/// Whether a hold of this mode writes to the fenced register with its token.
pub fn fenced(name: &str) -> bool {
    let m = mode(name);
    !m.shared && matches!(m.tokens, Tokens::Rise | Tokens::Counter)
}
