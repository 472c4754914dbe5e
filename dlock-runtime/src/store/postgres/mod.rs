//! The PostgreSQL store: lease rows in a schema the user names, fencing tokens that never go
//! back, releases announced with NOTIFY.

pub(crate) mod channel;
// Nothing above the store calls these yet: the machinery's store seam is being written beside
// them (issue 30). Remove the allows when it does.
mod calls;
mod connections;
pub(crate) mod errors;
pub(crate) mod inspect;
pub(crate) mod link;
pub(crate) mod listen;
mod names;
pub(crate) mod schema;
pub(crate) mod store;
#[cfg(all(test, feature = "testing"))]
mod tests;
pub(crate) mod tls;
