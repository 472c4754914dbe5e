#![allow(dead_code)]
use dlock::distributed_lock;

/// Named like a result, but a plain struct.
struct SearchResult {
    hits: Vec<String>,
}

#[distributed_lock(key = "search")]
async fn search() -> SearchResult {
    SearchResult { hits: Vec::new() }
}

fn main() {}
