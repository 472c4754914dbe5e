//! URLs with their passwords removed, so they can go into errors, logs and `Debug`.
//!
//! Parsed as redis-rs parses them (the `url` crate): the user info ends at the *last* `@`
//! before the host, so a password may itself hold `@`, `:` or anything percent-encoded. A
//! URL that does not parse is redacted conservatively: everything between the scheme and its
//! last `@` goes.

use url::Url;

/// What stands for a removed secret.
const HIDDEN: &str = "***";

/// Several URLs, redacted, comma-separated.
pub(crate) fn redact_all(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

/// `redis://user:secret@host` -> `redis://user:***@host`. User info without a password
/// (`redis://secret@host`) is hidden whole: some write the password there.
pub(crate) fn redact(url: &str) -> String {
    match Url::parse(url) {
        // No authority (`u:p@host` reads as scheme `u`), or an `@` that parsed into the path,
        // query or fragment (`redis://pw/x@h`, a port that is not one): what the user meant
        // as user info did not parse as such, so it goes by the fallback's rule.
        Ok(parsed)
            if url.contains('@')
                && (parsed.host().is_none()
                    || (parsed.password().is_none() && parsed.username().is_empty())) =>
        {
            cut_user_info(url)
        }
        Ok(parsed) if parsed.password().is_none() && parsed.username().is_empty() => {
            hide_query_secrets(parsed, url)
        }
        Ok(mut parsed) => {
            let hidden = if parsed.password().is_some() {
                parsed.set_password(Some(HIDDEN))
            } else {
                parsed.set_username(HIDDEN)
            };
            match hidden {
                Ok(()) => hide_query_secrets(parsed, url),
                Err(()) => cut_user_info(url),
            }
        }
        Err(_) => cut_user_info(url),
    }
}

/// `parsed` with the values of `pass` and `password` query parameters hidden (redis-rs reads
/// the password of a `redis+unix://` URL there); `original` when nothing was hidden at all.
fn hide_query_secrets(mut parsed: Url, original: &str) -> String {
    let secret = |k: &str| k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password");
    if !parsed.query_pairs().any(|(k, _)| secret(&k)) {
        return if parsed.password().is_some() || !parsed.username().is_empty() {
            parsed.to_string()
        } else {
            original.to_owned()
        };
    }
    let pairs: Vec<(String, String)> = parsed
        .query_pairs()
        .map(|(k, v)| {
            let v = if secret(&k) {
                HIDDEN.to_owned()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    parsed.query_pairs_mut().clear().extend_pairs(pairs);
    parsed.to_string()
}

/// The fallback for what does not parse: everything between `://` and the last `@` goes.
fn cut_user_info(url: &str) -> String {
    let Some(at) = url.rfind('@') else {
        return url.to_owned();
    };
    let start = url.find("://").map_or(0, |i| i + 3).min(at);
    format!("{}{HIDDEN}{}", &url[..start], &url[at..])
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden_whatever_they_hold() {
        assert_eq!(redact("redis://a:pw@h:1"), "redis://a:***@h:1");
        assert_eq!(redact("redis://pw@h"), "redis://***@h");
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
        // redis-rs splits at the last `@`: the whole of `open@Sesame` is the password.
        assert_eq!(
            redact("redis://locks:open@Sesame-7b1f2@127.0.0.1:6379"),
            "redis://locks:***@127.0.0.1:6379"
        );
        assert_eq!(redact("redis://u:a:b:c@h"), "redis://u:***@h");
        assert_eq!(
            redact("rediss://u:open%40Sesame@h:6380/2"),
            "rediss://u:***@h:6380/2"
        );
        assert_eq!(redact("redis://u:pässwörd@h"), "redis://u:***@h");
    }

    #[test]
    fn an_at_that_did_not_parse_as_user_info_still_hides_what_precedes_it() {
        // redis-rs would fail on these (host `pw`, port `123`), and print them in its error.
        assert_eq!(redact("redis://pw/x@h:6379"), "redis://***@h:6379");
        assert_eq!(redact("redis://user:123/def@h:6379"), "redis://***@h:6379");
        assert_eq!(redact("redis://u:12#frag@h"), "redis://***@h");
        assert_eq!(redact("redis://pw?x@h"), "redis://***@h");
    }

    #[test]
    fn passwords_in_the_query_are_hidden() {
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?db=1&pass=s3cret"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(
            redact("redis://h:1/?password=s3cret"),
            "redis://h:1/?password=***"
        );
    }

    #[test]
    fn what_does_not_parse_loses_everything_before_its_last_at() {
        assert_eq!(redact("redis://u:p@ss@[::1"), "redis://***@[::1");
        assert_eq!(redact("u:p@ss@host"), "***@host");
        assert_eq!(redact("not a url"), "not a url");
    }
}
