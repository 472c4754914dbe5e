//! The TLS parameters of a PostgreSQL URL, `sslmode` and `sslrootcert`, read here rather than
//! by tokio-postgres, which knows only `disable`, `prefer` and `require` and no root
//! certificate file. They are taken out of the URL; the rest goes to tokio-postgres as it was.
//!
//! The meanings are libpq's, since that is what people who write these URLs know:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (default) | when the server offers it, else plain | like `require` |
//! | `require` | always | not checked, unless root certificates are given: then like `verify-ca` |
//! | `verify-ca` | always | signed by a trusted root; any host name |
//! | `verify-full` | always | signed by a trusted root, and valid for the host connected to |
//!
//! `sslrootcert=<file>` (PEM) names trusted roots, added to the builder's
//! `tls_root_certificates`; `sslrootcert=system` the system's trust store, and then, as in
//! libpq 16, `verify-full` is the default and the only mode allowed. Without roots of their own,
//! `verify-ca` and `verify-full` trust the system's store (libpq would refuse without
//! `~/.postgresql/root.crt`, which dlock does not read). A Unix-domain socket never has TLS,
//! whatever the mode (as in libpq).

use std::borrow::Cow;
use std::path::PathBuf;

/// libpq's `sslmode`s that dlock offers (`allow` is not one: see [`split_tls`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// The name the URL uses, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// What the URL's `sslrootcert` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// A PEM file of root certificates.
    File(PathBuf),
    /// `system`: the operating system's trust store.
    System,
}

/// A PostgreSQL URL split into its TLS parameters and the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PgUrlTls {
    /// The URL without `sslmode` and `sslrootcert`: what tokio-postgres reads.
    pub(crate) rest: String,
    pub(crate) mode: SslMode,
    pub(crate) root: Option<RootCert>,
}

/// Parameters for client certificates and revocation lists: refused by name rather than left to
/// tokio-postgres's "unknown option".
const UNSUPPORTED: [(&str, &str); 5] = [
    ("sslcert", CLIENT_CERTS),
    ("sslkey", CLIENT_CERTS),
    ("sslpassword", CLIENT_CERTS),
    ("sslcrl", REVOCATION),
    ("sslcrldir", REVOCATION),
];
const CLIENT_CERTS: &str = "client certificates are not supported by dlock's PostgreSQL store yet: authenticate with a password (SCRAM) over TLS";
const REVOCATION: &str =
    "certificate revocation lists are not supported by dlock's PostgreSQL store yet";

/// Splits `url` (a `postgres://` URL) into its TLS parameters and the rest, or says what is
/// wrong with them. The message names the parameter, never the URL (it may hold a password).
pub(crate) fn split_tls(url: &str) -> Result<PgUrlTls, String> {
    // Where tokio-postgres looks for parameters: after the user info, which ends at the first
    // `@`, from the first `?`. Found the same way here, so both read the same parameters.
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let host_from = url[after_scheme..]
        .find('@')
        .map_or(after_scheme, |i| after_scheme + i + 1);
    let Some(q) = url[host_from..].find('?').map(|i| host_from + i) else {
        return Ok(PgUrlTls {
            rest: url.to_owned(),
            mode: SslMode::Prefer,
            root: None,
        });
    };
    let mut kept = Vec::new();
    let (mut mode, mut root) = (None, None);
    for pair in url[q + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match decode(key).as_ref() {
            "sslmode" => mode = Some(parse_mode(&decode(value))?),
            "sslrootcert" => root = Some(parse_root(&decode(value))?),
            other => {
                if let Some((_, why)) = UNSUPPORTED.iter().find(|(k, _)| *k == other) {
                    return Err(format!("`{other}` in the PostgreSQL URL: {why}"));
                }
                kept.push(pair);
            }
        }
    }
    let mode = match (mode, &root) {
        // libpq 16: the system's store makes sense only with the host name checked.
        (None, Some(RootCert::System)) => SslMode::VerifyFull,
        (Some(m), Some(RootCert::System)) if m != SslMode::VerifyFull => {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full (got sslmode={}): a certificate \
                 any public CA signed for any host would pass otherwise",
                m.name()
            ));
        }
        (m, _) => m.unwrap_or(SslMode::Prefer),
    };
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok(PgUrlTls { rest, mode, root })
}

/// Percent-decoded as tokio-postgres decodes parameters (no `+` for space).
fn decode(s: &str) -> Cow<'_, str> {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy()
}

fn parse_mode(value: &str) -> Result<SslMode, String> {
    Ok(match value {
        "disable" => SslMode::Disable,
        "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        "verify-full" => SslMode::VerifyFull,
        "allow" => {
            return Err(
                "sslmode=allow (plain first, TLS only if the server insists) is not \
                        supported: use prefer (TLS when the server offers it) or disable"
                    .into(),
            )
        }
        other => {
            return Err(format!(
                "sslmode `{other}` in the PostgreSQL URL is not one of disable, prefer, \
                 require, verify-ca, verify-full"
            ))
        }
    })
}

fn parse_root(value: &str) -> Result<RootCert, String> {
    match value {
        "" => Err(
            "sslrootcert in the PostgreSQL URL is empty: name a PEM file of root \
                   certificates, or `system` for the system's trust store"
                .into(),
        ),
        "system" => Ok(RootCert::System),
        path => Ok(RootCert::File(PathBuf::from(path))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_and_the_rest_kept_as_written() {
        let split =
            split_tls("postgres://u:p%3Fw@h:5432/db?application_name=a%20b&sslmode=verify-ca&sslrootcert=%2Ftmp%2Fca+1.pem&connect_timeout=3")
                .unwrap();
        assert_eq!(
            split.rest,
            "postgres://u:p%3Fw@h:5432/db?application_name=a%20b&connect_timeout=3"
        );
        assert_eq!(split.mode, SslMode::VerifyCa);
        assert_eq!(
            split.root,
            Some(RootCert::File(PathBuf::from("/tmp/ca+1.pem")))
        );
    }

    #[test]
    fn without_parameters_the_default_is_prefer() {
        let split = split_tls("postgresql://h/db").unwrap();
        assert_eq!(split.rest, "postgresql://h/db");
        assert_eq!(split.mode, SslMode::Prefer);
        let only = split_tls("postgres://h/db?sslmode=require").unwrap();
        assert_eq!(only.rest, "postgres://h/db");
        assert_eq!(only.mode, SslMode::Require);
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        let split = split_tls("postgres://u:a?sslmode=disable@h/db?sslmode=verify-full").unwrap();
        assert_eq!(split.rest, "postgres://u:a?sslmode=disable@h/db");
        assert_eq!(split.mode, SslMode::VerifyFull);
    }

    #[test]
    fn system_roots_mean_verify_full() {
        let split = split_tls("postgres://h/db?sslrootcert=system").unwrap();
        assert_eq!(split.mode, SslMode::VerifyFull);
        let e = split_tls("postgres://h/db?sslrootcert=system&sslmode=require").unwrap_err();
        assert!(e.contains("sslmode=verify-full"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = split_tls("postgres://u:secret@h/db?sslmode=verify_full").unwrap_err();
        assert!(
            e.contains("`verify_full`") && e.contains("verify-full"),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
        let e = split_tls("postgres://h/db?sslmode=allow").unwrap_err();
        assert!(e.contains("prefer"), "{e}");
        let e = split_tls("postgres://h/db?sslrootcert=").unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = split_tls("postgres://h/db?sslcert=/c.pem&sslkey=/k.pem").unwrap_err();
        assert!(
            e.contains("`sslcert`") && e.contains("client certificates"),
            "{e}"
        );
    }
}
