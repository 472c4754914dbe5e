//! `LockClient::global()` before any `install()`: its own test binary, so no other test can
//! have installed a client first.

use dlock::{LockClient, LockError};

#[test]
fn global_before_install_is_not_configured() {
    let err = LockClient::global().expect_err("nothing installed in this process");
    assert!(matches!(err, LockError::NotConfigured), "{err:?}");
    assert!(
        err.to_string().contains("install"),
        "message says what to do: {err}"
    );
    assert_eq!(err.lock_name(), None);
}
