//! How the store opens a connection: `PgConnect`, the tokio-postgres config of a URL and a
//! rustls client (the ring provider, as for `rediss://`) whose certificate checks follow the
//! URL's `sslmode` the way libpq's do (the table is in `settings/postgres_tls.rs`). Every
//! connection of the store comes from one: the command connections and the LISTEN connection.
//! A connection that fails for a TLS reason says what to change (`PgConnect::failed`).

use std::error::Error as _;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::errors::PgError;
use crate::settings::{split_tls, RootCert, SslMode};

/// The stream of every connection the store opens (TLS or, under `disable` / `prefer`, plain).
pub(crate) type PgStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

/// Opens connections to one server: the URL's settings, its `sslmode` and trusted roots.
#[derive(Clone)]
pub(crate) struct PgConnect {
    config: Config,
    tls: MakeRustlsConnect,
    mode: SslMode,
    /// Whose roots a certificate is checked against, for messages.
    roots: &'static str,
}

impl PgConnect {
    /// Reads `url` (its `sslmode` and `sslrootcert` here, the rest by tokio-postgres) and
    /// trusts `builder_roots` (PEM, the builder's `tls_root_certificates`) besides the roots
    /// the URL names. The error says what is wrong, without the URL.
    pub(crate) fn from_url(url: &str, builder_roots: Option<&[u8]>) -> Result<PgConnect, String> {
        let split = split_tls(url)?;
        let mut config = split.rest.parse::<Config>().map_err(|e| e.to_string())?;
        config.ssl_mode(match split.mode {
            // PostgreSQL offers no TLS on a Unix-domain socket (the kernel carries the bytes),
            // and libpq ignores sslmode there: so does this, rather than fail every connect.
            _ if only_unix_sockets(&config) => WireMode::Disable,
            SslMode::Disable => WireMode::Disable,
            SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        });
        let mut own = RootCertStore::empty();
        if let Some(pem) = builder_roots {
            add_pem(&mut own, pem, "tls_root_certificates")?;
        }
        let mut system = false;
        match &split.root {
            Some(RootCert::File(path)) => {
                let pem = std::fs::read(path).map_err(|e| {
                    format!(
                        "cannot read sslrootcert {}: {e} (name a readable PEM file of root \
                         certificates)",
                        path.display()
                    )
                })?;
                add_pem(&mut own, &pem, &format!("sslrootcert {}", path.display()))?;
            }
            Some(RootCert::System) => system = true,
            None => {}
        }
        let verifying = matches!(split.mode, SslMode::VerifyCa | SslMode::VerifyFull);
        // libpq takes the system's store only when asked to (`sslrootcert=system`); dlock also
        // when verifying without roots of one's own, as `rediss://` does.
        let roots = if system || (verifying && own.is_empty()) {
            let label = if own.is_empty() {
                "the system's trust store"
            } else {
                "the system's trust store and the roots given"
            };
            own.roots.extend(system_roots()?.roots);
            label
        } else {
            "the roots given (tls_root_certificates, sslrootcert)"
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let check = match split.mode {
            // Libpq's `require` and `prefer` check the chain once roots are given.
            SslMode::Disable | SslMode::Prefer | SslMode::Require if own.is_empty() => {
                Check::Nothing
            }
            SslMode::Disable | SslMode::Prefer | SslMode::Require | SslMode::VerifyCa => {
                Check::Chain(Arc::new(own))
            }
            SslMode::VerifyFull => Check::Full(
                WebPkiServerVerifier::builder_with_provider(Arc::new(own), provider.clone())
                    .build()
                    .map_err(|e| format!("cannot use the root certificates: {e}"))?,
            ),
        };
        let tls = tls_config(Verifier { check, provider })?;
        Ok(PgConnect {
            config,
            tls: MakeRustlsConnect::new(tls),
            mode: split.mode,
            roots,
        })
    }

    /// Opens one connection (not bounded in time here: callers bound it).
    pub(crate) async fn connect(
        &self,
    ) -> Result<(Client, Connection<Socket, PgStream>), tokio_postgres::Error> {
        self.config.connect(self.tls.clone()).await
    }

    /// The error of a failed [`PgConnect::connect`] for `what`: for a TLS reason, what it was
    /// and what to change.
    pub(crate) fn failed(&self, what: &str, error: tokio_postgres::Error) -> PgError {
        match self.explain(&error) {
            Some(message) => PgError::explained(what, message, error),
            None => PgError::connecting(what, error),
        }
    }

    fn explain(&self, error: &tokio_postgres::Error) -> Option<String> {
        let mode = self.mode.name();
        if let Some(db) = error.as_db_error() {
            // The server's pg_hba.conf has only `hostssl` lines for this connection.
            return (self.mode == SslMode::Disable
                && db.code().code() == "28000"
                && db.message().contains("no encryption"))
            .then(|| {
                format!(
                    "{}: {} (SQLSTATE 28000): the server accepts this connection only over TLS \
                     (hostssl in pg_hba.conf), and the URL says sslmode=disable: use \
                     sslmode=verify-full (or verify-ca, require)",
                    db.severity(),
                    db.message()
                )
            });
        }
        if let Some(e) = rustls_error(error) {
            return Some(match e {
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                ) => format!(
                    "the server's certificate is not valid for the host name connected to \
                     ({e}); sslmode={mode} checks it: connect by a name the certificate lists, \
                     or use sslmode=verify-ca to check only who signed it"
                ),
                rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer | CertificateError::BadSignature,
                ) => format!(
                    "the server's certificate is not signed by a root certificate this client \
                     trusts ({e}); sslmode={mode} checks it against {}: give the CA that \
                     signed it with tls_root_certificates or sslrootcert=<file>",
                    self.roots
                ),
                rustls::Error::InvalidCertificate(
                    CertificateError::Expired | CertificateError::ExpiredContext { .. },
                ) => format!(
                    "the server's certificate has expired ({e}): renew it on the server, or \
                     check this machine's clock"
                ),
                other => format!("TLS with the server failed under sslmode={mode}: {other}"),
            });
        }
        // tokio-postgres's words when the server answers the TLS request with "no".
        let refused_tls = error
            .source()
            .is_some_and(|s| s.to_string().contains("server does not support TLS"));
        refused_tls.then(|| {
            format!(
                "the server does not accept TLS (ssl = off in its postgresql.conf), and \
                 sslmode={mode} demands it: turn ssl on at the server, or use sslmode=prefer \
                 (TLS when offered) or disable"
            )
        })
    }
}

// Tests of the store and the listener build a config by hand.
#[cfg(test)]
impl From<Config> for PgConnect {
    /// A config as tokio-postgres read it: TLS as its own `sslmode` says, with no certificate
    /// checked (libpq's `prefer` and `require` without root certificates).
    fn from(config: Config) -> Self {
        let mode = match config.get_ssl_mode() {
            WireMode::Disable => SslMode::Disable,
            WireMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        let verifier = Verifier {
            check: Check::Nothing,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        };
        PgConnect {
            config,
            tls: MakeRustlsConnect::new(tls_config(verifier).expect("ring's TLS versions")),
            mode,
            roots: "no roots",
        }
    }
}

/// The rustls client of `verifier`, presenting no client certificate. (It fails only if the
/// provider had no cipher suite for TLS 1.2 and 1.3, which ring's has.)
fn tls_config(verifier: Verifier) -> Result<ClientConfig, String> {
    Ok(
        ClientConfig::builder_with_provider(verifier.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth(),
    )
}

/// Whether every host `config` names is a Unix-domain socket's directory.
fn only_unix_sockets(config: &Config) -> bool {
    let hosts = config.get_hosts();
    #[cfg(unix)]
    let unix =
        |h: &tokio_postgres::config::Host| matches!(h, tokio_postgres::config::Host::Unix(_));
    #[cfg(not(unix))]
    let unix = |_: &tokio_postgres::config::Host| false;
    !hosts.is_empty() && config.get_hostaddrs().is_empty() && hosts.iter().all(unix)
}

/// The rustls error behind a failed handshake: tokio-rustls wraps it in an `io::Error`, whose
/// own `source()` skips it, so the chain is searched by hand (bounded: chains are short).
fn rustls_error(error: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = error.source();
    for _ in 0..8 {
        let e = next?;
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(r) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(r);
        }
        next = e.source();
    }
    None
}

/// Adds every certificate of `pem` to `store`; `what` names where they came from.
fn add_pem(store: &mut RootCertStore, pem: &[u8], what: &str) -> Result<(), String> {
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("{what}: not PEM ({e})"))?;
        store
            .add(cert)
            .map_err(|e| format!("{what}: a certificate rustls cannot use as a root: {e}"))?;
        added += 1;
    }
    if added == 0 {
        return Err(format!(
            "{what} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(())
}

fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(format!(
            "no root certificates in the system's trust store ({}): give the server's CA with \
             tls_root_certificates or sslrootcert=<file>",
            if errors.is_empty() {
                "it is empty".to_owned()
            } else {
                errors.join("; ")
            }
        ));
    }
    Ok(store)
}

/// What a server certificate must pass.
#[derive(Debug)]
enum Check {
    /// Nothing (`require` and `prefer` without roots): encrypted, not authenticated.
    Nothing,
    /// Signed by one of these roots, for any host name (`verify-ca`).
    Chain(Arc<RootCertStore>),
    /// Signed by a trusted root and valid for the host (`verify-full`).
    Full(Arc<WebPkiServerVerifier>),
}

#[derive(Debug)]
struct Verifier {
    check: Check,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.check {
            Check::Nothing => {}
            Check::Chain(roots) => verify_server_cert_signed_by_trust_anchor(
                &ParsedCertificate::try_from(end_entity)?,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?,
            Check::Full(full) => {
                full.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                )?;
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    // The handshake's own signatures are checked under every mode: whatever is said of the
    // certificate, the server must hold its key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
