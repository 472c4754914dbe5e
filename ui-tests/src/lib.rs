//! Nothing to use: this package holds `tests/ui.rs`, the trybuild cases of `#[distributed_lock]`
//! and `#[distributed_semaphore]`, in a package whose only dependency is `dlock` without
//! features (see its Cargo.toml for why).
