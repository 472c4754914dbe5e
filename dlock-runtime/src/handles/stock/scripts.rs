//! The segmented stock's Lua scripts: one per step, each touching the keys of one segment only.

use std::sync::LazyLock;

use crate::backend::script::Script;

pub(crate) static STOCK_META: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/stock/meta.lua")));
pub(crate) static STOCK_INIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/stock/init.lua")));
pub(crate) static STOCK_TAKE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/stock/take.lua")));
pub(crate) static STOCK_GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/stock/give_back.lua")));
pub(crate) static STOCK_AUDIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/stock/audit.lua")));
