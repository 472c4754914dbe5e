//! The import graph of a crate's source files: which file names a path into which other file.
//!
//! An edge `a -> b` is any path in `a`'s code (a `use`, or a path written inline) that starts
//! with `crate::`, `super::`, `self::` or a child module `a` declares, and reaches an item of
//! the module `b` defines. Comments (doc links included) and `#[cfg(test)]` modules do not
//! count: they do not make one file need another to be read. Paths through the crate root's
//! re-exports (`crate::LockError`) count as edges to `lib.rs`, which declares every module: such
//! a path closes a cycle and is reported, so code inside the crate names the defining module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's files (relative paths like `store/redis/backend/conn.rs`) and the files each one imports.
pub struct Graph {
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    /// Reads every `.rs` file under `src` (the directory holding `lib.rs`).
    pub fn of_crate(src: &Path) -> Graph {
        let mut files = Vec::new();
        collect(src, &mut files);
        let modules: BTreeMap<Vec<String>, String> = files
            .iter()
            .map(|f| (module_path(src, f), relative(src, f)))
            .collect();
        let mut edges = BTreeMap::new();
        for file in &files {
            let here = module_path(src, file);
            let rel = relative(src, file);
            let text = std::fs::read_to_string(file).expect("read a source file");
            let tokens = tokens(strip_test_modules(&text));
            let children = declared_modules(&tokens);
            let mut targets = BTreeSet::new();
            for path in paths(&tokens, &children) {
                let Some(absolute) = absolute(&here, &path) else {
                    continue;
                };
                if let Some(target) = longest_module(&modules, &absolute) {
                    if target != rel {
                        targets.insert(target);
                    }
                }
            }
            edges.insert(rel, targets);
        }
        Graph { edges }
    }

    /// The groups of files that import each other in a circle (strongly connected components
    /// of more than one file), largest first.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = tarjan(&self.edges)
            .into_iter()
            .filter(|c| c.len() > 1)
            .collect();
        out.sort_by_key(|c| std::cmp::Reverse(c.len()));
        out
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read a source directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("a file under src");
    rel.to_string_lossy().replace('\\', "/")
}

/// `lib.rs` and `mod.rs` define the module of their directory; `a/b.rs` defines `a::b`.
fn is_dir_module(file: &Path) -> bool {
    matches!(
        file.file_name().and_then(|n| n.to_str()),
        Some("lib.rs" | "mod.rs" | "main.rs")
    )
}

fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    if !is_dir_module(file) {
        parts.push(last.trim_end_matches(".rs").to_owned());
    }
    parts
}

/// The file text without its `#[cfg(test)] mod ... { }` blocks (`#[cfg(all(test, ...))]` too).
fn strip_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let attr = line.trim();
        let is_test_attr =
            attr.starts_with("#[cfg(") && (attr.contains("(test)") || attr.contains("(test,"));
        let next_is_mod = lines
            .peek()
            .is_some_and(|l| l.trim_start().starts_with("mod ") && l.trim_end().ends_with('{'));
        if is_test_attr && next_is_mod {
            // Skip to the line that closes the block at the module's own indentation.
            let opener = lines.next().unwrap_or_default();
            let indent = opener.len() - opener.trim_start().len();
            for inner in lines.by_ref() {
                let inner_indent = inner.len() - inner.trim_start().len();
                if inner.trim() == "}" && inner_indent == indent {
                    break;
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The tokens that matter for paths: identifiers, `::`, and the punctuation of use trees.
/// Comments, string and char literals are skipped, so `"redis://"` is not a path.
fn tokens(text: String) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && raw_string_start(&chars, i)
        {
            i = skip_raw_string(&chars, i);
        } else if c == 'b' && next == Some('"') {
            i = skip_string(&chars, i + 1);
        } else if c == '"' {
            i = skip_string(&chars, i);
        } else if c == '\'' {
            i = skip_char_or_lifetime(&chars, i);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && next == Some(':') {
            out.push("::".to_owned());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

fn raw_string_start(chars: &[char], i: usize) -> bool {
    // `r"` or `r#...#"`, and not the end of an identifier like `bar"`.
    let preceded_by_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    !preceded_by_ident && chars.get(j) == Some(&'"')
}

fn skip_raw_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    j += 1; // the opening quote
    while j < chars.len() {
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    j
}

fn skip_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    j
}

/// `'a'`, `'\n'`, `'\u{7b}'` are char literals; `'a` (no closing quote) is a lifetime.
fn skip_char_or_lifetime(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 2;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    i + 1
}

/// The modules a file declares (`mod name;`), which its paths may start with.
fn declared_modules(tokens: &[String]) -> BTreeSet<String> {
    tokens
        .windows(3)
        .filter(|w| w[0] == "mod" && w[2] == ";")
        .map(|w| w[1].clone())
        .collect()
}

/// Every path that starts at `crate`, `super`, `self` or a declared child module, with use
/// trees (`a::{b, c::d}`) expanded.
fn paths(tokens: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        let starts_path = i == 0 || tokens[i - 1] != "::";
        let root = matches!(t.as_str(), "crate" | "super" | "self") || children.contains(t);
        if starts_path && root && tokens.get(i + 1).is_some_and(|n| n == "::") {
            let (found, end) = use_tree(tokens, i, Vec::new());
            out.extend(found);
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Parses `seg (:: seg)* (:: { tree, ... })?` from `i`; returns the paths and where it ended.
fn use_tree(tokens: &[String], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix;
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                let mut found = Vec::new();
                i += 1;
                while i < tokens.len() && tokens[i] != "}" {
                    let (sub, end) = use_tree(tokens, i, path.clone());
                    found.extend(sub);
                    i = end;
                    if tokens.get(i).is_some_and(|t| t == ",") {
                        i += 1;
                    }
                }
                return (found, i + 1);
            }
            Some(t) if is_ident(t) || t == "*" => {
                path.push(t.to_owned());
                i += 1;
                if tokens.get(i).is_some_and(|t| t == "::") {
                    i += 1;
                    continue;
                }
                // `as alias` ends the path.
                if tokens.get(i).is_some_and(|t| t == "as") {
                    i += 2;
                }
                return (vec![path], i);
            }
            _ => return (vec![path], i),
        }
    }
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The absolute module path a path written in module `here` names; `None` for paths that do
/// not start inside the crate.
fn absolute(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut segments = path.iter();
    let first = segments.next()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => parent(here),
        child => {
            let mut p = here.to_vec();
            p.push(child.to_owned());
            p
        }
    };
    let mut rest: Vec<&String> = segments.collect();
    while rest.first().is_some_and(|s| *s == "super") {
        base = parent(&base);
        rest.remove(0);
    }
    base.extend(
        rest.into_iter()
            .filter(|s| *s != "self" && *s != "*")
            .cloned(),
    );
    Some(base)
}

fn parent(module: &[String]) -> Vec<String> {
    module[..module.len().saturating_sub(1)].to_vec()
}

/// The file of the deepest module the path goes through.
fn longest_module(modules: &BTreeMap<Vec<String>, String>, path: &[String]) -> Option<String> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).cloned())
}

/// Tarjan's strongly connected components over the file graph.
fn tarjan(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}
