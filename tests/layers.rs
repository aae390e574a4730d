//! The source tree is the layer diagram (docs/ARCHITECTURE.md, "Layers"): every `crate::`
//! and `super::` path in `src/` is resolved to the file it names, and
//! - no file names a file of a layer above its own: value types < `format/` < `algo/`
//!   < `storage/` < `parts/` < `draw/` < `store/` < `handle/` and `inspect.rs` (the algorithms name
//!   no file or mapping: they stay pure, and the mapped types implement their traits;
//!   the draws the handles share name no handle);
//! - no two files name each other, directly or around a loop.
//!
//! The command's crate (`tools/src`), the benchmarks' (`bench/src`) and the Python
//! extension's (`python/src`) are held to the second rule too.
//!
//! A path through a re-export (`crate::Column`, `super::Reader`) counts as naming the
//! file that defines the item.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "a test over the crate's own sources fails loudly"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file's layer, from the folder (or value-type file) it sits in.
fn layer(file: &str) -> (u8, &'static str) {
    let top = file.split('/').next().unwrap_or("");
    match top {
        "format" => (1, "format"),
        "algo" => (2, "algo"),
        "storage" => (3, "storage"),
        "parts" => (4, "parts"),
        "draw" => (5, "draw"),
        "store" => (6, "store"),
        "handle" => (7, "handle"),
        "inspect.rs" => (7, "inspect"),
        "lib.rs" => (8, "lib"),
        _ => (0, "values"),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without comments (a path in a comment names nothing).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after each `prefix` (`crate::` or `super::`), with brace groups expanded one
/// level: `crate::a::{b, c::D}` gives `a::b` and `a::c::D`.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut segs = Vec::new();
        let mut s = rest;
        loop {
            let n = s
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len());
            if n > 0 {
                segs.push(s[..n].to_string());
                s = &s[n..];
            }
            if let Some(t) = s.strip_prefix("::") {
                s = t;
                if let Some(t) = s.strip_prefix('{') {
                    let end = t.find('}').unwrap_or(t.len());
                    for part in t[..end].split(',') {
                        let part = part.trim();
                        if part.is_empty() {
                            continue;
                        }
                        let mut p = segs.clone();
                        p.extend(
                            part.split("::")
                                .map(|x| x.split_whitespace().next().unwrap_or("").to_string()),
                        );
                        out.push(p);
                    }
                    segs.clear();
                    break;
                }
                continue;
            }
            break;
        }
        if !segs.is_empty() {
            out.push(segs);
        }
    }
    out
}

/// The re-exports of a module file: name -> path of the module it comes from.
fn reexports(code: &str) -> BTreeMap<String, Vec<String>> {
    let mut map = BTreeMap::new();
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let Some(u) = stmt
            .strip_prefix("pub use ")
            .or_else(|| stmt.strip_prefix("pub(crate) use "))
            .or_else(|| stmt.strip_prefix("use "))
        else {
            continue;
        };
        let u = u.trim_start_matches("crate::");
        for p in paths_after(&format!(" X::{u}"), "X::") {
            if let Some(name) = p.last() {
                map.insert(name.clone(), p[..p.len() - 1].to_vec());
            }
        }
    }
    map
}

/// The file a module path (from `src/`) names: the longest prefix that is a file, or
/// lib.rs (a name the crate root re-exports).
fn resolve(src: &Path, segs: &[String]) -> Option<String> {
    for n in (1..=segs.len()).rev() {
        let base = segs[..n].join("/");
        for cand in [format!("{base}.rs"), format!("{base}/mod.rs")] {
            if src.join(&cand).is_file() {
                return Some(cand);
            }
        }
    }
    Some("lib.rs".to_string())
}

/// Follows re-exports until the file that defines the item.
fn defining_file(
    src: &Path,
    exports: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    module_dir: &[String],
    segs: &[String],
    depth: usize,
) -> Option<String> {
    let mut full: Vec<String> = module_dir.to_vec();
    full.extend(segs.iter().cloned());
    let file = resolve(src, &full)?;
    // A name the file only re-exports: follow it (the file is a `mod.rs` or lib.rs).
    let consumed = file
        .trim_end_matches(".rs")
        .trim_end_matches("/mod")
        .split('/')
        .count();
    let consumed = if file == "lib.rs" { 0 } else { consumed };
    if depth < 8
        && let Some(name) = full.get(consumed)
        && let Some(from) = exports.get(&file).and_then(|m| m.get(name))
    {
        let dir: Vec<String> = match file.as_str() {
            "lib.rs" => Vec::new(),
            f => f
                .trim_end_matches(".rs")
                .trim_end_matches("/mod")
                .split('/')
                .map(String::from)
                .collect(),
        };
        let mut rel: Vec<String> = from.iter().filter(|s| *s != "self").cloned().collect();
        if rel.first().is_some_and(|s| s == "super") {
            rel.remove(0);
            let mut up = dir.clone();
            up.pop();
            let mut r = up;
            r.append(&mut rel);
            r.push(name.clone());
            return defining_file(src, exports, &[], &r, depth + 1);
        }
        let mut tail = rel;
        tail.push(name.clone());
        // `pub use crate::x::Y` in lib.rs is rooted; `pub use writer::Y` in a mod.rs is not.
        let rooted = file == "lib.rs" || exports_rooted(src, &file, name);
        let base = if rooted { Vec::new() } else { dir };
        return defining_file(src, exports, &base, &tail, depth + 1);
    }
    Some(file)
}

/// Whether `name`'s re-export in `file` is written from the crate root.
fn exports_rooted(src: &Path, file: &str, name: &str) -> bool {
    let code = code_of(&std::fs::read_to_string(src.join(file)).unwrap());
    code.split(';')
        .map(str::trim)
        .filter(|s| s.contains(name))
        .any(|s| s.contains("use crate::"))
}

/// For each file of the crate whose sources are in `src`, the files it names (through
/// `crate::` and `super::` paths, re-exports followed), the crate root left out.
fn names(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let rel = |p: &Path| p.strip_prefix(src).unwrap().to_string_lossy().into_owned();
    let exports: BTreeMap<String, BTreeMap<String, Vec<String>>> = files
        .iter()
        .filter(|p| p.ends_with("lib.rs") || p.ends_with("mod.rs"))
        .map(|p| {
            (
                rel(p),
                reexports(&code_of(&std::fs::read_to_string(p).unwrap())),
            )
        })
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let me = rel(p);
        if me == "lib.rs" || me == "main.rs" {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(p).unwrap());
        // `super::` in a.rs (or a/mod.rs's child) is the folder a.rs sits in.
        let mut parent: Vec<String> = me.split('/').map(String::from).collect();
        parent.pop();
        if me.ends_with("/mod.rs") {
            parent.pop();
        }
        let mut named = Vec::new();
        for segs in paths_after(&code, "crate::") {
            named.extend(defining_file(src, &exports, &[], &segs, 0));
        }
        for segs in paths_after(&code, "super::") {
            named.extend(defining_file(src, &exports, &parent, &segs, 0));
        }
        let mine = edges.entry(me.clone()).or_default();
        mine.extend(named.into_iter().filter(|to| *to != me && to != "lib.rs"));
    }
    edges
}

/// A loop of files that name each other around it, if there is one.
fn a_loop(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search with the path on the stack.
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(1) => {
                let at = stack.iter().position(|s| s == n).unwrap_or(0);
                let mut lp = stack[at..].to_vec();
                lp.push(n.to_string());
                return Some(lp);
            }
            Some(_) => return None,
            None => {}
        }
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(lp) = visit(m, edges, state, stack) {
                return Some(lp);
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut state, &mut Vec::new()))
}

#[test]
fn no_file_names_a_layer_above_it_and_no_files_name_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = names(&src);
    let wrong: Vec<String> = edges
        .iter()
        .flat_map(|(me, named)| named.iter().map(move |to| (me, to)))
        .filter_map(|(me, to)| {
            let ((a, la), (b, lb)) = (layer(me), layer(to));
            (b > a || (a == b && la != lb)).then(|| format!("{me} ({la}) names {to} ({lb})"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "imports up or across layers:\n{}",
        wrong.join("\n")
    );
    // Many files name the value types and the lower layers: the graph is not empty.
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 50,
        "{edges:?}"
    );
    if let Some(lp) = a_loop(&edges) {
        panic!("files that name each other: {}", lp.join(" -> "));
    }
}

/// Promise (issue 55): the command's crate and the Python extension's have no files
/// that name each other either, directly or around a loop.
#[test]
fn no_files_of_the_command_or_the_extension_name_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in ["tools/src", "bench/src", "python/src"] {
        let edges = names(&root.join(krate));
        assert!(
            edges.values().map(BTreeSet::len).sum::<usize>() > 10,
            "{krate}: {edges:?}"
        );
        if let Some(lp) = a_loop(&edges) {
            panic!("{krate}: files that name each other: {}", lp.join(" -> "));
        }
    }
}
