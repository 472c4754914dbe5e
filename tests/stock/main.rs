//! The segmented stock: it sells everything, never oversells, takes each order once, gives back,
//! and its keys, errors and segment locks.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

mod give_back_first;
mod invariants;
mod keys_and_errors;
mod locks;
mod selling;
