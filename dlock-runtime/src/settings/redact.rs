//! URLs with their passwords removed, so they can go into errors, logs and `Debug`.

/// Several URLs, redacted, comma-separated.
pub(crate) fn redact_all(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

/// `redis://user:secret@host` -> `redis://user:***@host`.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.find('@') else {
        return url.to_owned();
    };
    let creds = &rest[..at];
    let user = creds.split(':').next().unwrap_or("");
    if creds.contains(':') {
        format!("{}{user}:***{}", &url[..scheme_end], &rest[at..])
    } else {
        format!("{}***{}", &url[..scheme_end], &rest[at..])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_passwords() {
        assert_eq!(super::redact("redis://a:pw@h:1"), "redis://a:***@h:1");
        assert_eq!(super::redact("redis://pw@h"), "redis://***@h");
        assert_eq!(super::redact("redis://h:1/0"), "redis://h:1/0");
    }
}
