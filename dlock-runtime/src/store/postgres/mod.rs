//! The PostgreSQL store: lease rows in a schema the user names, fencing tokens that never go
//! back, releases announced with NOTIFY.

pub(crate) mod channel;
