//! Promise: `replaystore-bench` (and `replaystore bench`, which runs it) prints every
//! workload's figures with median and range beside this host's floors, compares with a
//! saved run, runs W3's reader processes beside the writer, and times checkpoints and
//! a ring larger than memory; a bad request exits 2 (issues 8, 28).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::process::{Command, Output};

/// Runs `replaystore-bench` with `args` and waits for it.
fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_replaystore-bench"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run replaystore-bench: {e}"))
}

/// Its standard output and error, as text.
fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn bench_quick_prints_every_w1_workload_with_median_and_range() {
    let d = tempfile::tempdir().unwrap();
    let o = run(&[
        "--workload",
        "w1",
        "--quick",
        "--runs",
        "3",
        "--json",
        "--dir",
        d.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The figures say which build made them: the tests' build is the dev profile.
    assert_eq!(v["profile"], "dev", "{v}");
    let rows = v["results"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "W1-add1",
            "W1-addB",
            "W1-sample",
            "W1-sample unchecked",
            "W1-per",
            "W1-save 1/16",
            "W1-load 1/16",
            "W1-set_state 1/16",
            "W1-save 1/4",
            "W1-load 1/4",
            "W1-set_state 1/4",
            "W1-save full",
            "W1-load full",
            "W1-set_state full"
        ]
    );
    for r in rows {
        let (lo, med, hi) = (
            r["min"].as_f64().unwrap(),
            r["median"].as_f64().unwrap(),
            r["max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= med && med <= hi, "{r}");
        assert_eq!(r["runs"], 3);
        let unit = r["unit"].as_str().unwrap();
        let name = r["workload"].as_str().unwrap();
        let expected = match &name[3..] {
            n if n.starts_with("add") => "M items/s",
            n if n.starts_with("sample") => "k batches/s",
            "per" => "k it/s",
            _ => "ms",
        };
        assert_eq!(unit, expected, "{r}");
        // The floor beside every add, sample and prioritized figure (and only there),
        // with the figure as a percentage of it.
        if expected == "ms" {
            assert!(r["floor"].is_null() && r["of_floor_pct"].is_null(), "{r}");
        } else {
            let floor = r["floor"].as_f64().unwrap();
            assert!(floor > 0.0, "{r}");
            let pct = r["of_floor_pct"].as_f64().unwrap();
            assert!((pct - 100.0 * med / floor).abs() < 1e-6 * pct, "{r}");
        }
        assert!(r["vs_baseline"].is_null(), "{r}");
    }
    // W1 items are 165 bytes; the quick capacity is 62,500.
    let data = |i: usize| rows[i]["data_bytes"].as_u64().unwrap();
    assert_eq!(data(0), 62_500 * 165);
    assert_eq!(
        (data(5), data(8), data(11)),
        (3_906 * 165, 15_625 * 165, 62_500 * 165)
    );
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "scratch buffers removed"
    );
    let o = run(&["--workload", "w9", "--quick"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));

    // Against a saved run: each figure as how many times better than the baseline's.
    let base = d.path().join("base.json");
    std::fs::write(&base, halved_rates(&v)).unwrap();
    let again = run(&[
        "--workload",
        "w1",
        "--quick",
        "--runs",
        "1",
        "--json",
        "--baseline",
        base.to_str().unwrap(),
    ]);
    assert!(again.status.success(), "{}", text(&again));
    let w: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    for (r, b) in w["results"].as_array().unwrap().iter().zip(rows) {
        let (ours, theirs) = (r["median"].as_f64().unwrap(), b["median"].as_f64().unwrap());
        let want = if r["unit"] == "ms" {
            theirs / ours
        } else {
            2.0 * ours / theirs
        };
        assert!(
            (r["vs_baseline"].as_f64().unwrap() - want).abs() < 1e-9 * want,
            "{r} {b}"
        );
    }
    // The floors alone, as rows of the figures they bound.
    let floors = run(&[
        "--workload",
        "w1",
        "--quick",
        "--runs",
        "1",
        "--floors",
        "--json",
    ]);
    assert!(floors.status.success(), "{}", text(&floors));
    let f: serde_json::Value = serde_json::from_slice(&floors.stdout).unwrap();
    let f: Vec<(&str, &str, f64)> = (f["results"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["workload"].as_str().unwrap(),
                r["unit"].as_str().unwrap(),
                r["median"].as_f64().unwrap(),
            )
        })
        .collect();
    let names: Vec<_> = f.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        names,
        [
            ("W1-add1", "M items/s"),
            ("W1-addB", "M items/s"),
            ("W1-sample", "k batches/s"),
            ("W1-per", "k it/s")
        ]
    );
    assert!(f.iter().all(|r| r.2 > 0.0), "{f:?}");

    std::fs::write(&base, "[1, 2]").unwrap();
    let bad = run(&[
        "--workload",
        "w1",
        "--quick",
        "--baseline",
        base.to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(
        text(&bad).contains("base.json") && text(&bad).contains("results"),
        "{}",
        text(&bad)
    );
}

/// `v` with every rate halved (times left as they are): a baseline the next run beats
/// twice over, to check the ratio's direction.
fn halved_rates(v: &serde_json::Value) -> String {
    let mut v = v.clone();
    for r in v["results"].as_array_mut().unwrap() {
        if r["unit"] != "ms" {
            r["median"] = serde_json::json!(r["median"].as_f64().unwrap() / 2.0);
        }
    }
    v.to_string()
}

#[test]
fn bench_w3_runs_reader_processes_beside_the_writer() {
    let d = tempfile::tempdir().unwrap();
    let o = run(&[
        "--workload",
        "w3",
        "--quick",
        "--runs",
        "1",
        "--json",
        "--dir",
        d.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["workload"] == name)
            .unwrap_or_else(|| panic!("no row {name}: {v}"))
    };
    assert_eq!(row("W3 base sample")["unit"], "k batches/s");
    assert_eq!(row("W3 base add1")["unit"], "M items/s");
    for r in [1, 2, 4] {
        // One value per reader process.
        assert_eq!(row(&format!("W3 R={r} reader"))["runs"], r, "{v}");
        assert_eq!(row(&format!("W3 R={r} writer"))["runs"], 1, "{v}");
        for what in ["reader", "writer", "reader/base", "writer/base"] {
            let x = row(&format!("W3 R={r} {what}"))["min"].as_f64().unwrap();
            assert!(x > 0.0, "R={r} {what}: {v}");
        }
        // The reader's own memory: a batch and a handle, nothing sized by the buffer.
        let rss = row(&format!("W3 R={r} reader RSS"));
        assert_eq!(rss["unit"], "MiB anon");
        assert!(rss["max"].as_f64().unwrap() < 64.0, "{v}");
    }
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

/// `bench --workload ckpt` (issue 28): every case gives its fill, first checkpoint, lap,
/// save and restore with p99, the step after a restore, and the extra bytes; `w4` its
/// fill, the disk's random-read floor, both samplers beside it and their memory.
#[test]
fn bench_ckpt_and_w4_quick_print_their_rows() {
    let d = tempfile::tempdir().unwrap();
    let json = |workload: &str| {
        let o = run(&[
            "--workload",
            workload,
            "--quick",
            "--runs",
            "20",
            "--json",
            "--dir",
            d.path().to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["results"].as_array().unwrap().clone()
    };
    let rows = json("ckpt");
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    for case in [
        "W1-100k-uniform",
        "W1-100k-per",
        "W2-6250-uniform",
        "W2-6250-per",
    ] {
        for what in [
            "fill",
            "first",
            "lap",
            "save",
            "set_state",
            "step after",
            "extra",
        ] {
            let name = format!("{case} {what}");
            let r = rows
                .iter()
                .find(|r| r["workload"] == name.as_str())
                .unwrap_or_else(|| panic!("no row {name} in {names:?}"));
            assert!(r["median"].as_f64().unwrap() > 0.0, "{r}");
            let calls = r["runs"].as_u64().unwrap();
            if ["save", "set_state", "step after"].contains(&what) {
                assert_eq!(calls, 20, "{r}");
                assert!(
                    r["p99"].as_f64().unwrap() >= r["median"].as_f64().unwrap(),
                    "{r}"
                );
            }
        }
    }
    let rows = json("w4");
    let get = |name: &str| {
        rows.iter()
            .find(|r| r["workload"] == name)
            .unwrap_or_else(|| panic!("no row {name}"))["median"]
            .as_f64()
            .unwrap()
    };
    for name in [
        "W4 fill",
        "W4 disk random read",
        "W4 disk random read x16",
        "W4 sample 32",
        "W4 reader pread sample 32",
    ] {
        assert!(get(name) > 0.0, "{name}");
    }
    // --quick's ring fits in memory many times over, and the pread reader maps nothing.
    assert!(get("W4 memory / ring") > 1.0);
    assert!(get("W4 reader pread RSS growth") < 64.0);
}

/// `replaystore bench ARGS` is `replaystore-bench ARGS` when the two binaries sit side
/// by side, as a build of the workspace leaves them: same output, same status.
#[test]
fn the_command_runs_the_bench_binary_beside_it() {
    let cli = std::path::Path::new(env!("CARGO_BIN_EXE_replaystore-bench"))
        .with_file_name(format!("replaystore{}", std::env::consts::EXE_SUFFIX));
    assert!(
        cli.is_file(),
        "{} is not built: run the tests of the workspace (cargo test --workspace)",
        cli.display()
    );
    let o = Command::new(&cli)
        .args(["bench", "--workload", "w9", "--quick"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(text(&o), text(&run(&["--workload", "w9", "--quick"])));
}
