//! Promise: the `replaystore` command's demo leaves a sound buffer (with priorities),
//! `verify` exits 0 on a sound buffer and 1 naming file and offset on a damaged one,
//! `info --json` is JSON, lane sets are shown and checked lane by lane, and each kind of
//! error exits with its documented status and a message a person can act on (issues 3, 8).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::process::Command;

mod common;
use common::{run, text};

#[test]
fn demo_then_info_then_verify_on_its_folder() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("demo");
    let dir_s = dir.to_str().unwrap();
    let o = run(&["demo", "--dir", dir_s, "--steps", "20000"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("all byte-identical"), "{}", text(&o));
    // It says the capacity it chose (issue 33.9: it was silent).
    assert!(
        text(&o).contains("into a buffer of 10000 items (half the steps"),
        "{}",
        text(&o)
    );
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

/// A buffer of 1,000 items of 64 floats in `dir` (segments of 128 slots).
fn small_buffer(dir: &std::path::Path) -> replaystore::ReplayBuffer {
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    let schema = Schema::builder()
        .field("x", DType::F32, &[64])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(dir, Config::new(schema, 1000).segment_slots(128)).unwrap();
    let x = vec![1.0f32; 64 * 300];
    buf.add_batch(&[Column::new("x", &x).with_shape(&[300, 64])])
        .unwrap();
    buf
}

#[test]
fn each_kind_of_error_has_its_exit_status_and_a_message_a_person_can_act_on() {
    let d = tempfile::tempdir().unwrap();
    // 3: not a buffer (an empty folder, a missing one).
    let o = run(&["info", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("not a replaystore buffer"),
        "{}",
        text(&o)
    );
    for cmd in ["info", "verify", "snapshots", "dump", "sample"] {
        let o = run(&[cmd, d.path().join("missing").to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(3), "{cmd}: {}", text(&o));
        assert!(
            text(&o).contains("missing: no such folder"),
            "{cmd}: {}",
            text(&o)
        );
    }
    // 2: bad arguments.
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    let o = run(&["dump", "x", "--range", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // --help documents every status.
    let o = run(&["--help"]);
    for line in [
        "3  not a buffer",
        "4  written by a newer",
        "5  locked",
        "6  damaged",
        "7  disk full",
    ] {
        assert!(text(&o).contains(line), "{line}: {}", text(&o));
    }
    // Every subcommand's --help lists them.
    for cmd in [
        "info",
        "verify",
        "dump",
        "sample",
        "export",
        "import",
        "snapshots",
        "bench",
        "demo",
    ] {
        let help = text(&run(&[cmd, "--help"]));
        assert!(
            help.contains("Exit status:") && help.contains("5  locked"),
            "{cmd}: {help}"
        );
    }

    let dir = d.path().join("b");
    let dir_s = dir.to_str().unwrap();
    let buf = small_buffer(&dir);
    // A request that cannot be met is a bad argument, not "any other error".
    let o = run(&["sample", dir_s, "-n", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // 5: locked by a writer, which the message names.
    let o = run(&["snapshots", dir_s, "--keep-last", "0"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("{}", std::process::id())),
        "names the writer's pid: {}",
        text(&o)
    );
    // An option asking for what the buffer lacks is named, in the command's words
    // (issue 54.6: no Rust name alone for a Python user).
    let o = run(&["sample", dir_s, "-n", "4", "--prioritized"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("leave out --prioritized") && said.contains("alpha= in Python"),
        "{said}"
    );
    // Reading commands work beside the writer.
    assert!(run(&["dump", dir_s, "--last", "1"]).status.success());
    buf.close().unwrap();

    // 4: written by a newer format version (superblock version bumped, checksum kept
    // valid, so only the version is wrong).
    let manifest = dir.join("MANIFEST");
    let good = std::fs::read(&manifest).unwrap();
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&99u32.to_le_bytes());
    let crc_at = replaystore::internal::format::manifest::SUPERBLOCK_LEN - 4;
    let crc = crc32fast::hash(&newer[..crc_at]);
    newer[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&manifest, &newer).unwrap();
    for cmd in ["info", "dump", "sample", "verify"] {
        let o = run(&[cmd, dir_s]);
        let want = if cmd == "verify" { 1 } else { 4 };
        assert_eq!(o.status.code(), Some(want), "{cmd}: {}", text(&o));
        assert!(
            text(&o).contains("newer replaystore (format version 99)"),
            "{cmd}: {}",
            text(&o)
        );
    }

    // 6: damaged, naming the file and the check.
    let mut torn = good.clone();
    torn[40] ^= 0xff;
    std::fs::write(&manifest, &torn).unwrap();
    let o = run(&["info", dir_s]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(
        text(&o).contains("MANIFEST") && text(&o).contains("checksum mismatch"),
        "{}",
        text(&o)
    );
    std::fs::write(&manifest, &good).unwrap();
    let seg = dir.join("lane-0").join("seg-00000000.dat");
    let seg_good = std::fs::read(&seg).unwrap();
    let mut bad = seg_good.clone();
    bad[0] ^= 0xff;
    std::fs::write(&seg, &bad).unwrap();
    let o = run(&["dump", dir_s]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(
        text(&o).contains("seg-00000000.dat") && text(&o).contains("bad magic"),
        "{}",
        text(&o)
    );
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(std::fs::read(&seg).unwrap(), bad, "verify changes nothing");
    std::fs::write(&seg, &seg_good).unwrap();
    assert_eq!(run(&["verify", dir_s]).status.code(), Some(0));
}

/// 7: a full disk, on a 1 MiB tmpfs (where this machine lets the test mount one).
#[test]
fn a_full_disk_is_exit_7_for_import_and_export() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    small_buffer(&dir).close().unwrap();
    let npz = d.path().join("b.npz");
    assert!(
        run(&["export", dir.to_str().unwrap(), npz.to_str().unwrap()])
            .status
            .success()
    );
    let tiny = d.path().join("tiny");
    std::fs::create_dir(&tiny).unwrap();
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=48k",
            "tmpfs",
            tiny.to_str().unwrap(),
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!(
            "cannot mount a tmpfs here: the full-disk check is left to the unit test of fail.rs"
        );
        return;
    }
    let o = run(&[
        "import",
        npz.to_str().unwrap(),
        tiny.join("b").to_str().unwrap(),
    ]);
    let o2 = run(&[
        "export",
        dir.to_str().unwrap(),
        tiny.join("x.npz").to_str().unwrap(),
    ]);
    let left = std::fs::read_dir(&tiny).unwrap().count();
    let _ = Command::new("umount").arg(&tiny).status();
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert!(text(&o).contains("disk full"), "{}", text(&o));
    assert_eq!(o2.status.code(), Some(7), "{}", text(&o2));
    assert!(text(&o2).contains("disk full"), "{}", text(&o2));
    assert_eq!(left, 0, "nothing half-written is left");
}

#[test]
fn lane_sets_show_verify_dump_sample_and_export_lane_by_lane() {
    use replaystore::{Column, Config, DType, Lanes, Schema};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("v");
    let dir_s = dir.to_str().unwrap();
    let schema = Schema::builder()
        .field("x", DType::U32, &[])
        .build()
        .unwrap();
    let mut lanes =
        Lanes::create(&dir, Config::new(schema, 200).prioritized(0.6, 1e-6), 2).unwrap();
    for r in 0..130u32 {
        let lane = usize::from(r % 3 == 0);
        lanes.add(lane, &[Column::scalar("x", &r)]).unwrap();
    }
    lanes.close().unwrap();
    let (n1, n0) = (
        (0..130).filter(|r| r % 3 == 0).count() as u64,
        (0..130).filter(|r| r % 3 != 0).count() as u64,
    );

    let o = run(&["info", dir_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lanes"], 2);
    assert_eq!(v["capacity"], 200);
    assert_eq!(v["len"].as_u64(), Some(n0.min(100) + n1));
    assert_eq!(v["lane"][1]["first_index"].as_u64(), Some(1 << 56));
    assert_eq!(v["lane"][1]["len"].as_u64(), Some(n1));
    assert!(v["lane"][0]["priorities"]["total"].as_f64().unwrap() > 0.0);
    let o = run(&["info", dir_s]);
    assert!(
        text(&o).contains("lane set") && text(&o).contains("2 lanes of 100 items"),
        "{}",
        text(&o)
    );

    let o = run(&["verify", dir_s, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lanes"], 2);
    assert_eq!(v["items_checked"].as_u64(), Some(n0.min(100) + n1));

    // Lane 1 holds rows 0, 3, 6, ...: positions count from the lane's first index.
    let o = run(&[
        "dump", dir_s, "--lane", "1", "--range", "2..4", "--format", "csv",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let first = 1u64 << 56;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("index,x\n{},6\n{},9\n", first + 2, first + 3)
    );
    let o = run(&["dump", dir_s, "--format", "csv"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count() as u64,
        1 + n0.min(100) + n1
    );
    let o = run(&["dump", dir_s, "--lane", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no lane 2"), "{}", text(&o));

    let o = run(&[
        "sample",
        dir_s,
        "-n",
        "300",
        "--prioritized",
        "--seed",
        "3",
        "--format",
        "csv",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let lanes_seen: std::collections::BTreeSet<u64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse::<u64>().unwrap() >> 56)
        .collect();
    assert_eq!(lanes_seen.into_iter().collect::<Vec<_>>(), [0, 1]);

    let npz = d.path().join("v.npz");
    let o = run(&["export", dir_s, npz.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("exported {} items", n0.min(100) + n1)),
        "{}",
        text(&o)
    );

    // Lane folders swapped: each lane holds the other's indices.
    std::fs::rename(dir.join("lane-0"), dir.join("tmp")).unwrap();
    std::fs::rename(dir.join("lane-1"), dir.join("lane-0")).unwrap();
    std::fs::rename(dir.join("tmp"), dir.join("lane-1")).unwrap();
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("a lane folder was moved or copied"),
        "{}",
        text(&o)
    );
    // A damaged LANES file is named.
    let lanes_file = dir.join("LANES");
    let mut b = std::fs::read(&lanes_file).unwrap();
    b[20] ^= 1;
    std::fs::write(&lanes_file, b).unwrap();
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("LANES"), "{}", text(&o));
    let o = run(&["info", dir_s]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
}

#[test]
fn groups_show_verify_dump_and_export_member_by_member() {
    use replaystore::{BufferGroup, Column, Config, DType, Schema};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("g");
    let dir_s = dir.to_str().unwrap();
    let x = Schema::builder()
        .field("x", DType::U32, &[])
        .build()
        .unwrap();
    let mut group = BufferGroup::create(&dir, Some(Config::new(x, 50))).unwrap();
    for r in 0..30u32 {
        group
            .add(
                ["red", "blue"][(r % 2) as usize],
                &[Column::scalar("x", &r)],
            )
            .unwrap();
    }
    let text_schema = Schema::builder()
        .variable("say", replaystore::VarKind::Str, None)
        .build()
        .unwrap();
    let critic = group
        .add_member("critic", Some(Config::new(text_schema, 8)))
        .unwrap();
    critic.add(&[Column::text("say", "hello")]).unwrap();
    group.close().unwrap();

    let o = run(&["info", dir_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = (v["members"].as_array().unwrap().iter())
        .map(|m| m["member"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["red", "blue", "critic"]);
    assert_eq!(v["members"][1]["len"].as_u64(), Some(15));
    assert_eq!(v["members"][2]["first_index"].as_u64(), Some(2 << 56));
    let o = run(&["info", dir_s]);
    assert!(
        text(&o).contains("group") && text(&o).contains("critic"),
        "{}",
        text(&o)
    );

    let o = run(&["verify", dir_s, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["members"], serde_json::json!(["red", "blue", "critic"]));
    assert_eq!(v["items_checked"].as_u64(), Some(31));

    let o = run(&[
        "dump", dir_s, "--member", "blue", "--range", "0..2", "--format", "csv",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let first = 1u64 << 56;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("index,x\n{first},1\n{},3\n", first + 1)
    );
    let o = run(&["dump", dir_s, "--member", "critic", "--format", "jsonl"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("hello"),
        "{}",
        text(&o)
    );
    // A group is read one member at a time, named.
    let o = run(&["dump", dir_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("critic"), "{}", text(&o));
    let o = run(&["dump", dir_s, "--member", "green"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("green"), "{}", text(&o));
    let o = run(&[
        "sample", dir_s, "--member", "blue", "-n", "20", "--format", "csv",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let odd = String::from_utf8_lossy(&o.stdout)
        .lines()
        .skip(1)
        .all(|l| l.split(',').nth(1).unwrap().parse::<u32>().unwrap() % 2 == 1);
    assert!(odd, "{}", text(&o));
    let o = run(&["sample", dir_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let npz = d.path().join("red.npz");
    let o = run(&["export", dir_s, npz.to_str().unwrap(), "--member", "red"]);
    assert!(text(&o).contains("exported 15 items"), "{}", text(&o));

    // A member folder GROUP does not list: a note, not damage.
    std::fs::create_dir(dir.join("lane-9")).unwrap();
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("GROUP does not list"), "{}", text(&o));
    std::fs::remove_dir(dir.join("lane-9")).unwrap();
    // A damaged GROUP file is named.
    let file = dir.join("GROUP");
    let mut b = std::fs::read(&file).unwrap();
    b[20] ^= 1;
    std::fs::write(&file, b).unwrap();
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("GROUP"), "{}", text(&o));
}

#[test]
fn verify_deep_reads_the_items_snapshots_alone_hold() {
    use replaystore::Column;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let dir_s = dir.to_str().unwrap();
    let mut buf = small_buffer(&dir);
    buf.get_state_named("first").unwrap();
    // The writer copies segment 0 before storing into it: "first" alone keeps the old one.
    let x = vec![2.0f32; 64 * 800];
    buf.add_batch(&[Column::new("x", &x).with_shape(&[800, 64])])
        .unwrap();
    buf.close().unwrap();
    let o = run(&["info", dir_s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stride = v["row_stride"].as_u64().unwrap() as usize;
    let seg = dir.join("snapshots/first/lane-0/seg-00000000.dat");
    let mut bytes = std::fs::read(&seg).unwrap();
    let offset = 4096 + 5 * stride;
    bytes[offset + 20] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(0), "headers only: {}", text(&o));
    let o = run(&["verify", dir_s, "--deep"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("first/lane-0/seg-00000000.dat @ {offset}")),
        "{}",
        text(&o)
    );
}

#[test]
fn snapshots_lists_shared_and_owned_bytes_and_deletes() {
    use replaystore::Column;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let dir_s = dir.to_str().unwrap();
    let mut buf = small_buffer(&dir);
    let x = vec![1.0f32; 64 * 300];
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
    assert!(
        text(&o).contains("600 items checked (2 snapshots: headers; --deep checks their items)"),
        "{}",
        text(&o)
    );
    let o = run(&["verify", dir_s, "--deep"]);
    assert!(
        text(&o).contains("1500 items checked (2 snapshots)"),
        "{}",
        text(&o)
    );

    let o = run(&["snapshots", dir_s, "--keep-last", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("deleted first"), "{}", text(&o));
    let o = run(&["snapshots", dir_s, "--delete", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no snapshot \"nope\""), "{}", text(&o));
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

#[test]
fn export_never_replaces_a_fifo_link_or_folder_and_snapshot_commands_never_leave_the_buffer() {
    use std::os::unix::fs::{FileTypeExt, symlink};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let dir_s = dir.to_str().unwrap();
    let mut buf = small_buffer(&dir);
    buf.get_state_named("first").unwrap();
    buf.close().unwrap();

    // export: an existing FIFO, link or folder at OUT is refused (exit 2), left as it was.
    let fifo = d.path().join("out.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let decoy = d.path().join("decoy.txt");
    std::fs::write(&decoy, b"keep me").unwrap();
    let link = d.path().join("out-link.npz");
    symlink(&decoy, &link).unwrap();
    let folder = d.path().join("out-dir.npz");
    std::fs::create_dir(&folder).unwrap();
    for (out, what) in [
        (&fifo, "named pipe"),
        (&link, "symbolic link"),
        (&folder, "directory"),
    ] {
        let o = run(&["export", dir_s, out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(what), "{}", text(&o));
    }
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(folder.is_dir());
    assert_eq!(std::fs::read(&decoy).unwrap(), b"keep me");

    // snapshots: a link in snapshots/ and a folder of someone's are never deleted.
    let outside = d.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("thesis.tex"), b"five years").unwrap();
    symlink(&outside, dir.join("snapshots/evil")).unwrap();
    std::fs::create_dir(dir.join("snapshots/stranger")).unwrap();
    let o = run(&["snapshots", dir_s, "--delete", "evil"]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(text(&o).contains("symbolic link"), "{}", text(&o));
    let o = run(&["snapshots", dir_s, "--keep-last", "0"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read(outside.join("thesis.tex")).unwrap(),
        b"five years"
    );
    assert!(dir.join("snapshots/stranger").is_dir());
    assert!(!dir.join("snapshots/first").exists());

    // sample: a size no memory holds is a bad argument (exit 2), not a panic or abort.
    for n in [
        "35184372088832",
        "9223372036854775808",
        "18446744073709551615",
    ] {
        let o = run(&["sample", dir_s, "-n", n]);
        assert_eq!(o.status.code(), Some(2), "-n {n}: {}", text(&o));
        assert!(text(&o).contains("rows"), "{}", text(&o));
    }
}

/// Issue 29: `info` shows variable-length fields (kind and maximum), the format version
/// 2 and the chunk segments; `verify` checks the values; `dump` and `sample` print them
/// (text readably, cut in a table unless `--full`; whole in JSON lines and CSV);
/// `export`, which writes `.npz`, refuses them by name.
#[test]
fn info_verify_and_dump_show_variable_length_fields() {
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema, VarKind};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("v");
    let dir_s = dir.to_str().unwrap();
    let schema = Schema::builder()
        .field("r", DType::F32, &[])
        .variable("obs", VarKind::Str, None)
        .variable("tokens", VarKind::Ragged(DType::I32), Some(64))
        .variable("blob", VarKind::Bytes, None)
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema, 10)).unwrap();
    let long = format!("line one\n\"quoted\" {}", "x".repeat(300));
    buf.add(&[
        Column::scalar("r", &1.0f32),
        Column::text("obs", &long),
        Column::ragged("tokens", &[1i32, -2, 3, 4, 5]),
        Column::value("blob", &[0xde, 0xad]),
    ])
    .unwrap();
    buf.close().unwrap();
    let o = run(&["info", dir_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format_version"], 2);
    assert_eq!(v["schema"][2]["name"], "tokens");
    assert_eq!(v["schema"][2]["dtype"], "i32[]");
    assert_eq!(v["schema"][2]["max_len"], 64);
    let o = run(&["info", dir_s]);
    assert!(
        text(&o).contains("obs              str   variable length"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("chunk segments"), "{}", text(&o));
    let o = run(&["verify", dir_s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A table cuts the text and the array, and shows line breaks as \n.
    let o = run(&["dump", dir_s]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("line one\\n\"quoted\""), "{t}");
    assert!(
        t.contains("(318 in all)") && !t.contains(&"x".repeat(250)),
        "{t}"
    );
    assert!(
        t.contains("[1, -2, 3, … 5 values]") && t.contains("dead"),
        "{t}"
    );
    let o = run(&["dump", dir_s, "--full"]);
    assert!(text(&o).contains(&"x".repeat(300)) && text(&o).contains("[1, -2, 3, 4, 5]"));
    // JSON lines hold the whole values.
    let o = run(&["dump", dir_s, "--format", "jsonl"]);
    let row: serde_json::Value = serde_json::from_str(text(&o).lines().next().unwrap()).unwrap();
    assert_eq!(row["obs"], long.as_str());
    assert_eq!(row["tokens"], serde_json::json!([1, -2, 3, 4, 5]));
    assert_eq!(row["blob"], "dead");
    let o = run(&[
        "sample", dir_s, "-n", "2", "--fields", "obs", "--format", "jsonl",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).lines().all(|l| l.contains("line one")),
        "{}",
        text(&o)
    );
    let out = d.path().join("x.npz");
    let o = run(&["export", dir_s, out.to_str().unwrap()]);
    assert!(
        !o.status.success() && text(&o).contains("variable-length"),
        "{}",
        text(&o)
    );
    let o = run(&["export", dir_s, out.to_str().unwrap(), "--fields", "r"]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn info_gives_the_length_statistics_of_the_live_values_only() {
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema, VarKind};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("v");
    let dir_s = dir.to_str().unwrap();
    let schema = Schema::builder()
        .variable("obs", VarKind::Str, None)
        .variable("tokens", VarKind::Ragged(DType::I32), None)
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema, 50)).unwrap();
    // Item k has k tokens and 2k bytes of text; the first 50 are evicted.
    for k in 1..=100usize {
        let tokens: Vec<i32> = (0..k as i32).collect();
        buf.add(&[
            Column::text("obs", &"ab".repeat(k)),
            Column::ragged("tokens", &tokens),
        ])
        .unwrap();
    }
    buf.close().unwrap();
    let o = run(&["info", dir_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tokens = &v["values"]["fields"][1];
    assert_eq!(tokens["name"], "tokens");
    assert_eq!(tokens["unit"], "elements");
    // Live lengths 51..=100: nearest-rank median is the 25th, p99 the 50th.
    let stats = [
        &tokens["min"],
        &tokens["median"],
        &tokens["p99"],
        &tokens["max"],
    ];
    assert_eq!(stats.map(|s| s.as_u64().unwrap()), [51, 75, 100, 100]);
    assert_eq!(tokens["bytes"], 4 * (51..=100).sum::<u64>());
    let obs = &v["values"]["fields"][0];
    assert_eq!(
        (obs["unit"].as_str(), obs["max"].as_u64()),
        (Some("bytes"), Some(200))
    );
    let used = v["values"]["chunk_bytes_used"].as_u64().unwrap();
    assert!(used >= 6 * (51..=100).sum::<u64>(), "{used}");
    // Live data: the two 16-byte slots of each row and the values' bytes.
    assert_eq!(
        v["data_bytes"].as_u64().unwrap(),
        6 * (51..=100).sum::<u64>() + 50 * 32
    );
    let o = run(&["info", dir_s]);
    let t = text(&o);
    assert!(
        t.contains("tokens           elements min 51  median 75  p99 100  max 100"),
        "{t}"
    );
}

#[test]
fn info_counts_removed_and_live_items_and_each_group_of_a_key() {
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema, VarKind};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("g");
    let dir_s = dir.to_str().unwrap();
    let schema = Schema::builder()
        .field("pid", DType::I8, &[])
        .variable("env_id", VarKind::Str, None)
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema, 100).max_use(3)).unwrap();
    for k in 0..30i8 {
        let env = if k < 20 { "chess" } else { "go" };
        buf.add(&[Column::scalar("pid", &(k % 2)), Column::text("env_id", env)])
            .unwrap();
    }
    buf.remove(&[0, 1, 2, 25]).unwrap();
    buf.close().unwrap();
    let o = run(&["info", dir_s, "--json", "--by", "env_id,pid"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format_version"], 3);
    assert_eq!(
        (v["len"].as_u64(), v["items"]["removed"].as_u64()),
        (Some(26), Some(4))
    );
    assert_eq!(v["items"]["removals"]["explicit"], 4);
    assert_eq!(v["items"]["max_use"], 3);
    assert_eq!(v["items"]["policy"], "fifo");
    let groups = v["groups"]["groups"].as_array().unwrap();
    let find = |env: &str, pid: &str| {
        groups
            .iter()
            .find(|g| g["key"][0] == env && g["key"][1] == pid)
            .map(|g| (g["live"].as_u64().unwrap(), g["removed"].as_u64().unwrap()))
    };
    // chess: 0..20 (pid k % 2), 0, 1, 2 removed; go: 20..30, 25 removed.
    assert_eq!(find("chess", "0"), Some((8, 2)));
    assert_eq!(find("chess", "1"), Some((9, 1)));
    assert_eq!(find("go", "0"), Some((5, 0)));
    assert_eq!(find("go", "1"), Some((4, 1)));
    let o = run(&["info", dir_s, "--by", "env_id"]);
    let out = text(&o);
    assert!(out.contains("items      26 live, 4 removed"), "{out}");
    assert!(out.contains("groups     by env_id (2 groups"), "{out}");
    let o = run(&["info", dir_s, "--by", "nope"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("nope"), "{}", text(&o));
}

/// Promise: a reader that closes the pipe early (`replaystore info X | head -1`) ends
/// every command quietly with status 0: no panic, no "Broken pipe" message.
#[test]
fn a_closed_output_pipe_ends_every_command_quietly() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let mut buf = small_buffer(&dir);
    for k in 0..3 {
        buf.get_state_named(&format!("s{k}")).unwrap();
    }
    buf.close().unwrap();
    let dir = dir.to_str().unwrap();
    for args in [
        vec!["info", dir],
        vec!["info", dir, "--json"],
        vec!["snapshots", dir],
        vec!["verify", dir],
        vec!["dump", dir],
        vec!["sample", dir, "--num", "500"],
        vec!["sample", dir, "-n", "500"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_replaystore"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before the command writes a line.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o));
    }
}

/// Promise: `info` on a buffer its writer is filling counts what `verify` and `sample`
/// see: the items added since the last commit too (the live progress page).
#[test]
fn info_of_a_buffer_being_written_counts_its_uncommitted_items() {
    use replaystore::Column;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let mut buf = small_buffer(&dir);
    buf.flush().unwrap();
    let x = vec![2.0f32; 64 * 200];
    buf.add_batch(&[Column::new("x", &x).with_shape(&[200, 64])])
        .unwrap();
    let o = run(&["info", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let fill = text(&o)
        .lines()
        .find(|l| l.starts_with("fill"))
        .unwrap_or_default()
        .to_owned();
    assert!(fill.contains("500 / 1000"), "{fill}\n{}", text(&o));
    let o = run(&["info", dir.to_str().unwrap(), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["added"], 500, "{json}");
    drop(buf);
}

/// Promise (issue 33.9): nothing a user of the repository reads points at a file it
/// does not have (the design notes outside it), and the workloads quoted are defined
/// inside it.
#[test]
fn the_documents_and_help_name_only_files_in_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let outside = ["../shared", "LIMITS.md", "DESIGN.md", "STYLE.md"];
    let mut files = vec![root.join("README.md")];
    for dir in [
        "docs",
        "docs/design",
        "docs/decisions",
        "src",
        "tools/src",
        "bench/src",
        "python/replaystore",
        "python/src",
    ] {
        for e in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let p = e.path();
            if p.is_file() {
                files.push(p);
            }
        }
    }
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for o in outside {
            assert!(!text.contains(o), "{} names {o}", f.display());
        }
    }
    let help = text(&run(&["bench", "--help"]));
    assert!(help.contains("docs/WORKLOADS.md"), "{help}");
    let workloads = std::fs::read_to_string(root.join("docs/WORKLOADS.md")).unwrap();
    for w in ["W1", "W2", "W3", "W4", "W5", "W6", "W7"] {
        assert!(
            workloads.contains(&format!("## {w} ")),
            "{w} is not defined"
        );
    }
}

/// Promise: `dump` refuses a stored text value that is not UTF-8 (its checksums made to
/// hold, as a crafted file would) as damage, exit 6, naming the item and field, rather
/// than printing U+FFFD with exit 0.
#[test]
fn dump_refuses_a_crafted_text_value_as_damage() {
    use replaystore::internal::format::row::item_crc;
    use replaystore::{Column, Config, DType, ReplayBuffer, Schema, VarKind};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let schema = Schema::builder()
        .field("x", DType::I64, &[])
        .variable("t", VarKind::Str, None)
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema, 8).heap_bytes(1 << 16)).unwrap();
    buf.add(&[Column::scalar("x", &0i64), Column::text("t", "hello")])
        .unwrap();
    buf.close().unwrap();
    // Chunk 0 of the chunk ring: its row at 4096, payload from 16 (1008 bytes), crc at 8.
    let heap = replaystore::internal::storage::heap_segment_path(&dir, 0);
    let mut bytes = std::fs::read(&heap).unwrap();
    let (row, payload) = (4096, 1008);
    let crc = |b: &[u8]| item_crc(0, &b[row + 16..row + 16 + payload]);
    assert_eq!(crc(&bytes).to_le_bytes(), bytes[row + 8..row + 12]);
    bytes[row + 16] = 0xff;
    let fixed = crc(&bytes).to_le_bytes();
    bytes[row + 8..row + 12].copy_from_slice(&fixed);
    std::fs::write(&heap, &bytes).unwrap();
    let o = run(&["dump", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("item 0") && said.contains("\"t\"") && said.contains("UTF-8"),
        "{said}"
    );
}

/// Promise: `snapshots` of a group lists the group's checkpoints (held by every
/// member), items summed over the members, and deletes one from every member; it used
/// to say "not a buffer" (exit 3).
#[test]
fn snapshots_of_a_group_lists_and_deletes_its_checkpoints() {
    use replaystore::{BufferGroup, Column, Config, DType, Schema};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("g");
    let dir_s = dir.to_str().unwrap();
    let schema = Schema::builder()
        .field("x", DType::U32, &[])
        .build()
        .unwrap();
    let mut g = BufferGroup::create(&dir, Some(Config::new(schema, 32))).unwrap();
    for k in 0..3u32 {
        g.add("a", &[Column::scalar("x", &k)]).unwrap();
    }
    g.add("b", &[Column::scalar("x", &9u32)]).unwrap();
    g.get_state_named("one").unwrap();
    g.add("b", &[Column::scalar("x", &10u32)]).unwrap();
    g.get_state_named("two").unwrap();
    drop(g);
    let o = run(&["snapshots", dir_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v["snapshots"].as_array().unwrap();
    let named: Vec<(&str, u64)> = list
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["len"].as_u64().unwrap()))
        .collect();
    assert_eq!(named, [("one", 4), ("two", 5)]);
    let o = run(&["snapshots", dir_s, "--delete", "one"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("deleted one"), "{}", text(&o));
    for lane in ["lane-0", "lane-1"] {
        assert!(!dir.join(lane).join("snapshots/one").exists());
        assert!(dir.join(lane).join("snapshots/two").exists());
    }
}

/// The command users install has no benchmark workloads: `bench` there says where they
/// are (status 2) instead of running anything.
#[test]
fn bench_without_the_bench_binary_beside_it_says_where_the_workloads_are() {
    let d = tempfile::tempdir().unwrap();
    let alone = d.path().join("replaystore");
    std::fs::copy(env!("CARGO_BIN_EXE_replaystore"), &alone).unwrap();
    let o = Command::new(&alone)
        .args(["bench", "--workload", "w1", "--quick"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("cargo run --release -p replaystore-bench"),
        "{}",
        text(&o)
    );
}
