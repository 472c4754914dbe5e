//! `SegmentedStock`: one hot item's stock split into segments on distinct cluster slots.
//!
//! One lock (or one counter key) per item funnels every buyer of a flash sale through one key on
//! one node. Splitting the stock into N segments, each its own key with its own hash tag, spreads
//! them over the cluster's masters; each take is one Lua script on one segment.
//!
//! The protocol is documented on [`SegmentedStock`], where users see it.

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
