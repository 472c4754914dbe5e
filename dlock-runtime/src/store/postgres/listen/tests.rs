use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::*;

#[test]
fn channels_sharing_a_pg_channel_are_both_dispatched_and_unlistened_with_the_last() {
    // A hash collision cannot be produced on demand, so the routes are given one directly.
    let routes = Routes::default();
    routes.add("dlock_x", "a");
    routes.add("dlock_x", "b");
    routes.add("dlock_x", "a"); // a repeated subscribe, not a second reference
    assert_eq!(routes.targets("dlock_x"), ["a", "b"]);
    assert!(!routes.remove("dlock_x", "a"), "b still needs the LISTEN");
    assert_eq!(routes.targets("dlock_x"), ["b"]);
    assert!(routes.remove("dlock_x", "b"), "the last one gone: UNLISTEN");
    assert!(routes.targets("dlock_x").is_empty());
    assert!(
        !routes.remove("dlock_x", "b"),
        "nothing left to UNLISTEN twice"
    );
}

#[test]
fn identifiers_are_quoted_with_inner_quotes_doubled() {
    assert_eq!(quote_ident("dlock_00ff"), "\"dlock_00ff\"");
    assert_eq!(quote_ident("Mixed\"q"), "\"Mixed\"\"q\"");
}

#[cfg(feature = "testing")]
mod server {
    use super::*;
    use crate::testing::postgres::PgServer;

    const ACK: Duration = Duration::from_millis(300);
    /// Bound on anything expected "soon" here; far above every timeout in play.
    const SOON: Duration = Duration::from_secs(10);
    /// The listener's connections, told apart in `pg_stat_activity`.
    const APP: &str = "dlock-listen-test";

    /// What the hooks heard.
    struct Heard {
        notes: mpsc::UnboundedReceiver<(String, String)>,
        resubscribed: mpsc::UnboundedReceiver<()>,
    }

    impl Heard {
        async fn next(&mut self) -> (String, String) {
            tokio::time::timeout(SOON, self.notes.recv())
                .await
                .expect("a notification in time")
                .expect("listener alive")
        }

        async fn resubscribed(&mut self) {
            tokio::time::timeout(SOON, self.resubscribed.recv())
                .await
                .expect("resubscribed in time")
                .expect("listener alive");
        }
    }

    async fn start(server: &PgServer, health_interval: Duration) -> (PgListener, Heard) {
        let mut config: Config = server.url().parse().unwrap();
        config.application_name(APP);
        let (notes_tx, notes) = mpsc::unbounded_channel();
        let (resub_tx, resubscribed) = mpsc::unbounded_channel();
        let hooks = ListenHooks {
            dispatch: Box::new(move |channel, payload| {
                let _ = notes_tx.send((channel.to_owned(), payload.to_owned()));
            }),
            resubscribed: Box::new(move || {
                let _ = resub_tx.send(());
            }),
            ack_timeout: ACK,
        };
        let listener = PgListener::start(
            config,
            hooks,
            &tokio::runtime::Handle::current(),
            Duration::from_millis(500),
            health_interval,
        )
        .await
        .unwrap();
        (
            listener,
            Heard {
                notes,
                resubscribed,
            },
        )
    }

    /// Subscribes and returns the acknowledgement.
    async fn subscribe(listener: &PgListener, channel: &str) -> bool {
        let (tx, rx) = oneshot::channel();
        listener.subscribe(channel, tx);
        tokio::time::timeout(SOON, rx)
            .await
            .expect("acknowledged in time")
            .expect("acknowledgement sent")
    }

    /// A second connection, as a releasing client would send its NOTIFY.
    async fn connect(server: &PgServer) -> Client {
        let (client, connection) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    async fn notify(client: &Client, channel: &str) {
        let pg = pg_channel(channel);
        let sent = async {
            client
                .execute("SELECT pg_notify($1, 'released')", &[&pg])
                .await
        };
        tokio::time::timeout(SOON, sent)
            .await
            .expect("NOTIFY sent in time")
            .unwrap();
    }

    /// How many connections of the listener the server has.
    async fn listener_backends(client: &Client) -> i64 {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&APP],
            )
            .await
            .unwrap();
        row.get(0)
    }

    fn server() -> PgServer {
        PgServer::start().expect("a throw-away PostgreSQL server")
    }

    #[tokio::test]
    async fn a_notify_reaches_dispatch_under_the_dlock_channel_name() {
        let server = server();
        let (listener, mut heard) = start(&server, Duration::from_secs(2)).await;
        let channel = "dlock:{order:1}:released";
        assert!(subscribe(&listener, channel).await);
        // Subscribing again (a second waiter) needs no round trip and is confirmed too.
        assert!(subscribe(&listener, channel).await);
        let sender = connect(&server).await;
        notify(&sender, channel).await;
        assert_eq!(
            heard.next().await,
            (channel.to_owned(), "released".to_owned())
        );
        listener.stop();
    }

    #[tokio::test]
    async fn a_ten_thousand_character_channel_name_works() {
        let server = server();
        let (listener, mut heard) = start(&server, Duration::from_secs(2)).await;
        let channel = format!("dlock:{{{}}}:released", "k".repeat(10_000));
        assert!(subscribe(&listener, &channel).await);
        let sender = connect(&server).await;
        notify(&sender, &channel).await;
        assert_eq!(heard.next().await.0, channel);
        listener.stop();
    }

    #[tokio::test]
    async fn an_unsubscribed_channel_hears_nothing_and_one_subscribed_again_does() {
        let server = server();
        let (listener, mut heard) = start(&server, Duration::from_secs(2)).await;
        assert!(subscribe(&listener, "a").await);
        assert!(subscribe(&listener, "b").await);
        listener.unsubscribe("a");
        // Commands are applied in order: once this is acknowledged, "a" is UNLISTENed.
        assert!(subscribe(&listener, "c").await);
        let sender = connect(&server).await;
        notify(&sender, "a").await;
        notify(&sender, "b").await;
        // One sender's notifications arrive in the order sent: "a" would have come first.
        assert_eq!(heard.next().await.0, "b");

        // Unsubscribed and subscribed again before the task ran either: still listened.
        listener.unsubscribe("b");
        assert!(subscribe(&listener, "b").await);
        notify(&sender, "b").await;
        assert_eq!(heard.next().await.0, "b");
        listener.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_and_restarted_server_is_listened_again_and_everyone_woken() {
        let mut server = server();
        let (listener, mut heard) = start(&server, Duration::from_secs(2)).await;
        assert!(subscribe(&listener, "a").await);
        let server = tokio::task::spawn_blocking(move || {
            server.kill();
            server.start_again().expect("restarted");
            server
        })
        .await
        .unwrap();
        heard.resubscribed().await;
        let sender = connect(&server).await;
        notify(&sender, "a").await;
        assert_eq!(heard.next().await.0, "a");
        listener.stop();
    }

    #[tokio::test]
    async fn a_terminated_backend_is_replaced() {
        let server = server();
        let (listener, mut heard) = start(&server, Duration::from_secs(2)).await;
        assert!(subscribe(&listener, "a").await);
        let admin = connect(&server).await;
        let killed = admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&APP],
            )
            .await
            .unwrap();
        assert_eq!(killed, 1);
        heard.resubscribed().await;
        notify(&admin, "a").await;
        assert_eq!(heard.next().await.0, "a");
        listener.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_link_is_noticed_by_the_health_query_and_replaced() {
        let server = server();
        let interval = Duration::from_millis(200);
        let (listener, mut heard) = start(&server, interval).await;
        assert!(subscribe(&listener, "a").await);
        server.pause();
        // Nothing announces that the listener gave the silent connection up, and after the
        // resume the old connection would answer again; so the pause lasts past the bound
        // under test (interval + ack timeout), and only a replacement fires `resubscribed`.
        tokio::time::sleep(interval + ACK + Duration::from_millis(500)).await;
        server.resume();
        heard.resubscribed().await;
        let sender = connect(&server).await;
        notify(&sender, "a").await;
        assert_eq!(heard.next().await.0, "a");
        listener.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribe_to_a_silent_server_is_unconfirmed_within_the_ack_timeout() {
        let server = server();
        // No health checks: the unanswered LISTEN alone must get the connection replaced.
        let (listener, mut heard) = start(&server, Duration::from_secs(3600)).await;
        server.pause();
        let started = Instant::now();
        assert!(!subscribe(&listener, "a").await);
        let took = started.elapsed();
        assert!(took < ACK + Duration::from_millis(200), "{took:?}");
        server.resume();
        // The replacement LISTENs "a", then wakes its waiters.
        heard.resubscribed().await;
        assert!(subscribe(&listener, "a").await);
        let sender = connect(&server).await;
        notify(&sender, "a").await;
        assert_eq!(heard.next().await.0, "a");
        listener.stop();
    }

    #[tokio::test]
    async fn stop_closes_the_connection() {
        let server = server();
        let (listener, _heard) = start(&server, Duration::from_secs(2)).await;
        assert!(subscribe(&listener, "a").await);
        let admin = connect(&server).await;
        assert_eq!(listener_backends(&admin).await, 1);
        listener.stop();
        // The server notices the closed socket on its own time: polled, bounded by SOON.
        let started = Instant::now();
        while listener_backends(&admin).await != 0 {
            assert!(started.elapsed() < SOON, "listener connection still open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
