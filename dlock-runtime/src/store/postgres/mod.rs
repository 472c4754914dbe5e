//! The PostgreSQL store: lease rows in a schema the user names, fencing tokens that never go
//! back, releases announced with NOTIFY.

pub(crate) mod channel;
// Nothing above the store calls these yet: the machinery's store seam is being written beside
// them (issue 30). Remove the allows when it does.
#[allow(dead_code)]
mod calls;
#[allow(dead_code)]
mod connections;
#[allow(dead_code)]
pub(crate) mod errors;
#[allow(dead_code)]
pub(crate) mod link;
#[allow(dead_code)]
pub(crate) mod listen;
#[allow(dead_code)]
pub(crate) mod schema;
#[allow(dead_code)]
pub(crate) mod store;
#[cfg(all(test, feature = "testing"))]
mod tests;
