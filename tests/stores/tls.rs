//! The PostgreSQL store over TLS, against servers the harness starts with `ssl = on` and a
//! certificate for `127.0.0.1` and `localhost` signed by a CA it generates: each `sslmode` with
//! libpq's meaning, checked on the server (`pg_stat_ssl`) for every connection a client opens,
//! and every refusal saying what to change.

use std::time::{Duration, Instant};

use dlock::testing::{postgres_available, PgServer};
use dlock::{LockClient, LockError, StoreFault};

/// Whether PostgreSQL is installed; if not, says the running test skips `what`.
fn postgres_or_skip(what: &str) -> bool {
    let there = postgres_available();
    if !there {
        super::common::skipped(what, "no PostgreSQL server binaries");
    }
    there
}

/// `postgres://postgres@<host>:<port>/postgres?<params>`.
fn url(server: &PgServer, host: &str, params: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?{params}",
        server.port()
    )
}

/// The error of a client that must not have been built, `what` saying why.
fn refused(built: Result<LockClient, LockError>, what: &str) -> LockError {
    match built {
        Ok(_) => panic!("built: {what}"),
        Err(e) => e,
    }
}

fn ca(server: &PgServer) -> Vec<u8> {
    std::fs::read(server.ca_cert().expect("a TLS server")).expect("read the CA")
}

/// Psql's answer to `sql` (as the superuser).
fn ask(server: &PgServer, sql: &str) -> String {
    server.psql(sql).unwrap_or_else(|e| panic!("psql: {e}"))
}

/// "<connections over TLS>|<connections>" of the clients whose application_name starts
/// with `app`, as the server sees them.
fn encrypted(server: &PgServer, app: &str) -> String {
    ask(
        server,
        &format!(
            "SELECT count(*) FILTER (WHERE s.ssl) || '|' || count(*) \
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name LIKE '{app}%'"
        ),
    )
}

/// Waits (bounded: 10 s) until the client named `app` is parked on a held lock: its LISTEN
/// connection's last statement is a LISTEN, and its command connection has answered a call
/// sent after it (the retry a waiter makes once subscribed). A release after this can only
/// reach it through NOTIFY, or the holder's lease.
fn until_parked(server: &PgServer, app: &str) {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity c, pg_stat_activity l \
         WHERE c.application_name = '{app}' AND l.application_name = '{app}' \
         AND c.pid <> l.pid AND l.query LIKE 'LISTEN%' AND c.state = 'idle' \
         AND c.query_start > l.query_start"
    );
    let start = Instant::now();
    for _ in 0..500 {
        if ask(server, &sql) != "0" {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{app} not parked within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{app} not parked after 500 looks");
}

/// A lock cycle with a wake-up: `holder` takes the lock (30 s lease), `waiter` (named `app`)
/// parks on it, the release must wake it through NOTIFY well before the lease would.
async fn cycle_with_wake_up(
    server: &PgServer,
    holder: &LockClient,
    waiter: &LockClient,
    app: &str,
) {
    let name = format!("tls:{app}");
    let guard = (holder.lock(&name))
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{app}: acquire: {e}"));
    let lock = waiter.lock(&name).wait(Duration::from_secs(20));
    let waiting = tokio::spawn(async move {
        let got = lock.acquire().await;
        (got, Instant::now())
    });
    tokio::task::block_in_place(|| until_parked(server, app));
    let released = Instant::now();
    guard.release().await.expect("release");
    let (got, at) = waiting.await.expect("waiter");
    let got = got.unwrap_or_else(|e| panic!("{app}: the waiter: {e}"));
    let after = at.duration_since(released);
    assert!(
        after < Duration::from_secs(2),
        "{app}: woken {after:?} after the release (the lease is 30 s)"
    );
    got.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_verifying_mode_locks_and_wakes_over_tls() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::builder().ssl().start().expect("start PostgreSQL");
    let ca_path = server
        .ca_cert()
        .expect("a TLS server")
        .display()
        .to_string();
    // require: no roots at all (libpq: nothing verified). verify-ca: the root from the URL,
    // and a host name the certificate does not list (verify-ca does not look at it).
    // verify-full: the root from the builder, the IP the certificate lists.
    let cases = [
        ("require", "127.0.0.1", "sslmode=require".to_owned(), false),
        (
            "verify-ca",
            "db.invalid",
            format!("hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={ca_path}"),
            false,
        ),
        (
            "verify-full",
            "127.0.0.1",
            "sslmode=verify-full".into(),
            true,
        ),
    ];
    for (mode, host, params, builder_roots) in cases {
        let client = |who: &str| {
            let u = url(
                &server,
                host,
                &format!("{params}&application_name=tls-{mode}-{who}"),
            );
            let mut b = LockClient::builder(u).connections(2);
            if builder_roots {
                b = b.tls_root_certificates(ca(&server));
            }
            async move { b.build().await }
        };
        let holder = client("holder")
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        let waiter = client("waiter")
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        cycle_with_wake_up(&server, &holder, &waiter, &format!("tls-{mode}-waiter")).await;
        // Two clients of two command connections and one LISTEN connection each.
        assert_eq!(
            encrypted(&server, &format!("tls-{mode}-")),
            "6|6",
            "{mode}: every connection over TLS"
        );
        holder.shutdown().await;
        waiter.shutdown().await;
    }
}

/// The backend pids of the clients whose application_name starts with `app`, sorted.
fn pids(server: &PgServer, app: &str) -> Vec<u32> {
    let listed = ask(
        server,
        &format!(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE '{app}%' ORDER BY pid"
        ),
    );
    listed.lines().map(|l| l.parse().expect("a pid")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_reopened_after_the_server_ended_them_use_tls_too() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::builder().ssl().start().expect("start PostgreSQL");
    let client = |who: &str| {
        let u = url(
            &server,
            "127.0.0.1",
            &format!("sslmode=verify-full&application_name=reopen-{who}"),
        );
        LockClient::builder(u)
            .tls_root_certificates(ca(&server))
            .build()
    };
    let holder = client("holder").await.expect("holder");
    let waiter = client("waiter").await.expect("waiter");
    cycle_with_wake_up(&server, &holder, &waiter, "reopen-waiter").await;
    let before = pids(&server, "reopen-");
    assert_eq!(
        before.len(),
        4,
        "one request and one LISTEN connection each"
    );
    let ended = ask(
        &server,
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name LIKE 'reopen-%'",
    );
    assert_eq!(ended, "4");
    // The request connections are reopened by the next call, the LISTEN connections by the
    // listener itself: the cycle needs both.
    cycle_with_wake_up(&server, &holder, &waiter, "reopen-waiter").await;
    // The holder's LISTEN connection comes back on its own time: waited for, bounded.
    let start = Instant::now();
    let mut after = pids(&server, "reopen-");
    for _ in 0..500 {
        let replaced = after.len() == 4 && after.iter().all(|p| !before.contains(p));
        if replaced || start.elapsed() > Duration::from_secs(10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = pids(&server, "reopen-");
    }
    assert_eq!(
        after.len(),
        4,
        "every connection back within 10 s: {after:?}"
    );
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "every connection replaced: before {before:?}, after {after:?}"
    );
    assert_eq!(
        encrypted(&server, "reopen-"),
        "4|4",
        "the new ones over TLS"
    );
    holder.shutdown().await;
    waiter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_is_ignored_on_a_unix_socket_as_libpq_does() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::builder().ssl().start().expect("start PostgreSQL");
    // The socket's directory as the URL's host, percent-encoded.
    let dir: String = server
        .dir()
        .display()
        .to_string()
        .bytes()
        .map(|b| match b {
            b'/' => "%2F".to_owned(),
            b => (b as char).to_string(),
        })
        .collect();
    let u = format!(
        "postgres://postgres@{dir}:{}/postgres?sslmode=verify-full",
        server.port()
    );
    let client = LockClient::connect(&u)
        .await
        .expect("a Unix socket has no TLS to verify");
    let g = client.lock("tls:unix").acquire().await.expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_certificate_for_another_host_name() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::builder().ssl().start().expect("start PostgreSQL");
    let for_host = |host: &str| {
        LockClient::builder(url(&server, host, "hostaddr=127.0.0.1&sslmode=verify-full"))
            .tls_root_certificates(ca(&server))
            .build()
    };
    let e = refused(
        for_host("db.invalid").await,
        "a certificate for 127.0.0.1 and localhost is not one for db.invalid",
    );
    let text = e.to_string();
    assert!(
        matches!(
            e,
            LockError::Store {
                fault: StoreFault::Refused,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_transient(), "a retry cannot help: {e:?}");
    assert!(text.contains("not valid for the host name"), "{text}");
    assert!(text.contains("sslmode=verify-ca"), "what to do: {text}");
    // The same server under a name its certificate lists.
    let client = for_host("localhost").await.expect("localhost is listed");
    let g = client.lock("tls:name").acquire().await.expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_signed_by_another_ca_is_refused_once_roots_are_given() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::builder().ssl().start().expect("start PostgreSQL");
    let other = std::fs::read(server.other_ca_cert().unwrap()).unwrap();
    // verify-ca, and require with roots given (libpq checks the chain then too).
    for mode in ["verify-ca", "require"] {
        let e = refused(
            LockClient::builder(url(&server, "127.0.0.1", &format!("sslmode={mode}")))
                .tls_root_certificates(other.clone())
                .build()
                .await,
            &format!("{mode}: a server the given CA did not sign"),
        );
        let text = e.to_string();
        assert!(!e.is_transient(), "a retry cannot help: {e:?}");
        assert!(text.contains("not signed by a root certificate"), "{text}");
        assert!(text.contains("tls_root_certificates"), "what to do: {text}");
        assert!(text.contains(&format!("sslmode={mode}")), "{text}");
    }
    // The URL's sslrootcert is trusted besides the builder's roots.
    let ca_path = server.ca_cert().unwrap().display().to_string();
    let both = format!("sslmode=verify-full&sslrootcert={ca_path}");
    let client = LockClient::builder(url(&server, "127.0.0.1", &both))
        .tls_root_certificates(other)
        .build()
        .await
        .expect("the URL's root signed it");
    let g = client.lock("tls:roots").acquire().await.expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_separate_listen_url_has_its_own_sslmode_and_the_builder_roots() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::builder().ssl().start().expect("start PostgreSQL");
    let main = url(
        &server,
        "127.0.0.1",
        "sslmode=verify-full&application_name=lu-main",
    );
    let listen = |params: &str| {
        LockClient::builder(main.as_str())
            .tls_root_certificates(ca(&server))
            .postgres_listen_url(url(&server, "db.invalid", params))
            .build()
    };
    let client = listen("hostaddr=127.0.0.1&sslmode=verify-ca&application_name=lu-listen")
        .await
        .expect("verify-ca does not look at the name");
    assert_eq!(encrypted(&server, "lu-main"), "1|1");
    assert_eq!(encrypted(&server, "lu-listen"), "1|1");
    client.shutdown().await;
    let e = refused(
        listen("hostaddr=127.0.0.1&sslmode=verify-full").await,
        "the listener's own verify-full checks the name",
    );
    let text = e.to_string();
    assert!(text.contains("listener connection"), "{text}");
    assert!(text.contains("not valid for the host name"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_is_refused_by_a_server_without_ssl() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::start().expect("start PostgreSQL");
    for mode in ["require", "verify-full"] {
        let e = refused(
            LockClient::connect(&url(&server, "127.0.0.1", &format!("sslmode={mode}"))).await,
            &format!("{mode} against a server without TLS"),
        );
        let text = e.to_string();
        assert!(!e.is_transient(), "a retry cannot help: {e:?}");
        assert!(text.contains("does not accept TLS"), "{text}");
        assert!(text.contains("sslmode=prefer"), "what to do: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_takes_tls_where_offered_and_plain_where_not() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let plain = PgServer::start().expect("start PostgreSQL");
    let tls = PgServer::builder().ssl().start().expect("start PostgreSQL");
    // No sslmode is prefer too (libpq's default).
    let cases = [
        (&plain, "sslmode=prefer&", "0|2"),
        (&plain, "", "0|2"),
        (&tls, "sslmode=prefer&", "2|2"),
        (&tls, "", "2|2"),
    ];
    for (i, (server, params, expected)) in cases.into_iter().enumerate() {
        let app = format!("prefer-{i}");
        let u = url(
            server,
            "127.0.0.1",
            &format!("{params}application_name={app}"),
        );
        let client = LockClient::connect(&u)
            .await
            .unwrap_or_else(|e| panic!("{params:?}: {e}"));
        let g = client.lock("tls:prefer").acquire().await.expect("acquire");
        g.release().await.expect("release");
        // One command connection and the LISTEN connection.
        assert_eq!(encrypted(server, &app), expected, "case {i}: {params:?}");
        client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_is_refused_by_a_server_that_requires_ssl() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    let server = PgServer::builder()
        .ssl_only()
        .start()
        .expect("start PostgreSQL");
    let e = refused(
        LockClient::connect(&url(&server, "127.0.0.1", "sslmode=disable")).await,
        "plain TCP refused by hostssl-only pg_hba.conf",
    );
    let text = e.to_string();
    assert!(text.contains("hostssl"), "{text}");
    assert!(text.contains("sslmode=verify-full"), "what to do: {text}");
    let client = LockClient::builder(url(&server, "127.0.0.1", "sslmode=verify-full"))
        .tls_root_certificates(ca(&server))
        .build()
        .await
        .expect("verify-full against the same server");
    let g = client.lock("tls:only").acquire().await.expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_role_logs_in_with_channel_binding_and_a_wrong_password_is_not_shown() {
    if !postgres_or_skip("PostgreSQL over TLS") {
        return;
    }
    // ssl_only: roles other than `postgres` must give their password (SCRAM).
    let server = PgServer::builder()
        .ssl_only()
        .start()
        .expect("start PostgreSQL");
    let password = "p@ss:w/rd?sslmode=disable";
    ask(
        &server,
        &format!(
            "CREATE ROLE tls_user LOGIN PASSWORD '{password}'; \
             GRANT CREATE ON DATABASE postgres TO tls_user"
        ),
    );
    let login = |password: &str| {
        let encoded: String = password
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        // channel_binding=require: SCRAM-SHA-256-PLUS, bound to this TLS session's server
        // certificate, or no login at all.
        let u = format!(
            "postgres://tls_user:{encoded}@127.0.0.1:{}/postgres?sslmode=verify-full&\
             channel_binding=require&application_name=scram",
            server.port()
        );
        LockClient::builder(u)
            .tls_root_certificates(ca(&server))
            .build()
    };
    let client = login(password).await.expect("the right password");
    let g = client.lock("tls:scram").acquire().await.expect("acquire");
    g.release().await.expect("release");
    assert_eq!(encrypted(&server, "scram"), "2|2");
    client.shutdown().await;
    let wrong = "not-the-pw-4711";
    let e = refused(login(wrong).await, "a wrong password");
    let text = format!("{e} {e:?}");
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(
        !text.contains(wrong) && !text.contains("4711"),
        "the password shown: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_that_cannot_work_are_refused_by_name() {
    // Refused before connecting, except the file, which is read at build: no server needed.
    let base = "postgres://locks:s3cret-pw@127.0.0.1:9/postgres";
    let pem = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n";
    let cases: Vec<(String, Option<Vec<u8>>, &str)> = vec![
        (
            format!("{base}?sslmode=verify_full"),
            None,
            "sslmode `verify_full`",
        ),
        (format!("{base}?sslmode=allow"), None, "sslmode=allow"),
        (
            format!("{base}?sslmode=verify-ca&sslrootcert=/nonexistent/root.pem"),
            None,
            "cannot read sslrootcert /nonexistent/root.pem",
        ),
        (
            format!("{base}?sslrootcert=system&sslmode=require"),
            None,
            "sslrootcert=system needs sslmode=verify-full",
        ),
        (
            format!("{base}?sslcert=/c.pem"),
            None,
            "client certificates",
        ),
        (
            format!("{base}?sslmode=disable"),
            Some(pem.to_vec()),
            "sslmode=disable",
        ),
        (
            format!("{base}?sslmode=verify-full"),
            Some(b"no certificate here".to_vec()),
            "tls_root_certificates holds no PEM certificate",
        ),
        (
            format!("{base}?sslmode=verify-full"),
            Some(pem.to_vec()),
            "tls_root_certificates",
        ),
    ];
    for (url, roots, expected) in cases {
        let mut b = LockClient::builder(url.as_str()).connect_timeout(Duration::from_millis(500));
        if let Some(roots) = roots {
            b = b.tls_root_certificates(roots);
        }
        let e = refused(b.build().await, &format!("{url}: accepted"));
        let text = e.to_string();
        assert!(
            matches!(e, LockError::InvalidArgument { .. }),
            "{url}: {e:?}"
        );
        assert!(text.contains(expected), "{url}: {text}");
        assert!(
            !text.contains("s3cret-pw"),
            "a password in an error: {text}"
        );
    }
}
