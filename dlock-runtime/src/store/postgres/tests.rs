//! The PostgreSQL store against real servers: one shared throw-away server (each test in a
//! schema of its own), and servers of their own for the tests that kill one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::runtime::Handle;
use tokio_postgres::{AsyncMessage, Config, NoTls};

use super::channel::pg_channel;
use super::store::PgStore;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::kinds::{
    Claim, Fair, LockKind, Plain, Read, RedissonLock, Semaphore, Write,
};
use crate::testing::postgres::PgServer;

const LEASE: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(5);

/// One server for every test that leaves it running.
/// Whether PostgreSQL's server binaries are here; prints `skipped: <test>: ...` when not (CI
/// installs them, so nothing is skipped there).
fn available(test: &str) -> bool {
    let here = crate::testing::postgres::postgres_available();
    if !here {
        println!("skipped: store::postgres::{test}: no PostgreSQL server binaries (PG_BIN_DIR, pg_config --bindir, /usr/lib/postgresql/*/bin)");
    }
    here
}

fn shared() -> &'static PgServer {
    static SERVER: OnceLock<PgServer> = OnceLock::new();
    SERVER.get_or_init(|| PgServer::start().expect("start PostgreSQL"))
}

/// A schema name no other test (or earlier run) uses.
fn fresh_schema(test: &str) -> String {
    format!("t_{test}_{:08x}", rand::random::<u32>())
}

async fn store_at(url: &str, schema: &str) -> Arc<PgStore> {
    let config: Config = url.parse().expect("url");
    PgStore::connect(config, schema, 2, TIMEOUT, TIMEOUT, &Handle::current())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

async fn store(test: &str) -> Arc<PgStore> {
    store_at(&shared().url(), &fresh_schema(test)).await
}

fn claim(kind: &dyn LockKind, name: &str, owner: &str, lease: Duration) -> Claim {
    Claim {
        name: name.to_owned(),
        keys: kind.keys("dlock:", name),
        owner: owner.to_owned(),
        client_id: "c".to_owned(),
        lease,
        hard: false,
        sync: None,
    }
}

/// A plain connection that LISTENs on `channel`; notifications arrive on the receiver.
async fn listen(url: &str, channel: &str) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (client, mut connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        // Ends with the connection (the client is dropped with the task's other half).
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send(format!("{}:{}", n.channel(), n.payload()));
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {channel}"))
        .await
        .unwrap();
    // Keep the client alive as long as the connection task runs.
    tokio::spawn(async move {
        let _keep = client;
        std::future::pending::<()>().await;
    });
    rx
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_acquire_reenter_undo_release() {
    if !available("plain_acquire_reenter_undo_release") {
        return;
    }
    let store = store("plain").await;
    let a = claim(&Plain, "order:1", "a:1", LEASE);
    let b = claim(&Plain, "order:1", "b:1", LEASE);
    let link = store.link_for(&a.keys.key);

    let (count, token) = link.acquire(&Plain, &a, None, LEASE).await.unwrap();
    assert_eq!(count, 1);
    assert!(token > 0);
    let (zero, pttl) = link.acquire(&Plain, &b, None, LEASE).await.unwrap();
    assert_eq!(zero, 0);
    assert!(pttl > 0 && pttl <= LEASE.as_millis() as i64, "{pttl}");
    // The same request re-sent: the same answer, nothing changed.
    assert_eq!(
        link.acquire(&Plain, &a, None, LEASE).await.unwrap(),
        (1, token)
    );

    let marker = format!("{}m1", a.keys.latch_prefix);
    assert_eq!(
        link.acquire(&Plain, &a, Some(&marker), LEASE)
            .await
            .unwrap(),
        (2, 0)
    );
    assert_eq!(link.undo_reentry(&Plain, &a, &marker).await.unwrap(), 1);
    assert_eq!(link.undo_reentry(&Plain, &a, &marker).await.unwrap(), 0);

    // One hold left: the first release frees it, its retry answers the bare count again.
    let latch = format!("{}l1", a.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &a, &latch, LEASE).await.unwrap(),
        (0, Some(-2))
    );
    assert_eq!(
        link.release(&Plain, &a, &latch, LEASE).await.unwrap(),
        (0, None)
    );
    assert!(!link.exists(&Plain, &a.keys.key).await.unwrap());
    assert_eq!(link.pttl(&Plain, &a.keys.key).await.unwrap(), -2);
    // Not the owner (any more): -1, and the lock stays free.
    let latch2 = format!("{}l2", a.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &a, &latch2, LEASE).await.unwrap(),
        (-1, None)
    );
    // A partial release keeps the lock and reports what is left.
    link.acquire(&Plain, &b, None, LEASE).await.unwrap();
    let mb = format!("{}mb", b.keys.latch_prefix);
    link.acquire(&Plain, &b, Some(&mb), LEASE).await.unwrap();
    let lb = format!("{}lb", b.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &b, &lb, LEASE).await.unwrap(),
        (1, None)
    );
    assert!(link.exists(&Plain, &b.keys.key).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_that_frees_notifies_the_channel() {
    if !available("a_release_that_frees_notifies_the_channel") {
        return;
    }
    let store = store("notify").await;
    let a = claim(&Plain, "job", "a:1", LEASE);
    let channel = pg_channel(&a.keys.channel);
    let mut heard = listen(&shared().url(), &channel).await;
    let link = store.link_for(&a.keys.key);

    link.acquire(&Plain, &a, None, LEASE).await.unwrap();
    let latch = format!("{}l", a.keys.latch_prefix);
    link.release(&Plain, &a, &latch, LEASE).await.unwrap();
    let message = tokio::time::timeout(TIMEOUT, heard.recv())
        .await
        .expect("a notification within the timeout")
        .unwrap();
    assert_eq!(message, format!("{channel}:released"));

    // force_unlock notifies too, and says whether anything was held. A new owner: one whose
    // hold was released is refused (a late request of an owner that is done).
    let a2 = claim(&Plain, "job", "a:2", LEASE);
    link.acquire(&Plain, &a2, None, LEASE).await.unwrap();
    assert_eq!(link.force_unlock(&Plain, &a.keys).await.unwrap(), 1);
    let message = tokio::time::timeout(TIMEOUT, heard.recv())
        .await
        .expect("a notification within the timeout")
        .unwrap();
    assert_eq!(message, format!("{channel}:released"));
    assert_eq!(link.force_unlock(&Plain, &a.keys).await.unwrap(), 0);
    assert!(!link.exists(&Plain, &a.keys.key).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn renew_reports_each_claim() {
    if !available("renew_reports_each_claim") {
        return;
    }
    let store = store("renew").await;
    let claims: Vec<Claim> = ["r1", "r2", "r3"]
        .iter()
        .map(|n| claim(&Plain, n, &format!("{n}:owner"), LEASE))
        .collect();
    for c in &claims {
        let link = store.link_for(&c.keys.key);
        assert_eq!(link.acquire(&Plain, c, None, LEASE).await.unwrap().0, 1);
    }
    // The second is taken from its owner: forced open, then held by someone else.
    let link = store.any_link();
    link.force_unlock(&Plain, &claims[1].keys).await.unwrap();
    let thief = claim(&Plain, "r2", "thief", LEASE);
    assert_eq!(
        link.acquire(&Plain, &thief, None, LEASE).await.unwrap().0,
        1
    );

    let refs: Vec<&Claim> = claims.iter().collect();
    assert_eq!(link.renew(&Plain, &refs).await.unwrap(), vec![1, 0, 1]);
    assert_eq!(link.renew(&Plain, &[]).await.unwrap(), Vec::<i64>::new());
}

/// One renew call over both tables (a plain hold's row in `plain_locks`, a semaphore's in
/// `holds`), with a hold named twice and one that is not held: each answered in its place, and
/// every live lease moved out to the lease asked for.
#[tokio::test(flavor = "multi_thread")]
async fn one_renewal_answers_every_hold_in_order_whatever_its_table() {
    if !available("one_renewal_answers_every_hold_in_order_whatever_its_table") {
        return;
    }
    let store = store("renew_mixed").await;
    let short = Duration::from_secs(2);
    let long = Duration::from_secs(60);
    let kind = Semaphore { permits: 2 };
    let plain = claim(&Plain, "mixed:p", "p:owner", short);
    let permit = claim(&kind, "mixed:s", "s:owner", short);
    let link = store.any_link();
    assert_eq!(
        link.acquire(&Plain, &plain, None, short).await.unwrap().0,
        1
    );
    assert_eq!(
        link.acquire(&kind, &permit, None, short).await.unwrap().0,
        1
    );
    let nobody = claim(&Plain, "mixed:free", "n:owner", long);
    let (plain_long, permit_long) = (
        Claim {
            lease: long,
            ..plain.clone()
        },
        Claim {
            lease: long,
            ..permit.clone()
        },
    );
    let asked = [&plain_long, &nobody, &plain_long, &permit_long];
    assert_eq!(link.renew(&Plain, &asked).await.unwrap(), vec![1, 0, 1, 1]);
    for (k, key) in [
        (&Plain as &dyn LockKind, &plain.keys.key),
        (&kind, &permit.keys.key),
    ] {
        let pttl = link.pttl(k, key).await.unwrap();
        assert!(
            pttl > short.as_millis() as i64 && pttl <= long.as_millis() as i64,
            "{key}: pttl {pttl} ms after a renewal to {long:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_lease_lets_another_owner_in() {
    if !available("an_expired_lease_lets_another_owner_in") {
        return;
    }
    let store = store("expiry").await;
    let lease = Duration::from_millis(200);
    let a = claim(&Plain, "short", "a:1", lease);
    let b = claim(&Plain, "short", "b:1", LEASE);
    let link = store.link_for(&a.keys.key);
    let (_, first) = link.acquire(&Plain, &a, None, LEASE).await.unwrap();
    // Waits as a waiter would: for the PTTL the refusal names, at most 20 times.
    let mut got = None;
    for _ in 0..20 {
        let (count, x) = link.acquire(&Plain, &b, None, LEASE).await.unwrap();
        if count == 1 {
            got = Some(x);
            break;
        }
        assert!(x <= 200, "pttl {x} beyond the lease");
        tokio::time::sleep(Duration::from_millis(x as u64 + 1)).await;
    }
    let second = got.expect("b acquires once a's lease ended");
    assert!(second > first);
    // a's renewal and release find nothing of theirs.
    assert_eq!(link.renew(&Plain, &[&a]).await.unwrap(), vec![0]);
    let latch = format!("{}la", a.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &a, &latch, LEASE).await.unwrap(),
        (-1, None)
    );
}

/// 100 free -> held transitions, then the counter row deleted, then the server killed and
/// started again: every token is larger than the one before.
#[tokio::test(flavor = "multi_thread")]
async fn tokens_never_go_back() {
    if !available("tokens_never_go_back") {
        return;
    }
    let mut server = tokio::task::spawn_blocking(PgServer::start)
        .await
        .unwrap()
        .expect("start PostgreSQL");
    let schema = fresh_schema("tokens");
    let store = store_at(&server.url(), &schema).await;
    let mut last = 0;
    let cycle = |store: Arc<PgStore>, i: usize| async move {
        let c = claim(&Plain, "fenced", &format!("o:{i}"), LEASE);
        let link = store.link_for(&c.keys.key);
        let (count, token) = link.acquire(&Plain, &c, None, LEASE).await?;
        assert_eq!(count, 1);
        let latch = format!("{}l{i}", c.keys.latch_prefix);
        link.release(&Plain, &c, &latch, LEASE).await?;
        Ok::<i64, super::errors::PgError>(token)
    };
    for i in 0..100 {
        let token = cycle(store.clone(), i).await.unwrap();
        assert!(token > last, "cycle {i}: {token} after {last}");
        last = token;
    }

    // The plain lock keeps its counter in its row (fences for version 4's).
    server
        .psql(&format!(
            "DELETE FROM \"{schema}\".fences; DELETE FROM \"{schema}\".plain_locks"
        ))
        .unwrap();
    let token = cycle(store.clone(), 100).await.unwrap();
    assert!(
        token > last,
        "after the row was deleted: {token} after {last}"
    );
    last = token;
    // A release commits without waiting for its WAL flush (plain.sql): one lost in the kill
    // would keep the lock held until its lease, which this test is not about. CHECKPOINT
    // flushes it first.
    server.psql("CHECKPOINT").unwrap();

    let server = tokio::task::spawn_blocking(move || {
        server.kill();
        server.start_again().map(|()| server)
    })
    .await
    .unwrap()
    .expect("restart");
    // The first call may find its connection broken (a link error); the next reconnects.
    let mut token = None;
    for i in 0..5 {
        match cycle(store.clone(), 101 + i).await {
            Ok(t) => {
                token = Some(t);
                break;
            }
            Err(e) => assert!(e.is_link_error() || e.is_not_now(), "{e}"),
        }
    }
    let token = token.expect("a cycle succeeds after the restart");
    assert!(token > last, "after the restart: {token} after {last}");
    drop(server);
}

/// A store of `connections` connections named for this test alone (`application_name`), so
/// [`terminate`] ends only its sessions on the shared server; with its application name.
async fn named_store(test: &str, connections: usize) -> (Arc<PgStore>, String) {
    let app = format!("dlock_{test}_{:08x}", rand::random::<u32>());
    let mut config: Config = shared().url().parse().unwrap();
    config.application_name(&app);
    let store = PgStore::connect(
        config,
        &fresh_schema(test),
        connections,
        TIMEOUT,
        TIMEOUT,
        &Handle::current(),
    )
    .await
    .unwrap();
    (store, app)
}

/// Ends every session of `app` on the shared server (pg_terminate_backend); how many it ended.
fn terminate(app: &str) -> String {
    shared()
        .psql(&format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = '{app}'"
        ))
        .unwrap()
}

/// `op` until it succeeds, at most 3 times: a connection the server ended fails the first call
/// sent on it as a link error, and the next call opens a new one.
async fn after_one_link_error<T>(
    mut op: impl AsyncFnMut() -> Result<T, super::errors::PgError>,
) -> T {
    let mut failures = 0;
    for _ in 0..3 {
        match op().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(e.is_link_error(), "{e}");
                failures += 1;
                assert!(failures <= 1, "{failures} failures");
            }
        }
    }
    unreachable!("the second failure panicked")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminated_connection_is_a_link_error_then_reopened() {
    if !available("a_terminated_connection_is_a_link_error_then_reopened") {
        return;
    }
    let (store, app) = named_store("terminate", 2).await;
    let link = store.any_link();
    link.server_micros().await.unwrap();
    assert_eq!(terminate(&app), "2");
    after_one_link_error(async || link.server_micros().await).await;
    assert!(link.server_micros().await.unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_is_idempotent_and_safe_concurrently() {
    if !available("migrate_is_idempotent_and_safe_concurrently") {
        return;
    }
    let url = shared().url();
    let schema = fresh_schema("migrate");
    // Four first uses at once: each connect sees no schema and migrates.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move { store_at(&url, &schema).await })
        })
        .collect();
    let mut stores = Vec::new();
    for t in tasks {
        stores.push(t.await.unwrap());
    }
    stores[0].migrate().await.unwrap();
    stores[0].migrate().await.unwrap();
    let a = claim(&Plain, "m", "a", LEASE);
    let (count, _) = stores[3]
        .link_for(&a.keys.key)
        .acquire(&Plain, &a, None, LEASE)
        .await
        .unwrap();
    assert_eq!(count, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn schema_names_are_checked_and_quoted() {
    if !available("schema_names_are_checked_and_quoted") {
        return;
    }
    let url = shared().url();
    for bad in ["", &"x".repeat(64)] {
        let config: Config = url.parse().unwrap();
        let e = PgStore::connect(config, bad, 1, TIMEOUT, TIMEOUT, &Handle::current())
            .await
            .err()
            .expect("refused");
        assert!(e.to_string().contains("1 to 63 bytes"), "{e}");
    }
    // Quotes, spaces, capitals and dollar quotes are a name like any other.
    let weird = format!("We\"ird $dlock0$ {:04x}", rand::random::<u16>());
    let store = store_at(&url, &weird).await;
    let a = claim(&Plain, "w", "a", LEASE);
    let link = store.link_for(&a.keys.key);
    assert_eq!(link.acquire(&Plain, &a, None, LEASE).await.unwrap().0, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_role_without_create_is_told_what_to_run() {
    if !available("a_role_without_create_is_told_what_to_run") {
        return;
    }
    let server = shared();
    let role = format!("weak_{:08x}", rand::random::<u32>());
    server.psql(&format!("CREATE ROLE {role} LOGIN")).unwrap();
    let url = format!("postgres://{role}@127.0.0.1:{}/postgres", server.port());
    let schema = fresh_schema("weak");
    let config: Config = url.parse().unwrap();
    let e = PgStore::connect(
        config.clone(),
        &schema,
        1,
        TIMEOUT,
        TIMEOUT,
        &Handle::current(),
    )
    .await
    .err()
    .expect("a role without CREATE is refused");
    let statement = format!("CREATE SCHEMA \"{schema}\" AUTHORIZATION \"{role}\";");
    assert!(e.to_string().contains(&statement), "{e}");
    assert!(e.to_string().contains("42501"), "{e}");
    assert_eq!(e.sqlstate(), Some("42501"));
    assert!(!e.is_link_error() && !e.is_not_now());

    // An existing schema it may only use: told to migrate as the owner, or what to grant.
    let owned = fresh_schema("owned");
    server
        .psql(&format!(
            "CREATE SCHEMA \"{owned}\"; GRANT USAGE ON SCHEMA \"{owned}\" TO {role}"
        ))
        .unwrap();
    let e = PgStore::connect(
        config.clone(),
        &owned,
        1,
        TIMEOUT,
        TIMEOUT,
        &Handle::current(),
    )
    .await
    .err()
    .expect("no CREATE on the schema");
    assert!(
        e.to_string()
            .contains("migrate() once as the schema's owner"),
        "{e}"
    );

    // Running the statement it named is enough.
    server.psql(&statement).unwrap();
    let store = PgStore::connect(config, &schema, 1, TIMEOUT, TIMEOUT, &Handle::current())
        .await
        .unwrap();
    let a = claim(&Plain, "weak", "a", LEASE);
    assert_eq!(
        store
            .link_for(&a.keys.key)
            .acquire(&Plain, &a, None, LEASE)
            .await
            .unwrap()
            .0,
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kind_the_store_lacks_is_named() {
    if !available("a_kind_the_store_lacks_is_named") {
        return;
    }
    let store = store("redisson").await;
    let kind = RedissonLock {
        sharded: false,
        fenced: false,
    };
    let a = claim(&kind, "r", "a", LEASE);
    let e = store
        .link_for(&a.keys.key)
        .acquire(&kind, &a, None, LEASE)
        .await
        .expect_err("no Redisson lock");
    assert!(
        e.to_string()
            .contains("the PostgreSQL store does not offer the redisson lock kind"),
        "{e}"
    );
}

/// The fair lock's SQL: a refused owner queues, a release grants the queue's head directly and
/// tells it on its own channel (`<owner> <token>`), the head's next attempt finds itself
/// holding with that token, and the next release grants the next in line.
#[tokio::test(flavor = "multi_thread")]
async fn a_fair_release_grants_the_head_and_tells_it() {
    if !available("a_fair_release_grants_the_head_and_tells_it") {
        return;
    }
    let store = store("fair").await;
    let [a, b, c] = ["a", "b", "c"].map(|o| claim(&Fair, "f", o, LEASE));
    let link = store.link_for(&a.keys.key);
    let (held, token_a) = link.acquire(&Fair, &a, None, LEASE).await.unwrap();
    assert_eq!(held, 1);
    // A re-entry leaves a marker, so its undo runs once.
    let marker = format!("{}m", a.keys.latch_prefix);
    assert_eq!(
        link.acquire(&Fair, &a, Some(&marker), LEASE).await.unwrap(),
        (2, 0)
    );
    assert_eq!(link.undo_reentry(&Fair, &a, &marker).await.unwrap(), 1);
    assert_eq!(link.undo_reentry(&Fair, &a, &marker).await.unwrap(), 0);
    let b_channel = pg_channel(&Fair.wait_channel(&b));
    let mut b_told = listen(&shared().url(), &b_channel).await;
    // Refused and queued, told to come back within a third of the keep-alive (2 s).
    assert_eq!(
        link.acquire(&Fair, &b, None, LEASE).await.unwrap(),
        (0, 666)
    );
    assert_eq!(link.acquire(&Fair, &c, None, LEASE).await.unwrap().0, 0);
    // b keeps its place: still ahead of c.
    assert_eq!(link.acquire(&Fair, &b, None, LEASE).await.unwrap().0, 0);

    let latch = format!("{}la", a.keys.latch_prefix);
    assert_eq!(
        link.release(&Fair, &a, &latch, LEASE).await.unwrap(),
        (0, None)
    );
    // Retried: answered from its latch, nothing released twice.
    assert_eq!(
        link.release(&Fair, &a, &latch, LEASE).await.unwrap(),
        (0, None)
    );
    let told = tokio::time::timeout(TIMEOUT, b_told.recv())
        .await
        .expect("b told within the timeout")
        .unwrap();
    let token_b: u64 = told
        .strip_prefix(&format!("{b_channel}:b "))
        .unwrap_or_else(|| panic!("a grant to b: {told}"))
        .parse()
        .unwrap();
    assert!(token_b > token_a as u64);
    assert_eq!(
        Fair.granted(&b, &told[b_channel.len() + 1..]),
        Some(token_b)
    );
    // b holds without asking; its next attempt says so with the same token.
    assert_eq!(
        link.acquire(&Fair, &b, None, LEASE).await.unwrap(),
        (1, token_b as i64)
    );
    assert_eq!(link.renew(&Fair, &[&b]).await.unwrap(), vec![1]);
    // A late request of a, done, is neither granted nor queued.
    let latch = format!("{}lb", b.keys.latch_prefix);
    assert_eq!(
        link.release(&Fair, &b, &latch, LEASE).await.unwrap(),
        (0, None)
    );
    assert_eq!(link.acquire(&Fair, &a, None, LEASE).await.unwrap().0, 0);
    // b's release granted c, the only one left in line (a was not queued again).
    assert_eq!(link.acquire(&Fair, &c, None, LEASE).await.unwrap().0, 1);
    let latch = format!("{}lc", c.keys.latch_prefix);
    assert_eq!(
        link.release(&Fair, &c, &latch, LEASE).await.unwrap(),
        (0, None)
    );
    assert!(!link.exists(&Fair, &c.keys.key).await.unwrap());
}

/// Queue places abandoned for more than a minute (their waiter died, and nobody touched the
/// lock again) are deleted by other ops' sweeps; fresher ones are left to their own key.
#[tokio::test(flavor = "multi_thread")]
async fn abandoned_fair_queue_places_are_swept() {
    if !available("abandoned_fair_queue_places_are_swept") {
        return;
    }
    let url = shared().url();
    let schema = fresh_schema("fair_sweep");
    drop(store_at(&url, &schema).await);
    let q = super::schema::quote_ident(&schema);
    let (client, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "INSERT INTO {q}.fair_queue (key, owner, arrived, keep_until, channel) VALUES \
             ('old', 'dead', 1, clock_timestamp() - interval '2 minutes', 'c'), \
             ('new', 'late', 1, clock_timestamp() - interval '1 second', 'c')"
        ))
        .await
        .unwrap();
    // One call in eight sweeps: 400 calls miss it with probability (7/8)^400, about 1e-23.
    let sweep = format!("SELECT {q}.fair_sweep(clock_timestamp())");
    let left = format!("SELECT string_agg(owner, ',' ORDER BY owner) FROM {q}.fair_queue");
    let mut calls = 0;
    loop {
        client.execute(&sweep, &[]).await.unwrap();
        calls += 1;
        let row = client.query_one(&left, &[]).await.unwrap();
        if row.get::<_, Option<String>>(0).as_deref() == Some("late") {
            break;
        }
        assert!(calls < 400, "not swept after {calls} calls");
    }
}

/// A schema a version-2 dlock created (before the fair lock's queue) is brought up to this
/// version at connect, and the fair lock works in it.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_2_schema_is_migrated_for_the_fair_lock() {
    if !available("a_version_2_schema_is_migrated_for_the_fair_lock") {
        return;
    }
    let url = shared().url();
    let schema = fresh_schema("v2");
    drop(store_at(&url, &schema).await);
    // What version 2 had: none of fair.sql's objects, and its version number.
    let q = super::schema::quote_ident(&schema);
    let (client, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "DROP FUNCTION {q}.fair_acquire, {q}.fair_release, {q}.fair_undo_reentry, \
             {q}.fair_grant_next, {q}.fair_sweep, {q}.fair_token; \
             DROP TABLE {q}.fair_queue; UPDATE {q}.meta SET version = 2;"
        ))
        .await
        .unwrap();
    let store = store_at(&url, &schema).await;
    let version: i32 = client
        .query_one(&format!("SELECT max(version) FROM {q}.meta"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, super::schema::VERSION);
    let [a, b] = ["a", "b"].map(|o| claim(&Fair, "f", o, LEASE));
    let link = store.link_for(&a.keys.key);
    assert_eq!(link.acquire(&Fair, &a, None, LEASE).await.unwrap().0, 1);
    assert_eq!(link.acquire(&Fair, &b, None, LEASE).await.unwrap().0, 0);
    let queued: i64 = client
        .query_one(&format!("SELECT count(*) FROM {q}.fair_queue"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(queued, 1);
}

/// 2N tasks contend for N permits, each taking and giving back a permit a few times: never
/// more than N inside at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_semaphore_never_lets_more_than_its_permits_in() {
    if !available("a_semaphore_never_lets_more_than_its_permits_in") {
        return;
    }
    const PERMITS: u32 = 3;
    let store = store("semaphore").await;
    let kind = Arc::new(Semaphore { permits: PERMITS });
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..2 * PERMITS)
        .map(|t| {
            let (store, kind, inside, most) =
                (store.clone(), kind.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                let mut taken = 0;
                for round in 0..200 {
                    if taken == 3 {
                        break;
                    }
                    let c = claim(&*kind, "pool", &format!("t{t}:{round}"), LEASE);
                    let link = store.link_for(&c.keys.key);
                    let (granted, _) = link.acquire(&*kind, &c, None, LEASE).await.unwrap();
                    if granted == 0 {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let latch = format!("{}{t}:{round}", c.keys.latch_prefix);
                    let (left, _) = link.release(&*kind, &c, &latch, LEASE).await.unwrap();
                    assert_eq!(left, 0);
                    taken += 1;
                }
                taken
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 3, "every task got its permits in time");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS as usize && most > 0,
        "{most} inside at once"
    );

    // Another permit count while holders exist is refused, naming the stored count.
    let c = claim(&*kind, "pool", "holder", LEASE);
    let link = store.link_for(&c.keys.key);
    assert_eq!(link.acquire(&*kind, &c, None, LEASE).await.unwrap(), (1, 0));
    assert_eq!(link.available(PERMITS, &c.keys.key).await.unwrap(), 2);
    let other = Semaphore { permits: 5 };
    let d = claim(&other, "pool", "other", LEASE);
    let e = link
        .acquire(&other, &d, None, LEASE)
        .await
        .expect_err("another permit count");
    assert_eq!(e.stored_permits(), Some(PERMITS), "{e}");
    assert_eq!(link.renew(&*kind, &[&c]).await.unwrap(), vec![1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn read_write_sides() {
    if !available("read_write_sides") {
        return;
    }
    let store = store("rw").await;
    let r1 = claim(&Read, "doc", "r1", LEASE);
    let r2 = claim(&Read, "doc", "r2", LEASE);
    let r3 = claim(&Read, "doc", "r3", LEASE);
    let w = claim(&Write, "doc", "w", LEASE);
    let link = store.link_for(&r1.keys.key);

    let (c1, t1) = link.acquire(&Read, &r1, None, LEASE).await.unwrap();
    let (c2, t2) = link.acquire(&Read, &r2, None, LEASE).await.unwrap();
    assert_eq!((c1, c2), (1, 1));
    assert!(t2 > t1, "a joining reader gets a token of its own");
    // A writer is refused and waits at most half its claim; new readers queue behind it.
    let (zero, wait) = link.acquire(&Write, &w, None, LEASE).await.unwrap();
    assert_eq!(zero, 0);
    assert!(wait > 0 && wait <= 1000, "{wait}");
    assert_eq!(link.acquire(&Read, &r3, None, LEASE).await.unwrap().0, 0);
    for (i, r) in [&r1, &r2].into_iter().enumerate() {
        let latch = format!("{}rl{i}", r.keys.latch_prefix);
        assert_eq!(
            link.release(&Read, r, &latch, LEASE).await.unwrap(),
            (0, None)
        );
    }
    let (one, tw) = link.acquire(&Write, &w, None, LEASE).await.unwrap();
    assert_eq!(one, 1);
    assert!(tw > t2);
    assert_eq!(link.renew(&Write, &[&w]).await.unwrap(), vec![1]);
    assert_eq!(link.renew(&Read, &[&r1]).await.unwrap(), vec![0]);
    // The writer reads as itself (a downgrade), under its own token, then leaves: the lock
    // turns read and another reader may join.
    let wr = claim(&Read, "doc", "w", LEASE);
    let marker = format!("{}wr", wr.keys.latch_prefix);
    assert_eq!(
        link.acquire(&Read, &wr, Some(&marker), LEASE)
            .await
            .unwrap(),
        (1, tw)
    );
    let wl = format!("{}wl", w.keys.latch_prefix);
    assert_eq!(
        link.release(&Write, &w, &wl, LEASE).await.unwrap(),
        (0, None)
    );
    assert_eq!(link.acquire(&Read, &r3, None, LEASE).await.unwrap().0, 1);
    // The writer's read, undone by its marker once.
    assert_eq!(link.undo_reentry(&Read, &wr, &marker).await.unwrap(), 0);
    assert_eq!(link.undo_reentry(&Read, &wr, &marker).await.unwrap(), -1);
    assert_eq!(link.force_unlock(&Read, &r3.keys).await.unwrap(), 1);
    assert!(!link.exists(&Write, &w.keys.key).await.unwrap());
}

#[test]
fn keys_of_a_kind_differ_from_the_plain_lock() {
    let plain: LockKeys = Plain.keys("dlock:", "x");
    assert_ne!(plain.key, Read.keys("dlock:", "x").key);
    assert_ne!(plain.key, Semaphore { permits: 1 }.keys("dlock:", "x").key);
}

/// Issue 36: the sweep deletes a semaphore's permit count only under the key's advisory lock.
/// An op on the key under way (here a permit being granted, its transaction held open) while a
/// sweep whose clock is more than a minute past the op's (what a sweep sees of an op that
/// stalled that long) finds the key's other holder expired: the sweep must not delete the
/// count the op is writing, or the permit granted would be there without its count, and an
/// acquire with another count would be let in.
#[tokio::test(flavor = "multi_thread")]
async fn the_sweep_leaves_a_semaphore_count_to_an_op_under_way() {
    if !available("the_sweep_leaves_a_semaphore_count_to_an_op_under_way") {
        return;
    }
    let url = shared().url();
    let schema = fresh_schema("sweep_race");
    let store = store_at(&url, &schema).await;
    let q = super::schema::quote_ident(&schema);
    let two = Semaphore { permits: 2 };
    let d = claim(&two, "pool", "d", Duration::from_secs(30));
    let key = d.keys.key.clone();
    let link = store.link_for(&key);
    assert_eq!(link.acquire(&two, &d, None, LEASE).await.unwrap(), (1, 0));

    let connect = || async {
        let (client, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    };
    let (op, sweeper, watch) = (connect().await, connect().await, connect().await);
    // The op: a second permit of two, granted and not committed yet.
    op.batch_execute("BEGIN").await.unwrap();
    let row = op
        .query_one(
            &format!("SELECT held FROM {q}.sem_acquire($1, 30000, 'a', 2)"),
            &[&key],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1, "the second permit");
    // A latch long expired: gone once a sweep has run (one call in eight sweeps). Made after
    // the op's call, which sweeps too one time in eight: a canary it had deleted inside its
    // open transaction would stay locked and visible, and every sweep below skip it.
    watch
        .execute(
            &format!(
                "INSERT INTO {q}.latches (id, result, expires_at) \
                 VALUES ('canary', 0, clock_timestamp() - interval '1 hour')"
            ),
            &[],
        )
        .await
        .unwrap();

    let sweeper_pid: i32 = sweeper
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let sweeps = tokio::spawn({
        let q = q.clone();
        async move {
            let canary = format!("SELECT count(*) FROM {q}.latches WHERE id = 'canary'");
            for _ in 0..400 {
                sweeper
                    .execute(
                        &format!("SELECT {q}.sweep(clock_timestamp() + interval '5 minutes')"),
                        &[],
                    )
                    .await
                    .unwrap();
                let left: i64 = sweeper.query_one(&canary, &[]).await.unwrap().get(0);
                if left == 0 {
                    return true;
                }
            }
            false
        }
    });
    // Until a sweep ran, or one waits for a row the op keeps (it judged the key free of
    // holders from before the op's commit).
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'";
    let mut blocked = false;
    for _ in 0..500 {
        if sweeps.is_finished() {
            break;
        }
        let n: i64 = watch
            .query_one(waiting, &[&sweeper_pid])
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    op.batch_execute("COMMIT").await.unwrap();
    let swept = tokio::time::timeout(TIMEOUT, sweeps)
        .await
        .expect("the sweeps ended after the op's commit")
        .unwrap();
    assert!(swept, "no sweep ran in 400 calls");

    let stored: Option<i32> = watch
        .query_opt(
            &format!("SELECT permits FROM {q}.permits WHERE key = $1"),
            &[&key],
        )
        .await
        .unwrap()
        .map(|r| r.get(0));
    let five = Semaphore { permits: 5 };
    let e = claim(&five, "pool", "e", LEASE);
    let other_count = link.acquire(&five, &e, None, LEASE).await;
    assert_eq!(
        stored,
        Some(2),
        "the permit count is gone while a permit is held (the sweep waited for the op: \
         {blocked}); an acquire with 5 permits answered {other_count:?}"
    );
    let refused = other_count.expect_err("another permit count beside a holder");
    assert_eq!(refused.stored_permits(), Some(2), "{refused}");
}

/// A schema created by the previous version (2: no `long_names`, no `remember_name`) migrates
/// at connect; then a long name with NUL is stored as its hash everywhere, and `long_names`
/// keeps its whole text (NUL as `%00`) under that hash, where an inspector finds it.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_name_is_stored_hashed_and_its_text_kept_after_migrating_version_2() {
    if !available("a_long_name_is_stored_hashed_and_its_text_kept_after_migrating_version_2") {
        return;
    }
    let url = shared().url();
    let schema = fresh_schema("long_names");
    let q = super::schema::quote_ident(&schema);
    drop(store_at(&url, &schema).await);
    let (raw, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    // What version 2 left: everything else is created or replaced the same way.
    raw.batch_execute(&format!(
        "DROP FUNCTION {q}.remember_name(text, text); DROP TABLE {q}.long_names; \
         UPDATE {q}.meta SET version = 2;"
    ))
    .await
    .unwrap();

    let store = store_at(&url, &schema).await;
    let version: i32 = raw
        .query_one(&format!("SELECT max(version) FROM {q}.meta"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, super::schema::VERSION);
    let name = format!("{}\0tail", "x".repeat(600));
    let a = claim(&Plain, &name, "a", LEASE);
    let link = store.link_for(&a.keys.key);
    assert_eq!(link.acquire(&Plain, &a, None, LEASE).await.unwrap().0, 1);
    let hashed = super::names::stored(&a.keys.key).into_owned();
    assert!(hashed.starts_with("sha256:"), "{hashed}");
    let held: Vec<String> = raw
        .query(
            &format!("SELECT key FROM {q}.plain_locks WHERE owner IS NOT NULL"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(held, vec![hashed.clone()]);
    let whole: String = raw
        .query_one(
            &format!("SELECT full_key FROM {q}.long_names WHERE key = $1"),
            &[&hashed],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(whole, format!("dlock:{{{}%00tail}}", "x".repeat(600)));
    // Every other op finds the same row: the watchdog's renewal, the lease, a re-entry and
    // its undo, the release, and a force-unlock.
    assert_eq!(link.renew(&Plain, &[&a]).await.unwrap(), vec![1]);
    assert!(link.pttl(&Plain, &a.keys.key).await.unwrap() > 0);
    let marker = format!("{}m", a.keys.latch_prefix);
    assert_eq!(
        link.acquire(&Plain, &a, Some(&marker), LEASE)
            .await
            .unwrap(),
        (2, 0)
    );
    assert_eq!(link.undo_reentry(&Plain, &a, &marker).await.unwrap(), 1);
    let latch = format!("{}l", a.keys.latch_prefix);
    assert_eq!(link.release(&Plain, &a, &latch, LEASE).await.unwrap().0, 0);
    assert!(!link.exists(&Plain, &a.keys.key).await.unwrap());
    assert_eq!(
        link.acquire(&Plain, &claim(&Plain, &name, "b", LEASE), None, LEASE)
            .await
            .unwrap()
            .0,
        1
    );
    assert_eq!(link.force_unlock(&Plain, &a.keys).await.unwrap(), 1);
    assert!(!link.exists(&Plain, &a.keys.key).await.unwrap());
}

/// Issue 36 at the store: an owner's done mark refuses a late top-level request of that side
/// (the late-acquire protection), and only that: a writer's next read in the same write scope,
/// sent with a marker like every writer's read, is granted after its previous read left the
/// mark, and the write row stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_done_mark_refuses_a_late_request_not_a_writers_next_read() {
    if !available("a_done_mark_refuses_a_late_request_not_a_writers_next_read") {
        return;
    }
    let store = store("rw_done").await;
    let r = claim(&Read, "doc", "r", LEASE);
    let link = store.link_for(&r.keys.key);
    assert_eq!(link.acquire(&Read, &r, None, LEASE).await.unwrap().0, 1);
    let latch = format!("{}r", r.keys.latch_prefix);
    assert_eq!(link.release(&Read, &r, &latch, LEASE).await.unwrap().0, 0);
    // The same request arriving late (after the client gave up on it): refused, lock free.
    assert_eq!(link.acquire(&Read, &r, None, LEASE).await.unwrap(), (0, 1));
    assert!(!link.exists(&Read, &r.keys.key).await.unwrap());

    let w = claim(&Write, "doc", "w", LEASE);
    let wr = claim(&Read, "doc", "w", LEASE);
    let (one, token) = link.acquire(&Write, &w, None, LEASE).await.unwrap();
    assert_eq!(one, 1);
    for round in 0..3 {
        let marker = format!("{}m{round}", wr.keys.latch_prefix);
        assert_eq!(
            link.acquire(&Read, &wr, Some(&marker), LEASE)
                .await
                .unwrap(),
            (1, token),
            "the writer's read {round}"
        );
        let latch = format!("{}l{round}", wr.keys.latch_prefix);
        assert_eq!(link.release(&Read, &wr, &latch, LEASE).await.unwrap().0, 0);
    }
    assert_eq!(link.renew(&Write, &[&w]).await.unwrap(), vec![1]);
    let wl = format!("{}wl", w.keys.latch_prefix);
    assert_eq!(link.release(&Write, &w, &wl, LEASE).await.unwrap().0, 0);
    assert!(!link.exists(&Write, &w.keys.key).await.unwrap());
}

/// A schema its owner migrated at version 2 and granted to a role table by table (`GRANT ...
/// ON ALL TABLES` covers only the tables that exist when it runs) keeps working for that role
/// once the owner migrates it to this version: the role takes a long name, and runs the sweep
/// (every op may), which deletes from `long_names` too.
#[tokio::test(flavor = "multi_thread")]
async fn a_role_granted_the_version_2_tables_keeps_working_after_the_migration() {
    if !available("a_role_granted_the_version_2_tables_keeps_working_after_the_migration") {
        return;
    }
    let url = shared().url();
    let schema = fresh_schema("grants");
    let q = super::schema::quote_ident(&schema);
    drop(store_at(&url, &schema).await);
    let (raw, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    let role = format!("r_{:08x}", rand::random::<u32>());
    raw.batch_execute(&format!(
        "DROP FUNCTION {q}.remember_name(text, text); DROP TABLE {q}.long_names; \
         UPDATE {q}.meta SET version = 2; CREATE ROLE {role} LOGIN; \
         GRANT USAGE ON SCHEMA {q} TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {q} TO {role};"
    ))
    .await
    .unwrap();
    // The owner migrates.
    drop(store_at(&url, &schema).await);

    let role_url = format!("postgres://{role}@127.0.0.1:{}/postgres", shared().port());
    let store = store_at(&role_url, &schema).await;
    let name = "y".repeat(700);
    // A lease the sweeps' clock (two minutes ahead) does not see expired.
    let a = claim(&Plain, &name, "a", Duration::from_secs(600));
    let link = store.link_for(&a.keys.key);
    let acquired = link.acquire(&Plain, &a, None, LEASE).await;
    assert_eq!(acquired.unwrap_or_else(|e| panic!("as {role}: {e}")).0, 1);
    let (as_role, connection) = role_url
        .parse::<Config>()
        .unwrap()
        .connect(NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    // One call in eight sweeps: 128 calls all but surely run it.
    let sweep = format!("SELECT {q}.sweep(clock_timestamp() + interval '2 minutes')");
    for _ in 0..128 {
        (as_role.execute(&sweep, &[]).await).unwrap_or_else(|e| panic!("sweep as {role}: {e}"));
    }
    let latch = format!("{}l", a.keys.latch_prefix);
    assert_eq!(link.release(&Plain, &a, &latch, LEASE).await.unwrap().0, 0);
}

/// Issue 39: a schema of version 4 kept a plain lock's hold as a `holds` row and its counter in
/// `fences`. Migrated in place while the lock is held, the holder keeps it (another owner is
/// refused, its renewal and a re-sent acquire find it, with its token), its release frees it,
/// and the next token is above the one version 4 handed out last (put far above the clock
/// here, so the clock term alone would go back).
#[tokio::test(flavor = "multi_thread")]
async fn a_version_4_hold_and_token_survive_the_migration() {
    if !available("a_version_4_hold_and_token_survive_the_migration") {
        return;
    }
    let url = shared().url();
    let a = claim(&Plain, "order:4", "a", LEASE);
    let (raw, schema, q) = at_version_4_held_by(&url, "v4", &a).await;
    let fence = super::names::stored(&a.keys.fence).into_owned();
    let far = 1_000_000_000_000i64; // 11.6 days of µs ahead of the clock
    let v4_token: i64 = raw
        .query_one(
            &format!(
                "INSERT INTO {q}.fences (key, last) \
                 VALUES ($1, {q}.micros(clock_timestamp()) + $2) RETURNING last"
            ),
            &[&fence, &far],
        )
        .await
        .unwrap()
        .get(0);

    let store = store_at(&url, &schema).await;
    let version: i32 = raw
        .query_one(&format!("SELECT max(version) FROM {q}.meta"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, super::schema::VERSION);
    let link = store.link_for(&a.keys.key);
    let b = claim(&Plain, "order:4", "b", LEASE);
    let (count, _) = link.acquire(&Plain, &b, None, LEASE).await.unwrap();
    assert_eq!(count, 0, "b let in beside version 4's holder");
    assert_eq!(link.renew(&Plain, &[&a]).await.unwrap(), vec![1]);
    assert_eq!(
        link.acquire(&Plain, &a, None, LEASE).await.unwrap(),
        (1, v4_token),
        "a's re-sent acquire answers its token"
    );
    let latch = format!("{}l", a.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &a, &latch, LEASE).await.unwrap(),
        (0, Some(-2))
    );
    let (count, token) = link.acquire(&Plain, &b, None, LEASE).await.unwrap();
    assert_eq!(count, 1);
    assert!(token > v4_token, "{token} after version 4's {v4_token}");
}

/// Review of issue 39: a partial release's latch outlives its hold, and other owners between.
/// a re-enters, releases the inner hold (the reply lost), its hold expires, b takes the lock and
/// releases it, a is granted the lock again by a re-entry: the retry of a's partial release is
/// answered from its latch, not applied to a's new hold (which would free the lock under it).
#[tokio::test(flavor = "multi_thread")]
async fn a_partial_release_retried_after_other_owners_is_answered_from_its_latch() {
    if !available("a_partial_release_retried_after_other_owners_is_answered_from_its_latch") {
        return;
    }
    let store = store("latched").await;
    let short = Duration::from_millis(300);
    let a = claim(&Plain, "order:latched", "a:1", short);
    let link = store.link_for(&a.keys.key);
    assert_eq!(link.acquire(&Plain, &a, None, LEASE).await.unwrap().0, 1);
    let marker = format!("{}m1", a.keys.latch_prefix);
    assert_eq!(
        link.acquire(&Plain, &a, Some(&marker), LEASE)
            .await
            .unwrap()
            .0,
        2
    );
    let retried = format!("{}r1", a.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &a, &retried, LEASE).await.unwrap(),
        (1, None)
    );
    // a's hold runs out (time is the subject: its 300 ms lease), bounded.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while link.pttl(&Plain, &a.keys.key).await.unwrap() != -2 {
        assert!(
            std::time::Instant::now() < until,
            "a's 300 ms lease never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = claim(&Plain, "order:latched", "b:1", LEASE);
    assert_eq!(link.acquire(&Plain, &b, None, LEASE).await.unwrap().0, 1);
    let b_latch = format!("{}rb", b.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &b, &b_latch, LEASE).await.unwrap(),
        (0, Some(-2))
    );
    let a_again = claim(&Plain, "order:latched", &a.owner, LEASE);
    assert_eq!(
        link.acquire(
            &Plain,
            &a_again,
            Some(&format!("{}m2", a.keys.latch_prefix)),
            LEASE
        )
        .await
        .unwrap()
        .0,
        1,
        "a granted again by a re-entry"
    );
    assert_eq!(
        link.release(&Plain, &a_again, &retried, LEASE)
            .await
            .unwrap(),
        (1, None),
        "the retry answered as its first run, not applied to a's new hold"
    );
    let c = claim(&Plain, "order:latched", "c:1", LEASE);
    assert_eq!(
        link.acquire(&Plain, &c, None, LEASE).await.unwrap().0,
        0,
        "c let in while a holds"
    );
}

/// Review of issue 39: `migrate` reads the version before its transaction, so a newer dlock
/// may migrate in between; the migration checks again under its lock and changes nothing when
/// the schema is newer than it (its functions would have replaced the newer ones).
#[tokio::test(flavor = "multi_thread")]
async fn a_migration_that_finds_a_newer_schema_under_its_lock_changes_nothing() {
    if !available("a_migration_that_finds_a_newer_schema_under_its_lock_changes_nothing") {
        return;
    }
    let url = shared().url();
    let name = fresh_schema("newer");
    drop(store_at(&url, &name).await);
    let (raw, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    let schema = super::schema::Schema::new(&name).unwrap();
    let q = schema.quoted();
    let newer = super::schema::VERSION + 1;
    // What a newer dlock left: its version, and a function of its own.
    raw.batch_execute(&format!(
        "UPDATE {q}.meta SET version = {newer}; \
         CREATE OR REPLACE FUNCTION {q}.pttl(p_key text) RETURNS bigint \
           LANGUAGE sql AS $f$ SELECT 42::bigint $f$;"
    ))
    .await
    .unwrap();
    let refused = raw
        .batch_execute(&schema.migration(false))
        .await
        .expect_err("a migration over a newer schema went through");
    let text = format!("{refused:?}");
    assert!(text.contains("newer than this dlock"), "{text}");
    let kept: i64 = raw
        .query_one(&format!("SELECT {q}.pttl('k')"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 42, "the newer schema's function was replaced");
}

/// A fresh schema put back as version 4 left it (no plain_locks, no latch requests), with
/// `holder`'s plain hold (count 1, 10 s left) in version 4's `holds`: the raw connection, the
/// schema and its quoted name. The next store opened on it migrates it.
async fn at_version_4_held_by(
    url: &str,
    name: &str,
    holder: &Claim,
) -> (tokio_postgres::Client, String, String) {
    let schema = fresh_schema(name);
    let q = super::schema::quote_ident(&schema);
    drop(store_at(url, &schema).await);
    let (raw, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    raw.batch_execute(&format!(
        "DROP FUNCTION {q}.plain_row; DROP TABLE {q}.plain_locks; \
         ALTER TABLE {q}.latches DROP COLUMN request; UPDATE {q}.meta SET version = 4;"
    ))
    .await
    .unwrap();
    let key = super::names::stored(&holder.keys.key).into_owned();
    raw.execute(
        &format!(
            "INSERT INTO {q}.holds (key, owner, count, expires_at) \
             VALUES ($1, $2, 1, clock_timestamp() + interval '10 seconds')"
        ),
        &[&key, &holder.owner],
    )
    .await
    .unwrap();
    (raw, schema, q)
}

/// Review of issue 39's layout: a version-4 hold whose partial release ran before the
/// migration (count 2 -> 1, its latch under the request id) and whose reply was lost: the retry,
/// sent after the migration, is answered from that latch, not applied again (which would free
/// the lock under its owner's outer scope and let b in).
#[tokio::test(flavor = "multi_thread")]
async fn a_version_4_partial_release_retried_after_the_migration_is_applied_once() {
    if !available("a_version_4_partial_release_retried_after_the_migration_is_applied_once") {
        return;
    }
    let url = shared().url();
    let a = claim(&Plain, "order:4l", "a", LEASE);
    let (raw, schema, q) = at_version_4_held_by(&url, "v4latch", &a).await;
    let retried = format!("{}l1", a.keys.latch_prefix);
    raw.execute(
        &format!(
            "INSERT INTO {q}.latches (id, result, expires_at) \
             VALUES ($1, 1, clock_timestamp() + interval '10 seconds')"
        ),
        &[&retried],
    )
    .await
    .unwrap();

    let store = store_at(&url, &schema).await;
    let link = store.link_for(&a.keys.key);
    assert_eq!(
        link.release(&Plain, &a, &retried, LEASE).await.unwrap(),
        (1, None),
        "the retry answered as its first run, nothing released twice"
    );
    let b = claim(&Plain, "order:4l", "b", LEASE);
    let (count, _) = link.acquire(&Plain, &b, None, LEASE).await.unwrap();
    assert_eq!(count, 0, "b let in while a's outer hold goes on");
    let last = format!("{}l2", a.keys.latch_prefix);
    assert_eq!(
        link.release(&Plain, &a, &last, LEASE).await.unwrap(),
        (0, Some(-2))
    );
}

/// Issue 39: plain locks' rows stay while free (they keep the counter), so the sweep deletes
/// those unused for a day, found by sampling the table: within a bounded number of sweeps every
/// such row is gone, while a row in use, a free one of today and a held lock's long name stay.
#[tokio::test(flavor = "multi_thread")]
async fn plain_rows_unused_for_a_day_are_swept_and_live_ones_kept() {
    if !available("plain_rows_unused_for_a_day_are_swept_and_live_ones_kept") {
        return;
    }
    let url = shared().url();
    let schema = fresh_schema("plain_sweep");
    let q = super::schema::quote_ident(&schema);
    let store = store_at(&url, &schema).await;
    let (raw, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    // Held, and a long name's lock held, and one freed today.
    let held = claim(&Plain, "kept:held", "h", LEASE);
    let long = claim(&Plain, &"y".repeat(600), "l", LEASE);
    let freed = claim(&Plain, "kept:freed", "f", LEASE);
    for c in [&held, &long, &freed] {
        let link = store.link_for(&c.keys.key);
        assert_eq!(link.acquire(&Plain, c, None, LEASE).await.unwrap().0, 1);
    }
    let latch = format!("{}l", freed.keys.latch_prefix);
    let link = store.link_for(&freed.keys.key);
    assert_eq!(
        link.release(&Plain, &freed, &latch, LEASE).await.unwrap().0,
        0
    );
    // The long name's text written two minutes ago: past the sweep's minute of grace, kept
    // only because its lock is held.
    raw.execute(
        &format!("UPDATE {q}.long_names SET written_at = clock_timestamp() - interval '2 minutes'"),
        &[],
    )
    .await
    .unwrap();
    // 3000 rows of locks last used two days ago: a few dozen pages.
    raw.execute(
        &format!(
            "INSERT INTO {q}.plain_locks (key, owner, count, expires_at, last, latched_until) \
             SELECT 'old:' || i, NULL, 0, clock_timestamp() - interval '2 days', \
               {q}.micros(clock_timestamp() - interval '2 days'), \
               clock_timestamp() - interval '2 days' \
             FROM generate_series(1, 3000) i"
        ),
        &[],
    )
    .await
    .unwrap();
    let old = format!("SELECT count(*) FROM {q}.plain_locks WHERE key LIKE 'old:%'");
    let sweep = format!("SELECT {q}.sweep(clock_timestamp())");
    let mut sweeps = 0;
    loop {
        let left: i64 = raw.query_one(&old, &[]).await.unwrap().get(0);
        if left == 0 {
            break;
        }
        // About two pages a sweep, of ~40 pages: a page missed by 2000 sweeps has odds
        // below 1e-40.
        assert!(sweeps < 2000, "{left} old rows left after {sweeps} sweeps");
        raw.execute(&sweep, &[]).await.unwrap();
        sweeps += 1;
    }
    let kept: Vec<String> = raw
        .query(
            &format!("SELECT key FROM {q}.plain_locks ORDER BY key"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut expected: Vec<String> = [&held, &long, &freed]
        .iter()
        .map(|c| super::names::stored(&c.keys.key).into_owned())
        .collect();
    expected.sort();
    assert_eq!(kept, expected);
    let names: i64 = raw
        .query_one(&format!("SELECT count(*) FROM {q}.long_names"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(names, 1, "a held lock's long name was swept");
}

/// Issue 39: a plain lock's last release leaves one row, under its owner, that both answers
/// the release's retry and refuses the owner's late acquire; a later release of that done
/// owner (another request id) finds nothing, and the first release's retry is still answered
/// as it was. A partial release is latched under its own request id, also once its hold has
/// ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_done_owners_row_answers_its_release_retry_and_refuses_its_late_acquire() {
    if !available("a_done_owners_row_answers_its_release_retry_and_refuses_its_late_acquire") {
        return;
    }
    let store = store("done_row").await;
    let a = claim(&Plain, "done", "a", LEASE);
    let link = store.link_for(&a.keys.key);
    let id = |n: &str| format!("{}{n}", a.keys.latch_prefix);
    assert_eq!(link.acquire(&Plain, &a, None, LEASE).await.unwrap().0, 1);
    assert_eq!(
        link.acquire(&Plain, &a, Some(&id("m")), LEASE)
            .await
            .unwrap(),
        (2, 0)
    );
    assert_eq!(
        link.release(&Plain, &a, &id("l1"), LEASE).await.unwrap(),
        (1, None)
    );
    assert_eq!(
        link.release(&Plain, &a, &id("l1"), LEASE).await.unwrap(),
        (1, None),
        "a partial release's retry"
    );
    assert_eq!(
        link.release(&Plain, &a, &id("l2"), LEASE).await.unwrap(),
        (0, Some(-2))
    );
    assert_eq!(
        link.release(&Plain, &a, &id("l3"), LEASE).await.unwrap(),
        (-1, None),
        "another release of the done owner"
    );
    assert_eq!(
        link.release(&Plain, &a, &id("l2"), LEASE).await.unwrap(),
        (0, None),
        "the last release's retry, after another"
    );
    assert_eq!(
        link.release(&Plain, &a, &id("l1"), LEASE).await.unwrap(),
        (1, None),
        "the partial release's retry, after the hold ended"
    );
    assert_eq!(
        link.acquire(&Plain, &a, None, LEASE).await.unwrap(),
        (0, 1),
        "a late acquire of the done owner"
    );
    assert!(!link.exists(&Plain, &a.keys.key).await.unwrap());
    let b = claim(&Plain, "done", "b", LEASE);
    assert_eq!(link.acquire(&Plain, &b, None, LEASE).await.unwrap().0, 1);
}

/// The names of the statements prepared on `link`'s connection whose text is one of `sql`, as
/// that session's `pg_prepared_statements` lists them (asked over the same connection).
async fn prepared_on(link: &super::link::PgLink, sql: &[&str]) -> Vec<String> {
    let rows = link
        .query(
            || "reading pg_prepared_statements".to_owned(),
            "SELECT name, statement FROM pg_prepared_statements ORDER BY name",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .filter(|r| sql.contains(&r.get::<_, String>(1).as_str()))
        .map(|r| r.get(0))
        .collect()
}

/// With `postgres_prepared_statements` on, each call is prepared once per connection and then
/// sent by name; a new connection prepares them again; a server connection that lost them (a
/// pooler that does not keep them handed the call to another) fails the call with an error
/// naming the setting, without running it, and the next call prepares them again.
#[tokio::test(flavor = "multi_thread")]
async fn prepared_statements_are_prepared_once_per_connection() {
    if !available("prepared_statements_are_prepared_once_per_connection") {
        return;
    }
    let (store, app) = named_store("prepared", 1).await;
    let link = store.link_for(&claim(&Plain, "prepared:1", "x", LEASE).keys.key);
    let sql = super::calls::Calls::new(link.schema());
    let calls = [sql.plain_acquire.as_str(), sql.plain_release.as_str()];
    // Each cycle by an owner of its own: a released owner is done (its late requests refused).
    let cycles = |from: usize, n: usize| {
        let link = &link;
        async move {
            for i in from..from + n {
                let c = claim(&Plain, "prepared:1", &format!("c:{i}"), LEASE);
                assert_eq!(link.acquire(&Plain, &c, None, LEASE).await.unwrap().0, 1);
                let latch = format!("{}l{i}", c.keys.latch_prefix);
                assert_eq!(
                    link.release(&Plain, &c, &latch, LEASE).await.unwrap(),
                    (0, Some(-2))
                );
            }
        }
    };

    // Off (the default): the text goes with every call, nothing is prepared by name.
    cycles(0, 3).await;
    assert!(prepared_on(&link, &calls).await.is_empty());

    // On: prepared by the first cycle, the same two statements for every cycle after it.
    store.prepare_statements(true);
    cycles(3, 2).await;
    let first = prepared_on(&link, &calls).await;
    assert_eq!(first.len(), 2, "{first:?}");
    cycles(5, 3).await;
    assert_eq!(prepared_on(&link, &calls).await, first);

    // A new connection has none: prepared again there (new names), once each.
    assert_eq!(terminate(&app), "1");
    let a = claim(&Plain, "prepared:1", "a:1", LEASE);
    after_one_link_error(async || link.acquire(&Plain, &a, None, LEASE).await).await;
    let latch = format!("{}l-reopened", a.keys.latch_prefix);
    link.release(&Plain, &a, &latch, LEASE).await.unwrap();
    cycles(8, 3).await;
    let second = prepared_on(&link, &calls).await;
    assert_eq!(second.len(), 2, "{second:?}");
    assert!(
        second.iter().all(|n| !first.contains(n)),
        "{first:?} {second:?}"
    );

    // The statements gone from the server connection, as behind a pooler that does not keep
    // them: the call fails naming the setting and does not run; the next one prepares again.
    link.session()
        .await
        .batch_execute("DEALLOCATE ALL")
        .await
        .unwrap();
    let late = claim(&Plain, "prepared:1", "late:1", LEASE);
    let e = link.acquire(&Plain, &late, None, LEASE).await.unwrap_err();
    let said = e.to_string();
    assert!(
        said.contains("postgres_prepared_statements") && said.contains("prepared:1"),
        "{said}"
    );
    assert_eq!(e.sqlstate(), Some("26000"), "{said}");
    assert!(!link.exists(&Plain, &late.keys.key).await.unwrap());
    cycles(11, 2).await;
    assert_eq!(prepared_on(&link, &calls).await.len(), 2);
}

/// A statement prepared before what it reads changed ("cached plan must not change result
/// type") is prepared again and sent once more.
#[tokio::test(flavor = "multi_thread")]
async fn a_statement_made_stale_by_a_change_is_prepared_again() {
    if !available("a_statement_made_stale_by_a_change_is_prepared_again") {
        return;
    }
    let schema = fresh_schema("stale");
    let store = store_at(&shared().url(), &schema).await;
    store.prepare_statements(true);
    let table = format!("\"{schema}\".changing");
    shared()
        .psql(&format!(
            "CREATE TABLE {table} (a int); INSERT INTO {table} VALUES (1)"
        ))
        .unwrap();
    let link = store.any_link();
    let read = format!("SELECT * FROM {table}");
    let what = || "reading the test's table".to_owned();
    assert_eq!(link.query(what, &read, &[]).await.unwrap()[0].len(), 1);
    shared()
        .psql(&format!("ALTER TABLE {table} ADD COLUMN b int"))
        .unwrap();
    assert_eq!(link.query(what, &read, &[]).await.unwrap()[0].len(), 2);
}
