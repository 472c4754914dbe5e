//! The store seam: what the machinery asks of the place locks are kept, and its two
//! implementations, Redis (`backend/` + `kinds/`) and PostgreSQL (`postgres/`, feature
//! `postgres`).

#[cfg(feature = "postgres")]
pub(crate) mod postgres;
