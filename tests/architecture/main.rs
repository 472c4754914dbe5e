//! The shape of the code: the runtime's layers import only downward, and no crate's files
//! import each other in a circle. Reads the source files; starts no Redis.
//!
//! `cargo test --test architecture -- --nocapture` prints every crate's import cycles.

mod imports;

use std::path::{Path, PathBuf};

use imports::Graph;

fn src(krate: &str) -> PathBuf {
    // DLOCK_ARCH_ROOT points the checks at another checkout (to compare with an old commit).
    let root = std::env::var_os("DLOCK_ARCH_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf());
    root.join(krate).join("src")
}

fn report(name: &str, graph: &Graph) -> Vec<Vec<String>> {
    let cycles = graph.cycles();
    println!(
        "{name}: {} files, {} cycles",
        graph.edges.len(),
        cycles.len()
    );
    for c in &cycles {
        println!("  cycle of {}: {}", c.len(), c.join(", "));
    }
    cycles
}

#[test]
fn runtime_files_import_no_cycle() {
    let cycles = report("dlock-runtime", &Graph::of_crate(&src("dlock-runtime")));
    assert!(
        cycles.is_empty(),
        "import cycles in dlock-runtime/src: {cycles:?}"
    );
}

#[test]
fn macro_files_import_no_cycle() {
    let cycles = report("dlock-macros", &Graph::of_crate(&src("dlock-macros")));
    assert!(
        cycles.is_empty(),
        "import cycles in dlock-macros/src: {cycles:?}"
    );
}

/// The runtime's layers, bottom first (ARCHITECTURE.md): a file may import its own layer and
/// the ones below. `lib.rs` declares and re-exports them all; `testing` is a feature of its own.
/// The stores live side by side under `store/`, each in layers of its own below the seam's
/// files (`store/*.rs`): Redis's connections (`store/redis/backend`) under its kinds
/// (`store/redis/kinds`), and every other store in one layer (`store/postgres`, ...), which may
/// import the Redis layers (shared key names and reply shapes) but not the seam above it.
const LAYERS: [&str; 8] = [
    "settings",
    "store/redis/backend",
    "store/redis/kinds",
    "store/*/",
    "store",
    "machinery",
    "handles",
    "testing",
];

/// The layer of a runtime file: the longest layer path its path starts with (`store/*/` is any
/// folder of `store/` not named in a longer entry); `error.rs` is plain data beside the
/// settings.
fn layer(file: &str) -> usize {
    if file == "lib.rs" {
        return LAYERS.len();
    }
    if file == "error.rs" {
        return 0;
    }
    // What a store that answers queries fills in for the inspector: plain data the stores
    // import, importing nothing itself.
    if file == "store/stored.rs" {
        return 3;
    }
    let named = LAYERS
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.contains('*') && (file.starts_with(&format!("{l}/")) || file == **l))
        .max_by_key(|(_, l)| l.len());
    match named {
        Some((i, l)) if *l != "store" => i,
        // Under `store/`: a file of a store's own folder, or a file of the seam itself.
        Some(_) if file["store/".len()..].contains('/') => 3,
        Some((i, _)) => i,
        None => panic!("{file} is in no layer: put it in one of {LAYERS:?}"),
    }
}

/// A unit-test file of a layer (`<layer>/**/tests.rs`, compiled only under `cfg(test)`) may
/// start throw-away servers with the `testing` harness: tests are not part of the runtime's
/// layering, and the store's own tests need a real server.
fn test_using_harness(from: &str, to: &str) -> bool {
    from.ends_with("/tests.rs") && to.starts_with("testing/")
}

#[test]
fn runtime_layers_import_only_downward() {
    let graph = Graph::of_crate(&src("dlock-runtime"));
    let upward: Vec<String> = graph
        .edges
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
        .filter(|(from, to)| layer(to) > layer(from) && !test_using_harness(from, to))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(upward.is_empty(), "imports that go up a layer: {upward:#?}");
}

#[test]
fn the_checker_sees_cycles_and_layers() {
    // The checks above are only worth something if the parser finds the paths: a layer below
    // the handles must import something, and lib.rs must reach every layer.
    let graph = Graph::of_crate(&src("dlock-runtime"));
    let lib = &graph.edges["lib.rs"];
    for l in ["settings", "store/redis/backend", "handles"] {
        assert!(
            lib.iter().any(|f| f.starts_with(l)),
            "lib.rs imports nothing from {l}: {lib:?}"
        );
    }
    assert!(graph.edges["machinery/shared.rs"].contains("machinery/watchdog.rs"));
    assert!(graph.edges["store/redis/kinds/plain.rs"].contains("store/redis/backend/script.rs"));
    // The layers are what the layout says: each store's own folder below the seam's files.
    assert_eq!(layer("store/redis/backend/conn.rs"), 1);
    assert_eq!(layer("store/redis/kinds/plain.rs"), 2);
    assert_eq!(layer("store/redis/mod.rs"), 3);
    assert_eq!(layer("store/postgres/link.rs"), 3);
    assert_eq!(layer("store/link.rs"), 4);
    assert_eq!(layer("machinery/acquire.rs"), 5);
}
