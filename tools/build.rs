//! Names the Cargo profile this crate is built with (`release`, `dist`, `dev`, ...) for
//! `replaystore_cli::PROFILE`, so that benchmark figures say which build made them.

fn main() {
    // OUT_DIR is target/[TRIPLE/]PROFILE-DIR/build/PACKAGE-HASH/out: Cargo gives build
    // scripts no custom profile's name (PROFILE says only "release" or "debug").
    let out = std::env::var("OUT_DIR").unwrap_or_default();
    let dir = std::path::Path::new(&out)
        .ancestors()
        .nth(3)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("unknown");
    let profile = if dir == "debug" { "dev" } else { dir };
    println!("cargo:rustc-env=REPLAYSTORE_PROFILE={profile}");
    println!("cargo:rerun-if-changed=build.rs");
}
