//! Which URL schemes a client takes, and the message for any other (redis-rs would say only
//! "Redis URL did not parse").

/// URL schemes a Redis target takes (redis-rs's).
const REDIS_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "valkey",
    "valkeys",
    "valkey+unix",
];

/// Why `url` is not a URL a Redis, PostgreSQL or ZooKeeper client takes (the other stores
/// only where one URL names the whole target, `postgres_too`), judged by its scheme alone
/// (redis-rs would say only "Redis URL did not parse").
pub(crate) fn scheme_problem(url: &str, postgres_too: bool) -> Option<String> {
    let takes = || {
        let mut list: Vec<String> = REDIS_SCHEMES.iter().map(|s| format!("{s}://")).collect();
        if postgres_too {
            list.push("postgres://".into());
            list.push("postgresql://".into());
            list.push("zk://".into());
            list.push("zk+tls://".into());
        }
        list.join(", ")
    };
    let Some((scheme, _)) = url.split_once("://") else {
        return Some(format!(
            "`{}` is not a URL (no scheme://); dlock takes {}",
            super::redact(url),
            takes()
        ));
    };
    let lower = scheme.to_ascii_lowercase();
    let known = REDIS_SCHEMES.contains(&lower.as_str())
        || (postgres_too
            && (lower == "postgres"
                || lower == "postgresql"
                || lower == "zk"
                || lower == "zk+tls"));
    (!known).then(|| {
        format!(
            "the URL `{}` has the scheme `{scheme}`; dlock takes {}",
            super::redact(url),
            takes()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::scheme_problem;

    #[test]
    fn unknown_schemes_list_the_accepted_ones() {
        assert!(scheme_problem("redis://127.0.0.1", false).is_none());
        assert!(scheme_problem("REDISS://h", false).is_none());
        assert!(scheme_problem("postgres://h", true).is_none());
        let bad = scheme_problem("http://u:secret@h:1", true).unwrap();
        assert!(
            bad.contains("scheme `http`") && bad.contains("postgres://"),
            "{bad}"
        );
        assert!(!bad.contains("secret"), "{bad}");
        let bad = scheme_problem("postgres://h", false).unwrap();
        assert!(!bad.contains("postgresql://"), "{bad}");
        assert!(scheme_problem("127.0.0.1:6379", false)
            .unwrap()
            .contains("not a URL"));
    }
}
