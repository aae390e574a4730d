//! docs/ARCHITECTURE.md is a map of the code as it is: every path it names exists, every
//! Rust item and Python class it names is defined somewhere in the repository, and it
//! names every top-level folder of the repository and of `src/`. A file moved or an item
//! renamed without the map fails here.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "a test over the repository's own files fails loudly"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Names the map uses that belong to Rust's standard library or to the libraries the
/// package replaces or plugs into: nothing of ours defines them.
const ELSEWHERE: &[&str] = &["DataLoader", "DequeBuffer", "Option", "TensorDict"];

/// Folders of a checkout that are not the project's (build output, tool caches).
const NOT_OURS: &[&str] = &[
    "target",
    ".git",
    ".hypothesis",
    ".pytest_cache",
    "__pycache__",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every span between backticks, outside fenced blocks.
fn quoted(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), _) = (parts.next(), parts.next()) {
            out.push(inside.to_string());
        }
    }
    out
}

/// A repository path the map names: a token with a slash or a source file's extension,
/// of path characters only. Files of a buffer's folder (`lane-0/progress`,
/// `snapshots/<name>/`, `seg-*.dat`) are not the repository's.
fn is_repo_path(t: &str) -> bool {
    let chars = t
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
    let looks = t.contains('/')
        || [".rs", ".py", ".toml", ".md", ".sh"]
            .iter()
            .any(|x| t.ends_with(x));
    let buffer_file = t.starts_with("lane-") || t.starts_with("snapshots/");
    // A template (`parts/NAME.rs`, `test_<lib>_differential.py`) names no one file.
    let template = t.contains("NAME") || t.contains('<');
    // Build output and the caches under `target/` are not in a checkout.
    let built = t.starts_with("target/");
    chars && looks && !buffer_file && !template && !built
}

/// Every file and folder of the repository, relative to its root (`/`-separated).
fn repo_paths() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if NOT_OURS.contains(&name.as_str()) || name == "corpus" || name == "artifacts" {
                continue;
            }
            out.push(
                p.strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/"),
            );
            if p.is_dir() {
                walk(&p, base, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &root(), &mut out);
    out
}

/// Whether a path the map names is a file or folder of the repository: named from the
/// root, or by its tail (`store/add.rs`, `lanes/group`, `add.rs` in a list of one
/// folder's files), a module's file with or without its extension.
fn exists(t: &str, paths: &[String]) -> bool {
    let t = t.trim_start_matches("./").trim_end_matches('/');
    paths.iter().any(|p| {
        [String::new(), ".rs".to_string(), ".py".to_string()]
            .iter()
            .any(|ext| p == &format!("{t}{ext}") || p.ends_with(&format!("/{t}{ext}")))
    })
}

/// The names the sources define: Rust items and enum variants, Python classes,
/// functions and constants, PyO3 classes' Python names.
fn definitions(sources: &[String]) -> BTreeSet<String> {
    const KEYWORDS: [&str; 10] = [
        "struct", "enum", "trait", "type", "fn", "mod", "const", "static", "class", "def",
    ];
    let mut out = BTreeSet::new();
    for line in sources.iter().flat_map(|s| s.lines()) {
        let l = line.trim_start();
        let words: Vec<&str> = l
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        for w in words.windows(2) {
            if KEYWORDS.contains(&w[0]) {
                out.insert(w[1].to_string());
            }
        }
        // An enum variant or a Python assignment: the line's first word.
        if let Some(first) = words.first()
            && l.starts_with(first)
            && (l.ends_with(',') || l.ends_with('{') || l.contains(" = ") || l.contains('('))
        {
            out.insert((*first).to_string());
        }
        if let Some(i) = l.find("name = \"") {
            let rest = &l[i + 8..];
            out.insert(rest[..rest.find('"').unwrap_or(0)].to_string());
        }
    }
    out
}

/// Rust paths (`draw::sample_rows`, `Request::check`, `Pick::Uniform`) and bare type or
/// class names (`ReplayBuffer`, `NumpySink`): each identifier must be defined.
fn names_in(t: &str) -> Vec<String> {
    let t = t.trim_end_matches("()").trim_end_matches("!");
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.chars().next().unwrap().is_ascii_digit()
    };
    if t.contains("::") {
        let segs: Vec<&str> = t.split("::").collect();
        if segs.iter().all(|s| ident(s)) {
            return segs
                .into_iter()
                .filter(|s| !["crate", "super", "self", "replaystore", "std"].contains(s))
                .map(String::from)
                .collect();
        }
        return Vec::new();
    }
    let camel = t.len() > 2
        && ident(t)
        && t.starts_with(|c: char| c.is_ascii_uppercase())
        && t.chars().any(|c| c.is_ascii_lowercase());
    if camel {
        vec![t.to_string()]
    } else {
        Vec::new()
    }
}

fn map() -> String {
    std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap()
}

#[test]
fn every_path_the_map_names_exists() {
    let paths = repo_paths();
    let missing: BTreeSet<String> = quoted(&map())
        .into_iter()
        .filter(|t| is_repo_path(t) && !exists(t, &paths))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_item_and_class_the_map_names_is_defined() {
    // Every Rust and Python source of the repository; a module is its file too
    // (`crash_kill::...` names `tests/crash_kill.rs`).
    let files: Vec<String> = repo_paths()
        .into_iter()
        .filter(|p| p.ends_with(".rs") || p.ends_with(".py"))
        .collect();
    let mut sources: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(root().join(f)).unwrap())
        .collect();
    sources.extend(files.iter().map(|f| {
        let stem = Path::new(f).file_stem().unwrap().to_string_lossy();
        format!("mod {stem};")
    }));
    let defined = definitions(&sources);
    let undefined: BTreeSet<String> = quoted(&map())
        .iter()
        .flat_map(|t| names_in(t))
        .filter(|n| !ELSEWHERE.contains(&n.as_str()) && !defined.contains(n))
        .collect();
    assert!(
        undefined.is_empty(),
        "docs/ARCHITECTURE.md names items nothing defines: {undefined:?}"
    );
}

#[test]
fn the_map_names_every_top_level_folder_and_every_layer() {
    let r = root();
    let text = map();
    let named: BTreeSet<String> = quoted(&text)
        .into_iter()
        .map(|t| t.trim_end_matches('/').to_string())
        .collect();
    let folders = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
            .filter(|n| !NOT_OURS.contains(&n.as_str()))
            .collect()
    };
    let mut unnamed = Vec::new();
    for f in folders(&r) {
        if !named.contains(&f) {
            unnamed.push(f);
        }
    }
    for f in folders(&r.join("src")) {
        if !named.contains(&f) && !named.contains(&format!("src/{f}")) {
            unnamed.push(format!("src/{f}"));
        }
    }
    assert!(
        unnamed.is_empty(),
        "docs/ARCHITECTURE.md does not name these folders: {unnamed:?}"
    );
}

/// The checks above catch what they are for: a path, an item and a folder that are not
/// there.
#[test]
fn the_checks_catch_a_missing_path_item_and_folder() {
    let paths = repo_paths();
    assert!(is_repo_path("src/draw/rows.rs") && exists("src/draw/rows.rs", &paths));
    assert!(is_repo_path("draw/rows.rs") && exists("draw/rows.rs", &paths));
    assert!(exists("lanes/group", &paths) && exists("docs/decisions/", &paths));
    assert!(!exists("src/handle/rows.rs", &paths) && !exists("handle/rows.rs", &paths));
    assert!(!is_repo_path("lane-0/progress") && !is_repo_path("parts/NAME.rs"));
    let sources = vec!["pub(crate) struct Rows {\n    Uniform,\n}\n".to_string()];
    let defined = definitions(&sources);
    assert!(defined.contains("Rows") && defined.contains("Uniform"));
    assert!(!defined.contains("Gone"));
    assert_eq!(names_in("draw::sample_rows"), ["draw", "sample_rows"]);
    assert_eq!(names_in("Request::check"), ["Request", "check"]);
    assert!(names_in("sample(request)").is_empty());
}
