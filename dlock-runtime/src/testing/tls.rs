//! Certificates for a TLS test server, made with the `openssl` command-line tool at start:
//! a self-signed CA, a server certificate for `127.0.0.1` and `localhost` signed by it, and a second,
//! unrelated CA for "wrong CA" tests. On request ([`client_and_elsewhere`]), a client certificate
//! and a server certificate for another name, both signed by the same CA.
//!
//! P-256 keys: generating one takes milliseconds where RSA takes a noticeable fraction of a
//! second, and every TLS client in use accepts them. The extensions come from our own config
//! file rather than the system `openssl.cnf`, whose defaults differ between releases; they are
//! what strict verifiers (webpki, used by rustls) demand: `CA:TRUE` + keyCertSign on the CA, an
//! IP subjectAltName and serverAuth on the leaf (the CN is not looked at).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::bins::run_ok;

const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
# ZooKeeper checks a client certificate's names against the client's address by default
# (ssl.hostnameVerification applies to both sides).
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[elsewhere]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:elsewhere.invalid
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// Where the generated files are.
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    pub(crate) ca_cert: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    pub(crate) other_ca_cert: PathBuf,
    /// The CA's key, for [`client_and_elsewhere`].
    pub(crate) ca_key: PathBuf,
}

/// A client certificate and a server certificate for another name, signed by one CA.
#[derive(Debug, Clone)]
pub(crate) struct MoreFiles {
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
    /// Valid for `elsewhere.invalid` only, not for the addresses the server listens on.
    pub(crate) elsewhere_cert: PathBuf,
    pub(crate) elsewhere_key: PathBuf,
}

/// Writes the CA, the server key and certificate, and the unrelated CA into `dir`.
pub(crate) fn generate(dir: &Path) -> io::Result<TlsFiles> {
    let config = dir.join("openssl.cnf");
    std::fs::write(&config, OPENSSL_CONFIG)?;
    let files = TlsFiles {
        ca_cert: dir.join("ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        other_ca_cert: dir.join("other-ca.crt"),
        ca_key: dir.join("ca.key"),
    };
    self_signed_ca(&config, &files.ca_key, &files.ca_cert, "dlock test CA")?;
    self_signed_ca(
        &config,
        &dir.join("other-ca.key"),
        &files.other_ca_cert,
        "dlock unrelated CA",
    )?;
    leaf(
        dir,
        &files,
        "server",
        "127.0.0.1",
        &files.server_cert,
        &files.server_key,
    )?;
    Ok(files)
}

/// [`MoreFiles`], signed by the CA of `files` (made by [`generate`] in `dir`).
pub(crate) fn client_and_elsewhere(dir: &Path, files: &TlsFiles) -> io::Result<MoreFiles> {
    let more = MoreFiles {
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
        elsewhere_cert: dir.join("elsewhere.crt"),
        elsewhere_key: dir.join("elsewhere.key"),
    };
    leaf(
        dir,
        files,
        "client",
        "dlock test client",
        &more.client_cert,
        &more.client_key,
    )?;
    leaf(
        dir,
        files,
        "elsewhere",
        "elsewhere.invalid",
        &more.elsewhere_cert,
        &more.elsewhere_key,
    )?;
    Ok(more)
}

/// A key and a certificate with the extensions of `section` of the config, signed by the CA.
fn leaf(
    dir: &Path,
    files: &TlsFiles,
    section: &str,
    common_name: &str,
    cert: &Path,
    key: &Path,
) -> io::Result<()> {
    let config = dir.join("openssl.cnf");
    let csr = dir.join(format!("{section}.csr"));
    openssl(
        Command::new("openssl")
            .args(["req", "-new", "-nodes", "-config"])
            .arg(&config)
            .args(EC_KEY)
            .arg("-keyout")
            .arg(key)
            .arg("-out")
            .arg(&csr)
            .args(["-subj", &format!("/CN={common_name}")]),
    )?;
    // A serial unique enough that two certificates never look like one reissued.
    let serial = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos());
    openssl(
        Command::new("openssl")
            .args(["x509", "-req", "-days", "7", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(&files.ca_cert)
            .arg("-CAkey")
            .arg(&files.ca_key)
            .args(["-set_serial", &serial.to_string(), "-extfile"])
            .arg(&config)
            .args(["-extensions", section, "-out"])
            .arg(cert),
    )
}

const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

fn self_signed_ca(config: &Path, key: &Path, cert: &Path, name: &str) -> io::Result<()> {
    openssl(
        Command::new("openssl")
            .args(["req", "-x509", "-new", "-nodes", "-days", "7", "-config"])
            .arg(config)
            .args(["-extensions", "ca"])
            .args(EC_KEY)
            .arg("-keyout")
            .arg(key)
            .arg("-out")
            .arg(cert)
            .args(["-subj", &format!("/CN={name}")]),
    )
}

fn openssl(cmd: &mut Command) -> io::Result<()> {
    run_ok(cmd, Duration::from_secs(30)).map(drop)
}
