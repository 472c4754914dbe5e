//! The segmented stock's Lua scripts: one per step, each touching the keys of one segment only.

use std::sync::LazyLock;

use crate::store::redis::backend::library;
use crate::store::redis::backend::script::Script;

pub(crate) static STOCK_META: LazyLock<Script> = LazyLock::new(|| Script::of(&library::STOCK_META));
pub(crate) static STOCK_INIT: LazyLock<Script> = LazyLock::new(|| Script::of(&library::STOCK_INIT));
pub(crate) static STOCK_TAKE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::STOCK_TAKE));
pub(crate) static STOCK_GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::STOCK_GIVE_BACK));
pub(crate) static STOCK_AUDIT: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::STOCK_AUDIT));
