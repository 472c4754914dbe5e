//! Compile-time errors of `#[distributed_lock]` and `#[distributed_semaphore]`: one file per
//! mistake in `tests/ui/`, each with the `.stderr` rustc must print. The goldens depend on the
//! compiler's wording; the toolchain is pinned in `rust-toolchain.toml`. Regenerate after a
//! toolchain bump with `TRYBUILD=overwrite cargo test -p dlock-ui-tests --test ui` and review the
//! diff by hand.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
