//! TLS to ZooKeeper (feature `zookeeper-tls`, a `zk+tls://` URL): what the ZooKeeper client's
//! own TLS is given, and why a handshake failed when it fails.
//!
//! The client (zookeeper-client's `tls` feature) builds its rustls config with
//! `ClientConfig::builder()`, which takes rustls's process-default crypto provider. Its `tls`
//! feature also compiles rustls's aws-lc-rs provider beside dlock's ring, and with two
//! providers compiled in, rustls cannot pick one by itself: `builder()` panics unless the
//! process has a default. [`ensure_provider`] installs ring as that default when the
//! application has installed none, before any TLS config is built.
//!
//! Host names are always checked: the client offers no check of the chain alone except
//! through an `unsafe fn`, and dlock forbids unsafe code.
//!
//! The client reports a failed handshake only as "no host could be reached" (the cause goes to
//! its debug log). [`diagnose`] repeats the handshake with the same roots and identity, with
//! rustls directly, to say why: the certificate's issuer, its host name, a server without TLS
//! at that port, a client certificate the server wants.

use std::io::{self, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, ClientConfig, ClientConnection, RootCertStore};
use zookeeper_client::TlsOptions;

/// What a `zk+tls://` client trusts and shows: PEM text, checked when the client is built.
#[derive(Clone)]
pub(crate) struct ZkTls {
    /// The roots the servers' certificates must chain to (`tls_root_certificates`).
    ca: String,
    /// The client certificate chain and its private key (`tls_client_certificate`).
    identity: Option<(String, String)>,
}

impl std::fmt::Debug for ZkTls {
    // The private key stays out of logs and panics alike.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkTls")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl ZkTls {
    /// Reads the builder's PEM; the error names the setting and what is wrong with it.
    pub(crate) fn new(ca: &[u8], identity: Option<(&[u8], &[u8])>) -> Result<ZkTls, String> {
        let text = |pem: &[u8], what: &str| {
            String::from_utf8(pem.to_vec()).map_err(|_| format!("{what} is not PEM text"))
        };
        let ca = text(ca, "tls_root_certificates")?;
        roots(&ca)?;
        let identity = match identity {
            None => None,
            Some((cert, key)) => {
                let cert = text(cert, "tls_client_certificate's certificate")?;
                let key = text(key, "tls_client_certificate's key")?;
                certificate_chain(&cert)?;
                private_key(&key)?;
                Some((cert, key))
            }
        };
        Ok(ZkTls { ca, identity })
    }

    /// The ZooKeeper client's TLS options.
    pub(crate) fn options(&self) -> Result<TlsOptions, String> {
        let options = TlsOptions::new()
            .with_pem_ca(&self.ca)
            .map_err(|e| format!("tls_root_certificates: {e}"))?;
        match &self.identity {
            None => Ok(options),
            Some((cert, key)) => options
                .with_pem_identity(cert, key)
                .map_err(|e| format!("tls_client_certificate: {e}")),
        }
    }

    /// The same checks as the client's own config, on ring: for [`diagnose`].
    fn config(&self) -> Result<ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots(&self.ca)?);
        match &self.identity {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => builder
                .with_client_auth_cert(certificate_chain(cert)?, private_key(key)?)
                .map_err(|e| format!("tls_client_certificate: {e}")),
        }
    }
}

fn roots(pem: &str) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("tls_root_certificates: not PEM ({e})"))?;
        store.add(cert).map_err(|e| {
            format!("tls_root_certificates: a certificate rustls cannot use as a root: {e}")
        })?;
    }
    if store.is_empty() {
        return Err(
            "tls_root_certificates holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        );
    }
    Ok(store)
}

fn certificate_chain(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls_client_certificate's certificate: not PEM ({e})"))?;
    if chain.is_empty() {
        return Err(
            "tls_client_certificate's certificate holds no PEM certificate \
                    (-----BEGIN CERTIFICATE-----)"
                .into(),
        );
    }
    Ok(chain)
}

fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| {
        format!(
            "tls_client_certificate's key: no PEM private key (PKCS#8, PKCS#1 or SEC1, \
             unencrypted) in it ({e})"
        )
    })
}

/// Makes ring rustls's process-default provider unless the application installed one (then
/// its choice stands). Needed before any `ClientConfig::builder()` runs in a build with the
/// `zookeeper-tls` feature: the ZooKeeper client's, and redis-rs's for `rediss://`.
pub(crate) fn ensure_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a default exists either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Every host of a connect string (`h:p,h:p/chroot`) as the client will name it to TLS; an
/// error for one that is no DNS name or IP address (the client would panic on it).
pub(crate) fn check_hosts(connect_string: &str) -> Result<(), String> {
    let hosts = connect_string.split('/').next().unwrap_or_default();
    for host_port in hosts.split(',') {
        let host = host_of(host_port);
        if ServerName::try_from(host).is_err() {
            return Err(format!(
                "`{host}` is no DNS name or IP address, which TLS must check the server's \
                 certificate against"
            ));
        }
    }
    Ok(())
}

/// The host of `host:port` (ZooKeeper's connect string; a bare host means port 2181).
fn host_of(host_port: &str) -> &str {
    let host = match host_port.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => host_port,
    };
    // An IPv6 literal is written `[::1]:2281`; its name for TLS has no brackets.
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Why a TLS handshake with the hosts of `connect_string` fails, found by repeating it (in
/// host order, at most `within` in all): `None` when every host reached took the handshake, or
/// none could be reached (the session failed for another reason, such as servers that are
/// down: that failure keeps its own class, a passing fault, rather than becoming a refusal).
pub(crate) fn diagnose(tls: &ZkTls, connect_string: &str, within: Duration) -> Option<String> {
    let config = match tls.config() {
        Ok(c) => Arc::new(c),
        Err(why) => return Some(why),
    };
    let deadline = Instant::now() + within;
    let hosts = connect_string.split('/').next().unwrap_or_default();
    for host_port in hosts.split(',') {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let address = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:2181")
        };
        match handshake(&config, host_of(host_port), &address, left) {
            Ok(()) | Err(Failure::Unreached) => {}
            Err(Failure::Refused(why)) => return Some(format!("{address}: {why}")),
        }
    }
    None
}

/// How a repeated handshake with one host failed.
enum Failure {
    /// The host could not be resolved or connected to: no TLS was tried.
    Unreached,
    /// The TLS handshake (or the server's alert right after it) refused, saying why.
    Refused(String),
}

impl From<String> for Failure {
    fn from(why: String) -> Self {
        Failure::Refused(why)
    }
}

impl From<&str> for Failure {
    fn from(why: &str) -> Self {
        Failure::Refused(why.to_owned())
    }
}

/// One handshake with `address`, checking its certificate for `host`; then a short read, in
/// which a server that wants a client certificate (TLS 1.3 says so only after the client's
/// side of the handshake) sends its alert. Every step is bounded by what is left of `within`.
fn handshake(
    config: &Arc<ClientConfig>,
    host: &str,
    address: &str,
    within: Duration,
) -> Result<(), Failure> {
    let deadline = Instant::now() + within;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let mut conn = ClientConnection::new(config.clone(), name).map_err(|e| e.to_string())?;
    let socket_address = address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or(Failure::Unreached)?;
    let mut socket =
        TcpStream::connect_timeout(&socket_address, within).map_err(|_| Failure::Unreached)?;
    // Sets the socket's timeouts to what is left (at most `cap`); `false` once nothing is.
    let bound = |socket: &TcpStream, cap: Duration| {
        let left = deadline.saturating_duration_since(Instant::now()).min(cap);
        !left.is_zero()
            && socket.set_read_timeout(Some(left)).is_ok()
            && socket.set_write_timeout(Some(left)).is_ok()
    };
    while conn.is_handshaking() {
        if !bound(&socket, within) {
            return Err("the server did not finish the TLS handshake in time".into());
        }
        if let Err(e) = conn.complete_io(&mut socket) {
            return Err(explain(&e).into());
        }
    }
    // Whatever the server says next: an alert, or nothing for a while (it waits for the
    // session request): that is a handshake it took.
    if !bound(&socket, Duration::from_secs(1)) {
        return Ok(());
    }
    match conn.complete_io(&mut socket) {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) => {}
        Err(e) => return Err(explain(&e).into()),
    }
    let mut byte = [0u8; 1];
    match conn.reader().read(&mut byte) {
        Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(explain(&e).into()),
        _ => Ok(()),
    }
}

/// A failed handshake in words that say what to change.
fn explain(e: &io::Error) -> String {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the server's certificate is not valid for the host name connected to ({e}): \
             connect by a name its subjectAltName lists"
        ),
        Some(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        )) => format!(
            "the server's certificate is not signed by a root in tls_root_certificates ({e}): \
             give the CA that signed the servers' certificates"
        ),
        Some(rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => format!(
            "the server's certificate has expired ({e}): renew it, or check this machine's clock"
        ),
        Some(rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::HandshakeFailure
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown,
        )) => format!(
            "the server refused this client's certificate or wants one ({e}): ZooKeeper's \
             ssl.clientAuth is `need` unless set otherwise; give a certificate its trust store \
             accepts with tls_client_certificate"
        ),
        Some(rustls::Error::InvalidMessage(_)) => format!(
            "the server does not speak TLS at this port ({e}): use its secureClientPort, or a \
             zk:// URL for its plain clientPort"
        ),
        Some(other) => format!("TLS with the server failed: {other}"),
        // A plain ZooKeeper port reads the ClientHello as a request of absurd length and
        // closes the connection without a word.
        None if matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        ) =>
        {
            format!(
                "the server closed the connection during the TLS handshake ({e}): is TLS on at \
                 this port? ZooKeeper's TLS is on its secureClientPort; a zk:// URL is for its \
                 plain clientPort"
            )
        }
        None if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) =>
        {
            format!("the server did not answer the TLS handshake in time ({e})")
        }
        None => format!("the TLS handshake failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{check_hosts, host_of};

    #[test]
    fn hosts_are_checked_as_tls_names() {
        assert_eq!(host_of("a.example:2181"), "a.example");
        assert_eq!(host_of("a.example"), "a.example");
        assert_eq!(host_of("[::1]:2281"), "::1");
        assert!(check_hosts("127.0.0.1:2181,zk-1.example:2182/app").is_ok());
        let e = check_hosts("ok:1,bad_host!:2/app").unwrap_err();
        assert!(e.contains("`bad_host!` is no DNS name"), "{e}");
    }
}
