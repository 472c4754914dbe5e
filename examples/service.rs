//! An axum service whose payment handler runs under `#[distributed_lock]`.
//!
//! ```sh
//! cargo run --example service            # starts a temporary redis-server unless REDIS_URL is set
//! curl -X POST http://127.0.0.1:3000/orders/42/pay     # 201 Created, the charge
//! curl -X POST http://127.0.0.1:3000/orders/42/pay     # 200 OK, already paid: same charge
//! ```
//!
//! `POST /orders/{id}/pay` reads whether the order is paid, charges the card if not, and records
//! the payment: a read-check-write against a shared store, correct across any number of service
//! instances only because the body runs while this instance holds the lock `order:<id>`. The
//! attribute keeps the function an ordinary axum handler (same signature, `Send` future), and
//! different orders take different locks, so they are paid in parallel.
//!
//! `tests/attribute/service.rs` starts two instances of this app on free ports and fires 50 concurrent
//! payments of one order at them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use dlock::redis::aio::MultiplexedConnection;
use dlock::redis::{self, AsyncCommands};
use dlock::{distributed_lock, LockClient, LockError};
use serde::{Deserialize, Serialize};

/// The payment provider. A real service calls its provider's API here; anything that charges
/// twice for one order costs a customer money, which is what the lock prevents.
pub trait Gateway: Send + Sync + 'static {
    /// Charges `cents` for `order` and returns the provider's charge id.
    fn charge(&self, order: u64, cents: u64) -> BoxFuture<'_, Result<String, String>>;
}

/// A boxed `Send` future (what a dyn-compatible async trait method returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A stand-in provider that counts charges per order in Redis: a network round trip like the
/// real thing, and a record of every charge for the test to check.
pub struct DemoGateway {
    /// Where the provider keeps its charge counters.
    pub db: MultiplexedConnection,
}

impl Gateway for DemoGateway {
    fn charge(&self, order: u64, cents: u64) -> BoxFuture<'_, Result<String, String>> {
        let mut db = self.db.clone();
        Box::pin(async move {
            let n: u64 = db
                .incr(charges_key(order), 1)
                .await
                .map_err(|e| format!("provider unreachable: {e}"))?;
            Ok(format!("ch_{order}_{n}_{cents}c"))
        })
    }
}

/// What every handler gets: the lock client, the shop's store (Redis here, a database in real
/// life), and the payment provider.
#[derive(Clone)]
pub struct AppState {
    /// Named in the attribute: `client = state.locks`.
    pub locks: LockClient,
    /// Orders and payments.
    pub db: MultiplexedConnection,
    /// Charges cards.
    pub gateway: Arc<dyn Gateway>,
}

/// The service's routes, with `/metrics` (Prometheus text: dlock's counters and histograms,
/// labelled by lock template, when dlock is built with its `metrics` feature).
pub fn app(state: AppState) -> Router {
    let metrics = prometheus();
    Router::new()
        .route("/orders/{id}/pay", post(pay))
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .with_state(state)
}

/// The process's Prometheus recorder, installed on first use: a `metrics` recorder is
/// process-wide, and two instances of the service in one process (its test) share it.
pub fn prometheus() -> metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .expect("install the Prometheus recorder")
        })
        .clone()
}

/// The answer to a payment request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    /// The order id.
    pub order: u64,
    /// The provider's charge id.
    pub charge: String,
    /// True when an earlier request paid this order (this one charged nothing).
    pub already_paid: bool,
}

/// The price of every order in this demo.
const PRICE_CENTS: u64 = 1999;

/// Pays order `id` once, however many times and on however many instances it is requested.
#[distributed_lock(key = "order:{id}", ttl = "30s", wait = "10s", client = state.locks)]
async fn pay(
    State(state): State<AppState>,
    Path(id): Path<u64>,
) -> Result<(StatusCode, Json<Payment>), AppError> {
    let mut db = state.db.clone();
    if let Some(charge) = db.get::<_, Option<String>>(paid_key(id)).await? {
        let paid = Payment {
            order: id,
            charge,
            already_paid: true,
        };
        return Ok((StatusCode::OK, Json(paid)));
    }
    let charge = state
        .gateway
        .charge(id, PRICE_CENTS)
        .await
        .map_err(AppError::Gateway)?;
    let _: () = redis::pipe()
        .rpush(payments_key(id), &charge)
        .set(paid_key(id), &charge)
        .query_async(&mut db)
        .await?;
    let paid = Payment {
        order: id,
        charge,
        already_paid: false,
    };
    Ok((StatusCode::CREATED, Json(paid)))
}

/// The payments recorded for an order (one, if all is well).
pub async fn payments_of(db: &MultiplexedConnection, id: u64) -> redis::RedisResult<Vec<String>> {
    db.clone().lrange(payments_key(id), 0, -1).await
}

/// How many times the provider charged for an order.
pub async fn charges_of(db: &MultiplexedConnection, id: u64) -> redis::RedisResult<u64> {
    Ok(db
        .clone()
        .get::<_, Option<u64>>(charges_key(id))
        .await?
        .unwrap_or(0))
}

fn paid_key(id: u64) -> String {
    format!("shop:order:{id}:paid")
}

fn payments_key(id: u64) -> String {
    format!("shop:order:{id}:payments")
}

fn charges_key(id: u64) -> String {
    format!("provider:order:{id}:charges")
}

/// Errors of the handler; `From<LockError>` is what `#[distributed_lock]` requires.
#[derive(Debug)]
pub enum AppError {
    /// The lock could not be taken (timed out behind another request for the order, Redis down).
    Lock(LockError),
    /// The store failed.
    Store(redis::RedisError),
    /// The provider failed.
    Gateway(String),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<redis::RedisError> for AppError {
    fn from(e: redis::RedisError) -> Self {
        AppError::Store(e)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, msg) = match self {
            // Another request for this order held the lock for the whole wait: ask to retry.
            AppError::Lock(e @ LockError::Timeout { .. }) => {
                (StatusCode::CONFLICT, format!("{e}; retry"))
            }
            // The store is unreachable, loading or failing over (Redis or PostgreSQL alike):
            // the same request may succeed later.
            AppError::Lock(e) if e.is_transient() => {
                (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            // Refused, wrong type, bad settings, a lease that ran out: a retry gives the same.
            AppError::Lock(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            AppError::Store(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            AppError::Gateway(e) => (StatusCode::BAD_GATEWAY, e),
        };
        (status, msg).into_response()
    }
}

// `tests/attribute/service.rs` includes this file as a module and starts `app` itself.
#[allow(dead_code)]
#[tokio::main]
async fn main() {
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = dlock::testing::RedisServer::start().expect("start redis-server");
            (server.url(), Some(server))
        }
    };
    let locks = LockClient::connect(&url).await.expect("connect to redis");
    let db = redis::Client::open(url.as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let state = AppState {
        locks: locks.clone(),
        gateway: Arc::new(DemoGateway { db: db.clone() }),
        db,
    };
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    println!("redis {url}; listening on http://{addr}");
    println!("try: curl -X POST http://{addr}/orders/42/pay");
    // The deploy pattern: on SIGTERM (or Ctrl-C) stop taking requests, let the ones in
    // flight finish, then shut the lock client down, so no lock is left held for its lease
    // by a release still queued when the process exits.
    axum::serve(listener, app(state))
        .with_graceful_shutdown(stop_signal())
        .await
        .expect("serve");
    locks.shutdown().await;
}

/// SIGTERM (what a deploy sends) or Ctrl-C.
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
