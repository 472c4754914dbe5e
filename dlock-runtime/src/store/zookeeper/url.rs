//! A `zk://` URL: `zk://[user:password@]host:port[,host:port...][/chroot]`; `zk+tls://` the
//! same over TLS to every host (feature `zookeeper-tls`, `tls.rs`).

/// What a `zk://` URL names.
#[derive(Clone, Debug)]
pub(crate) struct ZkUrl {
    /// `host:port,host:port` as the ZooKeeper client takes it, with the chroot appended.
    pub(crate) connect_string: String,
    /// Digest authentication (`user:password`), sent on every (re)connect.
    pub(crate) digest: Option<String>,
    /// `zk+tls://`: TLS to every host.
    pub(crate) tls: bool,
}

/// Parses `url`; the error says what is wrong with it (never the password).
pub(crate) fn parse(url: &str) -> Result<ZkUrl, String> {
    let tls = crate::settings::is_zookeeper_tls_url(url);
    let rest = url
        .split_once("://")
        .filter(|(scheme, _)| tls || scheme.eq_ignore_ascii_case("zk"))
        .map(|(_, rest)| rest)
        .ok_or("not a zk:// or zk+tls:// URL")?;
    // The chroot starts at the first `/` after the hosts; user info ends at the last `@`
    // before it (a password may hold `@`).
    let (authority, chroot) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (digest, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
        return Err("it names no host (zk://host:port[,host:port...][/chroot])".into());
    }
    if let Some(d) = digest {
        if !d.contains(':') {
            return Err("its user info must be user:password (ZooKeeper's digest scheme)".into());
        }
    }
    let chroot = chroot.trim_end_matches('/');
    if chroot.contains("//") {
        return Err(format!("its chroot `{chroot}` has an empty path segment"));
    }
    Ok(ZkUrl {
        connect_string: format!("{hosts}{chroot}"),
        digest: digest.map(str::to_owned),
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn hosts_chroot_and_digest_are_read() {
        let u = parse("zk://a:1,b:2/app/locks/").unwrap();
        assert_eq!(u.connect_string, "a:1,b:2/app/locks");
        assert!(u.digest.is_none());
        assert!(!u.tls);
        let u = parse("ZK+TLS://a:1/app").unwrap();
        assert_eq!(u.connect_string, "a:1/app");
        assert!(u.tls);
        assert!(parse("zks://a:1").unwrap_err().contains("zk+tls://"));
        let u = parse("zk://me:p@ss@a:1").unwrap();
        assert_eq!(u.connect_string, "a:1");
        assert_eq!(u.digest.as_deref(), Some("me:p@ss"));
        assert!(parse("zk:///x").unwrap_err().contains("names no host"));
        assert!(parse("zk://a:1,,b:2")
            .unwrap_err()
            .contains("names no host"));
        assert!(parse("zk://secret@a:1")
            .unwrap_err()
            .contains("user:password"));
        assert!(parse("zk://a:1//x")
            .unwrap_err()
            .contains("empty path segment"));
    }
}
