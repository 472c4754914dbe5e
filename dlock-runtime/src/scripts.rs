//! The Lua scripts of the lock protocol, built once.
//!
//! `redis::Script` keeps the SHA1 and sends EVALSHA; on NOSCRIPT (SCRIPT FLUSH, a restart, a
//! failover to a replica that never saw the script) it loads the script and retries, so a flushed
//! cache costs one extra round trip and never an error. One file per lock kind keeps the door
//! open for fair and read-write locks, which bring their own scripts.

use std::sync::LazyLock;

use redis::Script;

pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
pub(crate) static UNDO_REENTRY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/undo_reentry.lua")));
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/force_unlock.lua")));

// Segmented stock (stock.rs): one script per step, each touching the keys of one segment only.
pub(crate) static STOCK_META: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock_meta.lua")));
pub(crate) static STOCK_INIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock_init.lua")));
pub(crate) static STOCK_TAKE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock_take.lua")));
pub(crate) static STOCK_GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock_give_back.lua")));
pub(crate) static STOCK_AUDIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stock_audit.lua")));
