//! examples/service.rs over real HTTP: 50 concurrent payments of one order, spread over two
//! instances of the service, charge once; payments of different orders run at the same time.

#[path = "../../examples/service.rs"]
mod example;

use std::sync::Arc;
use std::time::Duration;

use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::RedisServer;
use dlock::LockClient;
use example::{AppState, BoxFuture, DemoGateway, Gateway, Payment};
use tokio::sync::Barrier;

async fn store(url: &str) -> MultiplexedConnection {
    dlock::redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Starts one instance of the service (its own lock client, like another machine) on a free
/// port and returns its base URL.
async fn start_instance(url: &str, gateway: Arc<dyn Gateway>) -> String {
    let state = AppState {
        locks: LockClient::connect(url).await.unwrap(),
        db: store(url).await,
        gateway,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, example::app(state)).await });
    format!("http://{addr}")
}

fn http() -> reqwest::Client {
    // No proxy from the environment: the service is on loopback.
    reqwest::Client::builder().no_proxy().build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_payments_of_one_order_charge_once() {
    let server = RedisServer::start().expect("redis-server");
    let db = store(&server.url()).await;
    let gateway: Arc<dyn Gateway> = Arc::new(DemoGateway { db: db.clone() });
    let instances = [
        start_instance(&server.url(), gateway.clone()).await,
        start_instance(&server.url(), gateway.clone()).await,
    ];
    let http = http();
    let requests: Vec<_> = (0..50)
        .map(|i| {
            let url = format!("{}/orders/7/pay", instances[i % 2]);
            let http = http.clone();
            tokio::spawn(async move {
                let resp = http.post(url).send().await.unwrap();
                let status = resp.status();
                if !status.is_success() {
                    panic!("{status}: {}", resp.text().await.unwrap());
                }
                (status, resp.json::<Payment>().await.unwrap())
            })
        })
        .collect();
    let mut created = Vec::new();
    let mut already = Vec::new();
    for r in requests {
        match r.await.unwrap() {
            (s, payment) if s.as_u16() == 201 => created.push(payment),
            (s, payment) if s.as_u16() == 200 => already.push(payment),
            (s, payment) => panic!("unexpected {s}: {payment:?}"),
        }
    }
    assert_eq!(created.len(), 1, "exactly one request pays: {created:?}");
    assert_eq!(already.len(), 49);
    let charge = &created[0].charge;
    assert!(!created[0].already_paid);
    assert!(already
        .iter()
        .all(|p| p.already_paid && &p.charge == charge));
    assert_eq!(
        example::payments_of(&db, 7).await.unwrap(),
        std::slice::from_ref(charge)
    );
    assert_eq!(example::charges_of(&db, 7).await.unwrap(), 1);
    metrics_count_the_payments(&http, &instances[0]).await;
}

/// `/metrics` of the service: the 50 payment acquires of both instances (one recorder per
/// process), labelled with the attribute's template, not the order id. Without dlock's
/// `metrics` feature the page is there but has no dlock series.
async fn metrics_count_the_payments(http: &reqwest::Client, instance: &str) {
    let text = http
        .get(format!("{instance}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    if !cfg!(feature = "metrics") {
        assert!(!text.contains("dlock_acquires_total"), "{text}");
        return;
    }
    let acquired: f64 = text
        .lines()
        .find(|l| {
            l.starts_with("dlock_acquires_total{")
                && l.contains(r#"lock="order:{id}""#)
                && l.contains(r#"outcome="acquired""#)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no acquires of order:{{id}} in /metrics:\n{text}"));
    // Other tests of this binary pay through the same template too: at least these 50.
    assert!(acquired >= 50.0, "{acquired} acquires counted:\n{text}");
    assert!(
        !text.contains(r#"lock="order:7""#),
        "a rendered key became a label"
    );
}

/// Charges only once both orders' handlers are inside their locks at the same time.
struct MeetInTheMiddle {
    both_inside: Barrier,
    inner: DemoGateway,
}

impl Gateway for MeetInTheMiddle {
    fn charge(&self, order: u64, cents: u64) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async move {
            self.both_inside.wait().await;
            self.inner.charge(order, cents).await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_orders_are_paid_in_parallel() {
    let server = RedisServer::start().expect("redis-server");
    let db = store(&server.url()).await;
    let gateway = Arc::new(MeetInTheMiddle {
        both_inside: Barrier::new(2),
        inner: DemoGateway { db: db.clone() },
    });
    let base = start_instance(&server.url(), gateway).await;
    let http = http();
    let pay = |id: u64| {
        let (http, url) = (http.clone(), format!("{base}/orders/{id}/pay"));
        async move { http.post(url).send().await.unwrap().status() }
    };
    // Each payment waits in the gateway for the other: they can only complete if order 1's
    // lock and order 2's lock are held at once. Serialized orders would never get there; the
    // timeout only turns that hang into a failure.
    let both = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(pay(1), pay(2))
    })
    .await
    .expect("orders 1 and 2 did not run at the same time");
    assert_eq!(both.0.as_u16(), 201);
    assert_eq!(both.1.as_u16(), 201);
    assert_eq!(example::charges_of(&db, 1).await.unwrap(), 1);
    assert_eq!(example::charges_of(&db, 2).await.unwrap(), 1);
}
