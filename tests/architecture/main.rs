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
const LAYERS: [&str; 7] = [
    "settings",
    "backend",
    "kinds",
    "store",
    "machinery",
    "handles",
    "testing",
];

/// The layer of a runtime file: its top folder; `error.rs` is plain data beside the settings.
fn layer(file: &str) -> usize {
    if file == "lib.rs" {
        return LAYERS.len();
    }
    let top = file.split('/').next().unwrap_or(file);
    let top = if top == "error.rs" { "settings" } else { top };
    LAYERS
        .iter()
        .position(|l| *l == top)
        .unwrap_or_else(|| panic!("{file} is in no layer: put it in one of {LAYERS:?}"))
}

#[test]
fn runtime_layers_import_only_downward() {
    let graph = Graph::of_crate(&src("dlock-runtime"));
    let upward: Vec<String> = graph
        .edges
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
        .filter(|(from, to)| layer(to) > layer(from))
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
    for l in ["settings", "backend", "handles"] {
        assert!(
            lib.iter().any(|f| f.starts_with(l)),
            "lib.rs imports nothing from {l}: {lib:?}"
        );
    }
    assert!(graph.edges["machinery/shared.rs"].contains("machinery/watchdog.rs"));
    assert!(graph.edges["kinds/plain.rs"].contains("backend/script.rs"));
}
