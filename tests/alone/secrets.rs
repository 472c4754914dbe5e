//! Passwords never leave the client (issue 17 item 2): every URL dlock shows (`client.url()`,
//! `Debug`, errors, logs) is redacted by parsing it as redis-rs does, whatever the password
//! holds: `@` (redis-rs splits the user info at the *last* one), `:`, percent-escapes and
//! non-ASCII text. Each password is first proved to be the one Redis checks (the client logs
//! in with it and takes a lock), so the test cannot pass on a URL nobody would use.
//!
//! Its own binary: it installs a process-wide subscriber at TRACE to read every log line from
//! every thread (the client's own thread included); tracing caches per call site whether a
//! line is enabled, so no other test may reach those call sites first.

#[path = "../common/mod.rs"]
mod common;

use common::logs::Logs;
use dlock::{LockClient, LockError};

/// An ACL user, its password as Redis knows it, the password as written in a URL, and text
/// that would betray it if it showed up anywhere.
struct Secret {
    user: &'static str,
    password: &'static str,
    in_url: &'static str,
    tells: &'static [&'static str],
}

const SECRETS: [Secret; 4] = [
    Secret {
        user: "at",
        password: "open@Sesame-7b1f2",
        in_url: "open@Sesame-7b1f2",
        tells: &["Sesame", "7b1f2"],
    },
    Secret {
        user: "colon",
        password: "pa:ss:w0rd",
        in_url: "pa:ss:w0rd",
        tells: &["ss:w0rd", "w0rd"],
    },
    Secret {
        user: "escaped",
        password: "shut@Sesame-9c2e",
        in_url: "shut%40Sesame-9c2e",
        tells: &["%40Sesame", "9c2e"],
    },
    Secret {
        user: "unicode",
        password: "pässwörd-ü8",
        in_url: "pässwörd-ü8",
        tells: &["pässwörd", "p%C3%A4ss", "%C3%BC8", "ü8"],
    },
];

fn assert_hidden(what: &str, text: &str, secret: &Secret) {
    for tell in secret
        .tells
        .iter()
        .chain([&secret.password, &secret.in_url])
    {
        assert!(
            !text.contains(tell),
            "{what} shows {tell:?} of {}'s password: {text}",
            secret.user
        );
    }
}

#[tokio::test]
async fn passwords_with_at_colon_escapes_and_unicode_never_show() {
    let logs = Logs::default();
    tracing::subscriber::set_global_default(logs.subscriber(tracing::Level::TRACE))
        .expect("the only subscriber of this binary");
    let mut builder = dlock::testing::RedisServer::builder();
    for s in &SECRETS {
        builder = builder.user(s.user, s.password);
    }
    let server = builder.start().expect("start redis-server with ACL users");
    let closed_port = server.port() + 1;

    for s in &SECRETS {
        let url = format!(
            "redis://{}:{}@127.0.0.1:{}",
            s.user,
            s.in_url,
            server.port()
        );
        let client = LockClient::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{} logs in with its password: {e}", s.user));
        let guard = client.lock("secret").acquire().await.unwrap();
        guard.release().await.unwrap();

        let shown = format!("redis://{}:***@127.0.0.1:{}", s.user, server.port());
        assert_eq!(client.url(), shown);
        assert_hidden("client.url()", client.url(), s);
        assert_hidden("Debug of the client", &format!("{client:?}"), s);
        assert_hidden(
            "Debug of a builder",
            &format!("{:?}", LockClient::builder(&url)),
            s,
        );
        let seeds = [url.clone(), url.clone()];
        let cluster = format!("{:?}", LockClient::cluster_builder(seeds));
        assert_hidden("Debug of a cluster builder", &cluster, s);

        let down = format!("redis://{}:{}@127.0.0.1:{closed_port}", s.user, s.in_url);
        let err = LockClient::connect(&down).await.unwrap_err();
        assert!(matches!(err, LockError::Connect { .. }), "{err:?}");
        assert_hidden("an error's message", &err.to_string(), s);
        assert_hidden("an error's Debug", &format!("{err:?}"), s);
        drop(client);
    }

    let text = logs.text();
    // The logs were read: the client logged its (redacted) URL when it connected.
    assert!(
        text.contains(":***@127.0.0.1:"),
        "no URL in the logs: {text}"
    );
    for s in &SECRETS {
        assert_hidden("the TRACE log", &text, s);
    }
}
