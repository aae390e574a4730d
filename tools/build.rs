//! Names the Cargo profile this crate is built with (`release`, `dist`, `dev`, ...) for
//! `replaystore_cli::PROFILE`, and how it was built (opt-level, LTO, target CPU and the
//! SIMD it may assume) for `replaystore_cli::BUILD`, so that benchmark figures say which
//! build made them.

use std::path::Path;

fn main() {
    let profile = profile();
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "?".into());
    let build = format!(
        "profile {profile}, opt-level {opt}, lto {}, target-cpu {}",
        lto(&profile),
        target_cpu()
    );
    println!("cargo:rustc-env=REPLAYSTORE_PROFILE={profile}");
    println!("cargo:rustc-env=REPLAYSTORE_BUILD={build}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../Cargo.toml");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
}

/// The profile's name. OUT_DIR is target/[TRIPLE/]PROFILE-DIR/build/PACKAGE-HASH/out:
/// Cargo gives build scripts no custom profile's name (PROFILE says only "release" or
/// "debug").
fn profile() -> String {
    let out = std::env::var("OUT_DIR").unwrap_or_default();
    let dir = Path::new(&out)
        .ancestors()
        .nth(3)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("unknown");
    if dir == "debug" { "dev" } else { dir }.to_string()
}

/// The profile's `lto`: an environment override (`CARGO_PROFILE_<NAME>_LTO`, which the
/// build script inherits from Cargo), else the workspace manifest's `[profile.<name>]`,
/// following `inherits`, else Cargo's default (`false`: thin LTO within the crate).
fn lto(profile: &str) -> String {
    // Built from a source package, the crate may have no workspace manifest beside it.
    let manifest = std::fs::read_to_string("../Cargo.toml").ok();
    let mut name = profile.to_string();
    for _ in 0..8 {
        let var = format!(
            "CARGO_PROFILE_{}_LTO",
            name.to_uppercase().replace('-', "_")
        );
        println!("cargo:rerun-if-env-changed={var}");
        if let Ok(v) = std::env::var(&var) {
            return v;
        }
        let Some(manifest) = &manifest else {
            return "unknown (no workspace manifest)".into();
        };
        let table = profile_table(manifest, &name);
        if let Some(v) = key(&table, "lto") {
            return v;
        }
        match key(&table, "inherits") {
            Some(parent) => name = parent,
            None if name == "bench" => name = "release".into(),
            None => break,
        }
    }
    "false".into()
}

/// The lines of `[profile.<name>]` in a manifest.
fn profile_table(manifest: &str, name: &str) -> Vec<String> {
    let header = format!("[profile.{name}]");
    manifest
        .lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::to_string)
        .collect()
}

/// The value of `key = value` in a table's lines, without a trailing comment or quotes.
fn key(table: &[String], key: &str) -> Option<String> {
    table.iter().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        let v = v.split('#').next().unwrap_or_default();
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// `-C target-cpu` from the flags Cargo passes rustc (else the target's generic CPU),
/// and the SIMD features the build may assume without checking at run time.
fn target_cpu() -> String {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let cpu = flags
        .split('\u{1f}')
        .rev()
        .find_map(|f| f.trim_start_matches("-C").strip_prefix("target-cpu="))
        .unwrap_or("generic")
        .to_string();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let simd: Vec<&str> = features
        .split(',')
        .filter(|f| {
            f.starts_with("sse")
                || f.starts_with("avx")
                || ["ssse3", "fma", "pclmulqdq", "vpclmulqdq", "neon", "aes"].contains(f)
        })
        .collect();
    format!("{cpu} ({})", simd.join(","))
}
