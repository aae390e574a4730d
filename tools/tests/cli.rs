//! Promise: the `replaystore` command's demo leaves a sound buffer (with priorities), `verify` exits 0 on a
//! sound buffer and 1 naming file and offset on a damaged one, `info --json` is JSON, and
//! errors exit 2 with a message a person can act on (issue 3).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_replaystore"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn demo_then_info_then_verify_on_its_folder() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("demo");
    let dir_s = dir.to_str().unwrap();
    let o = run(&["demo", "--dir", dir_s, "--steps", "20000"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("all byte-identical"), "{}", text(&o));
    assert!(
        text(&o).contains("same items, same next batch"),
        "{}",
        text(&o)
    );

    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).starts_with("sound"), "{}", text(&o));

    let o = run(&["info", dir_s, "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["capacity"], 10_000);
    assert_eq!(v["len"], 10_000);
    assert_eq!(v["added"], 20_000);
    assert_eq!(v["evicted"], 10_000);
    assert_eq!(v["clean"], true);
    assert_eq!(v["schema"][0]["name"], "obs");
    assert_eq!(v["schema"][0]["shape"][0], 6);
    let p = &v["priorities"];
    assert_eq!(p["arity"], 8);
    assert!(p["total"].as_f64().unwrap() > 0.0, "{p}");
    assert!(p["updates"].as_u64().unwrap() > 0, "{p}");
    let buckets = p["histogram"].as_array().unwrap();
    let counted: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(counted + p["zero"].as_u64().unwrap(), 10_000);
    let o = run(&["info", dir_s]);
    assert!(text(&o).contains("10000 / 10000 items"), "{}", text(&o));
    assert!(text(&o).contains("8-ary sum-tree"), "{}", text(&o));
    assert!(text(&o).contains(" #"), "a histogram bar: {}", text(&o));

    // Damage one parent in the priority tree: verify names priorities.tree and exits 1.
    let tree = dir.join("priorities.tree");
    let mut bytes = std::fs::read(&tree).unwrap();
    let word = 4096 + 8; // value 1 of the top node
    let good = bytes[word..word + 8].to_vec();
    bytes[word..word + 8].copy_from_slice(&7.5e9f64.to_le_bytes());
    std::fs::write(&tree, &bytes).unwrap();
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("priorities.tree @ 4104"), "{}", text(&o));
    bytes[word..word + 8].copy_from_slice(&good);
    std::fs::write(&tree, &bytes).unwrap();

    // Damage one item's bytes: verify names the file and offset, and exits 1.
    let stride = v["row_stride"].as_u64().unwrap() as usize;
    let seg = dir.join("lane-0").join("seg-00000000.dat");
    let mut bytes = std::fs::read(&seg).unwrap();
    let offset = 4096 + 77 * stride;
    bytes[offset + 20] ^= 0x40;
    std::fs::write(&seg, bytes).unwrap();
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("seg-00000000.dat") && out.contains(&format!("@ {offset}")),
        "{out}"
    );
    let o = run(&["verify", dir_s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["sound"], false);
    assert_eq!(v["problems"][0]["offset"], offset as u64);
}

#[test]
fn errors_exit_2_with_a_message() {
    let d = tempfile::tempdir().unwrap();
    let o = run(&["info", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("not a replaystore buffer"),
        "{}",
        text(&o)
    );
    let o = run(&["verify", d.path().join("missing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn snapshots_lists_shared_and_owned_bytes_and_deletes() {
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let dir_s = dir.to_str().unwrap();
    let schema = Schema::builder()
        .field("x", DType::F32, &[64])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema, 1000).segment_slots(128)).unwrap();
    let x = vec![1.0f32; 64 * 300];
    buf.add_batch(&[Column::new("x", &x).with_shape(&[300, 64])])
        .unwrap();
    buf.get_state_named("first").unwrap();
    buf.add_batch(&[Column::new("x", &x).with_shape(&[300, 64])])
        .unwrap();
    buf.get_state_named("second").unwrap();
    buf.close().unwrap();

    let o = run(&["snapshots", dir_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v["snapshots"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["name"], "first");
    assert_eq!(list[0]["len"], 300);
    assert_eq!(list[1]["len"], 600);
    // "first" owns the copy of the segment the writer stored into after it.
    assert!(
        list[0]["bytes_owned"].as_u64().unwrap() > 128 * 64 * 4,
        "{v}"
    );
    assert!(
        list[1]["bytes_shared"].as_u64().unwrap() > 600 * 64 * 4,
        "{v}"
    );
    let o = run(&["snapshots", dir_s]);
    assert!(text(&o).contains("second"), "{}", text(&o));
    let o = run(&["info", dir_s]);
    assert!(
        text(&o).contains("snapshots  2 (first, second"),
        "{}",
        text(&o)
    );
    let o = run(&["verify", dir_s]);
    assert!(text(&o).contains("(2 snapshots)"), "{}", text(&o));

    let o = run(&["snapshots", dir_s, "--keep-last", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("deleted first"), "{}", text(&o));
    let o = run(&["snapshots", dir_s, "--delete", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no snapshot \"nope\""), "{}", text(&o));
}

#[test]
fn bench_quick_prints_every_w1_workload_with_median_and_range() {
    let d = tempfile::tempdir().unwrap();
    let o = run(&[
        "bench",
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
            "sample" => "k batches/s",
            "per" => "k it/s",
            _ => "ms",
        };
        assert_eq!(unit, expected, "{r}");
    }
    // W1 items are 165 bytes; the quick capacity is 62,500.
    let data = |i: usize| rows[i]["data_bytes"].as_u64().unwrap();
    assert_eq!(data(0), 62_500 * 165);
    assert_eq!(
        (data(4), data(7), data(10)),
        (3_906 * 165, 15_625 * 165, 62_500 * 165)
    );
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "scratch buffers removed"
    );
    let o = run(&["bench", "--workload", "w9", "--quick"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn bench_w3_runs_reader_processes_beside_the_writer() {
    let d = tempfile::tempdir().unwrap();
    let o = run(&[
        "bench",
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

#[test]
fn info_shows_episode_counts_and_lengths() {
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("e");
    let schema = Schema::builder()
        .field("obs", DType::F32, &[2])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 100).whole_episodes();
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    for len in [3u64, 5, 2] {
        buf.add_reset(&[Column::new("obs", &[0f32; 2])]).unwrap();
        for t in 1..=len {
            let obs = [t as f32; 2];
            let cols = [Column::new("obs", &obs), Column::scalar("reward", &1f32)];
            buf.add_step(&cols, t == len && len != 2, false).unwrap();
        }
    }
    buf.close().unwrap();
    let o = run(&["info", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = &v["episodes"];
    assert_eq!(
        (e["count"].as_u64(), e["ended"].as_u64()),
        (Some(3), Some(2)),
        "{e}"
    );
    assert_eq!(
        (e["steps_min"].as_u64(), e["steps_max"].as_u64()),
        (Some(2), Some(5))
    );
    assert_eq!(e["mean_return"].as_f64(), Some(4.0));
    assert_eq!(v["whole_episodes"].as_bool(), Some(true));
    assert_eq!(v["fragments"].as_bool(), Some(false));
    let o = run(&["info", dir.to_str().unwrap()]);
    assert!(
        text(&o).contains("eviction   whole episodes"),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("episodes   3 (2 ended, 1 open); steps min 2 mean 3.3 max 5"),
        "{}",
        text(&o)
    );
}

#[test]
fn info_names_the_fragments_unit() {
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let schema = Schema::builder()
        .field("x", DType::F32, &[])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema, 100).fragments()).unwrap();
    buf.add_batch(&[Column::new("x", &[1f32, 2.0])]).unwrap();
    buf.close().unwrap();
    let o = run(&["info", dir.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["fragments"].as_bool(), Some(true));
    let o = run(&["info", dir.to_str().unwrap()]);
    assert!(text(&o).contains("units      fragments"), "{}", text(&o));
    assert!(run(&["verify", dir.to_str().unwrap()]).status.success());
}
