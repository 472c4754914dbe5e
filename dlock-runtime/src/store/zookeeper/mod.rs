//! The ZooKeeper store (feature `zookeeper`): Curator's lock recipes on the wire, the session as
//! the lease.
//!
//! - A lock is a node path (`names.rs`); each owner that asks for it creates one child,
//!   EPHEMERAL_SEQUENTIAL, named as Curator's protected mode names it
//!   (`_c_<uuid>-lock-<10-digit sequence>`), under parents created as containers. The owner
//!   whose child sorts first by its sequence holds the lock (Curator's `InterProcessMutex`);
//!   every other waiter watches only the child just before its own, so a release wakes one
//!   waiter (no herd).
//! - The lease is the session: a crashed or partitioned holder's child goes when the server
//!   expires its session. A holder learns it first (`link.rs`'s renewals: the hold's validity
//!   is two thirds of the session timeout past the send of its last answered request, and the
//!   server expires a session no earlier than a whole timeout after the last request it got).
//! - The fencing token is the child's creation zxid (`czxid`), which ZooKeeper never hands out
//!   twice and which rises across leader changes (the leader's epoch is its high 32 bits);
//!   children are granted in the order they were created, so tokens rise with each grant.
//! - Re-entry is counted by this client (Curator counts it in the JVM): the node is the hold,
//!   and it lives only as long as this client's session anyway.
//!
//! `store.rs` keeps the session (a new one after expiry) and this client's owners;
//! `link.rs` answers the seam's operations; `inspect.rs` reads every lock's line for tools;
//! `errors.rs` classifies failures; `tls.rs` (feature `zookeeper-tls`) gives a `zk+tls://`
//! client's TLS its roots and certificate, and says why a handshake failed.

pub(crate) mod errors;
pub(crate) mod inspect;
pub(crate) mod link;
pub(crate) mod names;
pub(crate) mod store;
#[cfg(feature = "zookeeper-tls")]
pub(crate) mod tls;
pub(crate) mod url;
