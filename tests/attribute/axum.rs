//! An annotated `async fn` is still an axum handler (its future stays `Send`, its extractor
//! patterns still bind), and a lock it cannot get becomes the handler's error response.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use dlock::testing::RedisServer;
use dlock::{distributed_lock, LockClient, LockError};

#[derive(Clone)]
struct AppState {
    locks: LockClient,
}

#[derive(Debug)]
struct ApiError(LockError);

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match self.0 {
            LockError::Timeout { .. } => StatusCode::CONFLICT,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, self.0.to_string()).into_response()
    }
}

/// Checkout of one cart at a time, fleet-wide.
#[distributed_lock(key = "cart:{cart}", client = state.locks, wait = "0s")]
async fn checkout(
    State(state): State<AppState>,
    Path(cart): Path<u64>,
) -> Result<String, ApiError> {
    let held = state.locks.lock(format!("cart:{cart}")).is_locked().await?;
    Ok(format!("cart {cart} checked out under its lock: {held}"))
}

/// axum's usual error type: a tuple, which cannot implement `From<LockError>` in this crate
/// (orphan rule), so the lock error is mapped by a function instead.
fn lock_to_http(e: LockError) -> (StatusCode, String) {
    let status = match e {
        LockError::Timeout { .. } => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, e.to_string())
}

#[distributed_lock(key = "refund:{id}", client = state.locks, wait = "0s", map_err = lock_to_http)]
async fn refund(
    State(state): State<AppState>,
    Path(id): Path<u64>,
) -> Result<String, (StatusCode, String)> {
    if id == 0 {
        return Err((StatusCode::BAD_REQUEST, "no order 0".to_owned()));
    }
    Ok(format!("refunded {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_err_turns_lock_errors_into_tuple_responses() {
    let redis = RedisServer::start().unwrap();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let app = Router::new()
        .route("/orders/{id}/refund", post(refund))
        .with_state(AppState {
            locks: locks.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let url = |id: u64| format!("http://{addr}/orders/{id}/refund");

    let ok = http.post(url(9)).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.text().await.unwrap(), "refunded 9");
    // The body's own tuple errors pass through untouched.
    let bad = http.post(url(0)).send().await.unwrap();
    assert_eq!(bad.status(), 400);

    let other = locks.lock("refund:9").acquire().await.unwrap();
    let busy = http.post(url(9)).send().await.unwrap();
    assert_eq!(busy.status(), 409);
    assert!(busy.text().await.unwrap().contains("refund:9"));
    other.release().await.unwrap();

    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_fn_is_a_handler() {
    let redis = RedisServer::start().unwrap();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let app = Router::new()
        .route("/carts/{cart}/checkout", post(checkout))
        .with_state(AppState {
            locks: locks.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let url = format!("http://{addr}/carts/5/checkout");

    let ok = http.post(&url).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(
        ok.text().await.unwrap(),
        "cart 5 checked out under its lock: true"
    );

    // Someone else holds the cart: `wait = "0s"` turns into 409 through `ApiError`.
    let other = locks.lock("cart:5").acquire().await.unwrap();
    let busy = http.post(&url).send().await.unwrap();
    assert_eq!(busy.status(), 409);
    assert!(busy.text().await.unwrap().contains("cart:5"));
    other.release().await.unwrap();

    server.abort();
}
