//! How a URL becomes a `redis::Client`, and the settings of every connection manager.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;

/// A client for one URL, trusting `tls_root` (PEM root certificates) for `rediss://` if given,
/// else the system's trust store.
pub(crate) fn open_client(url: &str, tls_root: Option<&[u8]>) -> redis::RedisResult<redis::Client> {
    match tls_root {
        Some(pem) => redis::Client::build_with_tls(url, root_only(pem)),
        None => redis::Client::open(url),
    }
}

/// TLS settings that trust exactly these PEM roots and present no client certificate.
pub(crate) fn root_only(pem: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    }
}

/// How every connection manager (one server, a sentinel's primary) times out and retries.
pub(crate) fn manager_config(
    response_timeout: Duration,
    connect_timeout: Duration,
) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(response_timeout))
        .set_connection_timeout(Some(connect_timeout))
        .set_number_of_retries(2)
}
