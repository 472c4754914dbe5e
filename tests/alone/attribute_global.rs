//! `#[distributed_lock]` without `client = ...` uses the installed client. Alone in its own test
//! binary because the installed client is process-wide.

use dlock::testing::RedisServer;
use dlock::{distributed_lock, LockClient, LockError};

#[derive(Debug)]
struct AppError(LockError);

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError(e)
    }
}

#[distributed_lock(key = "report:{day}")]
async fn report(day: u32) -> Result<bool, AppError> {
    let client = LockClient::global()?;
    Ok(client.lock(format!("report:{day}")).is_locked().await?)
}

/// No key: the lock is named after the module path and the function.
#[distributed_lock]
async fn nightly() -> Result<String, AppError> {
    let name = concat!(module_path!(), "::nightly");
    assert!(LockClient::global()?.lock(name).is_locked().await?);
    Ok(name.to_owned())
}

/// `LockError` itself as the error type, through the installed client.
#[distributed_lock(key = "plain")]
async fn plain() -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn installed_client_and_not_configured() {
    // Before any install: the body does not run and the error comes through `From`.
    let err = report(1).await.unwrap_err();
    assert!(matches!(err.0, LockError::NotConfigured), "{err:?}");
    assert!(matches!(plain().await, Err(LockError::NotConfigured)));

    let server = RedisServer::start().unwrap();
    let client = LockClient::connect(&server.url()).await.unwrap();
    client.clone().install();
    assert!(report(1).await.unwrap());
    assert!(!client.lock("report:1").is_locked().await.unwrap());
    assert_eq!(nightly().await.unwrap(), "attribute_global::nightly");
    plain().await.unwrap();
}
