//! `#[distributed_lock]` and `#[distributed_semaphore]` on plain `fn`s without `client = ...`
//! use the blocking face of the installed client. Alone in its own test binary because the
//! installed client is process-wide. A plain `#[test]`: no runtime anywhere in the caller.

use dlock::blocking::LockClient;
use dlock::testing::RedisServer;
use dlock::{distributed_lock, distributed_semaphore, LockError};

#[distributed_lock(key = "report:{day}", wait = "0s")]
fn report(day: u32) -> Result<bool, LockError> {
    LockClient::global()?
        .lock(format!("report:{day}"))
        .is_locked()
}

#[distributed_semaphore(key = "exports", permits = 1, wait = "0s")]
fn export() -> Result<u32, LockError> {
    let free = LockClient::global()?.semaphore("exports", 1).available()?;
    Ok(free)
}

#[test]
fn the_installed_client_and_not_configured() {
    // Before any install: the body does not run, the error says what to do.
    assert!(matches!(report(1), Err(LockError::NotConfigured)));
    assert!(matches!(export(), Err(LockError::NotConfigured)));

    let server = RedisServer::start().expect("start redis-server");
    let locks = LockClient::connect(&server.url()).expect("connect");
    let replaced = locks.clone().install();
    assert!(replaced.is_none());
    assert!(report(1).unwrap(), "the body ran without its lock");
    assert!(
        !locks.lock("report:1").is_locked().unwrap(),
        "held after the call"
    );
    assert_eq!(export().unwrap(), 0, "the body ran without its permit");
    assert_eq!(locks.semaphore("exports", 1).available().unwrap(), 1);
}
