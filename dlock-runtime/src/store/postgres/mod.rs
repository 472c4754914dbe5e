//! The PostgreSQL store: lease rows in a schema the user names, fencing tokens that never go
//! back, releases announced with NOTIFY.

pub(crate) mod channel;
// Not used until the store is wired into `Waiters` (issue 30, in progress).
#[allow(dead_code)]
pub(crate) mod listen;
