//! Flash-sale stock: [`SegmentedStock`] and [`SegmentLocks`], with the answers, limits and
//! audit types they use.
//!
//! One lock (or one counter key) per item funnels every buyer of a flash sale through one key on
//! one node. Splitting the stock into N segments, each its own key with its own hash tag, spreads
//! them over the cluster's masters; each take is one Lua script on one segment.
//!
//! The protocol is documented on [`SegmentedStock`], where users see it;
//! `cargo run --release --example seckill` compares it with one lock per item. Both types are
//! also at the crate root; their answers ([`Take`], [`Init`], [`Audit`]) and limits live here.

mod audit;
mod keys;
mod locks;
mod scripts;
mod segmented;
mod take;
mod view;

pub use audit::{Audit, SegmentAudit};
pub use locks::{SegmentHold, SegmentLocks};
pub use segmented::{
    Init, SegmentedStock, DEFAULT_DRAINED_FOR, MAX_ORDER_ID_LEN, MAX_SEGMENTS, MAX_UNITS,
};
pub use take::{Part, Take};

/// Where segments (and every other key) live on a Redis Cluster.
pub use crate::store::redis::backend::names::cluster_slot;
