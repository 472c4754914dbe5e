//! The behaviour every store must give, from one test body per behaviour, run against Redis and
//! PostgreSQL (`both.rs` starts one server of each; PostgreSQL where its binaries are installed,
//! which CI makes sure of): exclusion, re-entry, wake-up by the release, cancelled acquires,
//! leases and the lost signal, a restart of the store, fencing tokens, the family of kinds.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod attribute;
mod blocking;
mod both;
mod connections;
mod curator;
mod errors;
mod exclusion;
mod fair;
mod family;
mod faults;
mod frozen_link;
mod holder;
mod inspect;
mod killed_connections;
mod names;
mod pooler;
mod privileges;
mod promotion;
mod slow_link;
mod stock;
mod tls;
mod waking;
mod zookeeper;
// `zk+tls://`: only in a build with TLS to ZooKeeper (CI's `--all-features`).
#[cfg(feature = "zookeeper-tls")]
mod zookeeper_tls;
