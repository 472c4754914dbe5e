//! Metrics and spans (issue 19 item 2), read the way an operator reads them: a Prometheus
//! recorder installed for the process (so this binary of its own) renders what the locks
//! counted, and a `tracing` subscriber prints the `dlock.acquire` and `dlock.hold` spans.
//! Labels are the lock's template, never the rendered key.

#![cfg(feature = "metrics")]

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use common::logs::Logs;
use dlock::{distributed_lock, distributed_semaphore, LockClient, LockError};
use tracing_subscriber::fmt::format::FmtSpan;

#[distributed_lock(key = "metrics:{id}", client = client)]
async fn locked(client: &LockClient, id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[distributed_semaphore(key = "export:{tenant}", permits = 2, client = client)]
async fn exported(client: &LockClient, tenant: u32) -> Result<u32, LockError> {
    Ok(tenant)
}

/// The rendered sample lines of `metric` whose labels include every one of `labels`.
fn samples<'a>(text: &'a str, metric: &str, labels: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .collect()
}

/// The value of the one sample of `metric` with `labels`.
fn value(text: &str, metric: &str, labels: &[&str]) -> f64 {
    let found = samples(text, metric, labels);
    assert_eq!(found.len(), 1, "{metric} {labels:?} in:\n{text}");
    found[0].rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_count_by_template_and_trace_their_acquires_and_holds() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("install the Prometheus recorder");

    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let mut admin = common::raw(&server.url()).await;

    // Acquired through the attribute, three keys of one template: one series.
    for id in 0..3 {
        assert_eq!(locked(&client, id).await.unwrap(), id);
    }
    // A semaphore through its attribute, a multi-lock through its handle.
    for tenant in 0..2 {
        exported(&client, tenant).await.unwrap();
    }
    client
        .multi_lock(["m:1", "m:2"])
        .label("m:{n}")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Busy, timeout, and a handle without a label.
    let held = client
        .lock("plain:1")
        .label("plain:{n}")
        .acquire()
        .await
        .unwrap();
    assert!(other
        .lock("plain:1")
        .label("plain:{n}")
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let waited = other
        .lock("plain:1")
        .label("plain:{n}")
        .wait(Duration::from_millis(100))
        .acquire()
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    held.release().await.unwrap();
    // A local handoff: a second task queued behind the holder (within a window long enough
    // for a debug build).
    let patient = LockClient::builder(server.url())
        .local_handoff_window(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let lock = patient.lock("plain:1").label("plain:{n}");
    let first = lock.acquire().await.unwrap();
    let next = common::queued(&lock).await;
    first.release().await.unwrap();
    next.await.unwrap().release().await.unwrap();
    // A lost hold: renewed (every 200 ms) until its key is deleted.
    let doomed = client
        .lock("plain:2")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _: i64 = dlock::redis::cmd("DEL")
        .arg(client.lock("plain:2").key())
        .query_async(&mut admin)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), doomed.lost())
        .await
        .expect("the hold was not found lost");

    let text = prometheus.render();
    println!("{text}");
    let acquired = [
        r#"lock="metrics:{id}""#,
        r#"kind="plain""#,
        r#"outcome="acquired""#,
    ];
    assert_eq!(value(&text, "dlock_acquires_total", &acquired), 3.0);
    assert!(
        samples(&text, "dlock_acquires_total", &["metrics:0"]).is_empty(),
        "a rendered key became a label"
    );
    let export = [
        r#"lock="export:{tenant}""#,
        r#"kind="semaphore""#,
        r#"outcome="acquired""#,
    ];
    assert_eq!(value(&text, "dlock_acquires_total", &export), 2.0);
    let multi = [r#"lock="m:{n}""#, r#"outcome="acquired""#];
    assert_eq!(
        value(&text, "dlock_acquires_total", &multi),
        2.0,
        "one per lock of the multi-lock"
    );
    let plain = r#"lock="plain:{n}""#;
    assert_eq!(
        value(&text, "dlock_acquires_total", &[plain, r#"outcome="busy""#]),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "dlock_acquires_total",
            &[plain, r#"outcome="timeout""#]
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "dlock_acquires_total",
            &[plain, r#"outcome="acquired""#]
        ),
        3.0
    );
    assert_eq!(
        value(
            &text,
            "dlock_acquires_total",
            &[r#"lock="other""#, r#"outcome="acquired""#]
        ),
        1.0
    );
    assert_eq!(value(&text, "dlock_local_handoffs_total", &[plain]), 1.0);
    assert_eq!(value(&text, "dlock_lost_total", &[r#"lock="other""#]), 1.0);
    assert_eq!(
        value(
            &text,
            "dlock_hold_seconds_count",
            &[r#"lock="metrics:{id}""#]
        ),
        3.0
    );
    assert!(
        value(
            &text,
            "dlock_acquire_wait_seconds_count",
            &[plain, r#"outcome="timeout""#]
        ) == 1.0
    );
    assert!(
        value(&text, "dlock_renew_calls_total", &[]) >= 2.0,
        "renewals of plain:2"
    );
    assert!(
        value(&text, "dlock_renew_tick_seconds_count", &[]) >= 1.0,
        "the watchdog ticks that sent those renewals"
    );

    let log = logs.text();
    assert!(
        log.lines().any(
            |l| l.contains("dlock.acquire{lock=metrics:1 kind=\"plain\"")
                && l.contains("outcome=\"acquired\"")
                && l.contains("token=")
                && l.contains("close")
        ),
        "no closed dlock.acquire span with its outcome and token:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("dlock.acquire{lock=plain:1") && l.contains("outcome=\"timeout\"")),
        "{log}"
    );
    assert!(
        log.lines().any(
            |l| l.contains("dlock.hold{lock=metrics:2 kind=\"plain\" token=")
                && l.contains("close")
        ),
        "no closed dlock.hold span:\n{log}"
    );
    // The acquire span closes when the acquire ends, not when the hold does.
    let line_of = |needle: &str| {
        log.lines()
            .position(|l| l.contains(needle) && l.contains("close"))
            .unwrap_or_else(|| panic!("no closed span {needle}:\n{log}"))
    };
    assert!(
        line_of("dlock.acquire{lock=metrics:2") < line_of("dlock.hold{lock=metrics:2"),
        "dlock.acquire stayed open until the hold ended:\n{log}"
    );
}
