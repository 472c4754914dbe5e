//! Writing to stdout without panicking when the reader went away (`dlock list | head`).

use std::io::Write;

use serde::Serialize;

/// Writes `text` as is; a closed pipe ends the output quietly.
pub fn text(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// One JSON document on its own line.
pub fn json(value: &impl Serialize) {
    match serde_json::to_string(value) {
        Ok(line) => text(&format!("{line}\n")),
        // Only non-string map keys or a failing Serialize impl get here; ours have neither.
        Err(e) => eprintln!("dlock: cannot write JSON: {e}"),
    }
}
