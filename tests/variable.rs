//! Promise: items with variable-length fields (`str`, `bytes`, ragged arrays) come back
//! exactly as added, by `get` and by `sample`, after a flush and a reopen, after a kill
//! (`abandon`), and after the chunk ring laps: the oldest items are evicted when their
//! values' chunks are needed, never served with another item's bytes. Bad values are
//! refused with nothing stored.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::path::Path;

use replaystore::{Column, Config, DType, Error, ReplayBuffer, Request, Schema, VarKind};

fn schema() -> Schema {
    Schema::builder()
        .field("reward", DType::F32, &[])
        .variable("obs", VarKind::Str, Some(4000))
        .variable("tokens", VarKind::Ragged(DType::I32), Some(600))
        .variable("info", VarKind::Bytes, None)
        .build()
        .unwrap()
}

/// The values of item `i`: lengths and bytes a pure function of the index.
fn obs(i: u64) -> String {
    let n = (i * 37 % 1500) as usize;
    (0..n)
        .map(|k| (b'a' + ((i as usize + k) % 26) as u8) as char)
        .collect()
}
fn tokens(i: u64) -> Vec<i32> {
    (0..(i * 13 % 300) as i32)
        .map(|k| k * 7 + i as i32)
        .collect()
}
fn info(i: u64) -> Vec<u8> {
    // Every fifth item has an empty value.
    if i.is_multiple_of(5) {
        Vec::new()
    } else {
        format!("{{\"i\": {i}}}").into_bytes()
    }
}

fn add_one(buf: &mut ReplayBuffer, i: u64) -> u64 {
    let (o, t, f, r) = (obs(i), tokens(i), info(i), i as f32);
    buf.add(&[
        Column::scalar("reward", &r),
        Column::text("obs", &o),
        Column::ragged("tokens", &t),
        Column::value("info", &f),
    ])
    .unwrap()
}

/// The items `ids` as batch columns: each one's reward (its id) and values.
struct Items {
    rewards: Vec<f32>,
    values: [(Vec<u8>, Vec<u64>); 3],
}

impl Items {
    fn new(ids: impl Iterator<Item = u64>) -> Items {
        let mut values: [(Vec<u8>, Vec<u64>); 3] = Default::default();
        values.iter_mut().for_each(|v| v.1.push(0));
        let mut rewards = Vec::new();
        for i in ids {
            rewards.push(i as f32);
            let t = tokens(i);
            let parts = [
                obs(i).into_bytes(),
                bytemuck::cast_slice(&t).to_vec(),
                info(i),
            ];
            for ((bytes, offsets), part) in values.iter_mut().zip(parts) {
                bytes.extend_from_slice(&part);
                offsets.push(bytes.len() as u64);
            }
        }
        Items { rewards, values }
    }

    fn columns(&self) -> [Column<'_>; 4] {
        let [o, t, f] = &self.values;
        [
            Column::new("reward", &self.rewards),
            Column::values("obs", DType::U8, &o.0, &o.1),
            Column::values("tokens", DType::I32, &t.0, &t.1),
            Column::values("info", DType::U8, &f.0, &f.1),
        ]
    }
}

fn add_batch(buf: &mut ReplayBuffer, from: u64, n: u64) -> std::ops::Range<u64> {
    buf.add_batch(&Items::new(from..from + n).columns())
        .unwrap()
}

/// Checks that item `index` of `batch` row `r` is the item added as `index`.
fn check(batch: &replaystore::Batch, r: usize, index: u64) {
    let reward = batch.get::<f32>("reward").unwrap()[r];
    assert_eq!(reward, index as f32, "row {r}");
    assert_eq!(batch.text("obs", r).unwrap(), obs(index), "obs of {index}");
    let t = batch.values("tokens").unwrap().elements::<i32>(r).unwrap();
    assert_eq!(t, tokens(index).as_slice(), "tokens of {index}");
    assert_eq!(
        batch.values("info").unwrap().value(r).unwrap(),
        info(index).as_slice()
    );
}

/// A schema of one `str` field and nothing else.
fn text_only() -> Schema {
    Schema::builder()
        .variable("text", VarKind::Str, None)
        .build()
        .unwrap()
}

fn check_all<R: replaystore::Role>(buf: &ReplayBuffer<R>) {
    let live: Vec<u64> = (buf.stats().head..buf.stats().tail).collect();
    let batch = buf.get_many(&live).unwrap();
    for (r, &i) in live.iter().enumerate() {
        check(&batch, r, i);
    }
}

#[test]
fn values_come_back_exactly_by_get_and_sample_and_after_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf =
        ReplayBuffer::create(&dir, Config::new(schema(), 100).heap_bytes(1 << 20)).unwrap();
    for i in 0..10 {
        assert_eq!(add_one(&mut buf, i), i);
    }
    assert_eq!(add_batch(&mut buf, 10, 30), 10..40);
    check_all(&buf);
    let mut batch = replaystore::Batch::default();
    buf.sample_into(Request::rows(64), &mut batch).unwrap();
    for (r, &i) in batch.indices().to_vec().iter().enumerate() {
        check(&batch, r, i);
    }
    buf.close().unwrap();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    check_all(&buf);
    // The next call's values go after the reopened ones.
    add_batch(&mut buf, 40, 5);
    add_one(&mut buf, 45);
    check_all(&buf);
}

#[test]
fn a_killed_writer_keeps_every_acknowledged_value_and_goes_on_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf =
        ReplayBuffer::create(&dir, Config::new(schema(), 64).heap_bytes(1 << 20)).unwrap();
    add_batch(&mut buf, 0, 20);
    buf.flush().unwrap();
    add_batch(&mut buf, 20, 7);
    add_one(&mut buf, 27);
    buf.abandon();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(buf.stats().tail, 28);
    check_all(&buf);
    add_one(&mut buf, 28);
    add_batch(&mut buf, 29, 3);
    check_all(&buf);
}

#[test]
fn when_the_chunk_ring_laps_the_oldest_items_go_first_and_none_is_served_mixed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    // 64 chunks of 1008 bytes: far fewer values than the 1,000 slots would hold.
    let config = Config::new(schema(), 1000)
        .heap_bytes(64 * 1024)
        .evict_for_room();
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    let mut next = 0;
    for round in 0..40 {
        if round % 3 == 0 {
            add_one(&mut buf, next);
            next += 1;
        } else {
            add_batch(&mut buf, next, 4);
            next += 4;
        }
        let s = buf.stats();
        assert_eq!(s.tail, next);
        assert!(s.len > 0 && s.len < 100, "{s:?}");
        check_all(&buf);
        if round == 20 {
            buf.flush().unwrap();
        }
    }
    assert!(buf.stats().evicted > 0);
    buf.close().unwrap();
    let buf = ReplayBuffer::open(&dir).unwrap();
    check_all(&buf);
}

#[test]
fn bad_values_are_refused_with_nothing_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf =
        ReplayBuffer::create(&dir, Config::new(schema(), 10).heap_bytes(1 << 20)).unwrap();
    add_one(&mut buf, 0);
    let r = 1.0f32;
    let long: Vec<i32> = vec![1; 601];
    let e = buf
        .add(&[
            Column::scalar("reward", &r),
            Column::text("obs", "ok"),
            Column::ragged("tokens", &long),
            Column::value("info", b""),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::ValueTooLong { field, len: 601, max: 600, .. } if field == "tokens"),
        "{e}"
    );
    let bad = [b'o', b'k', 0xff];
    let e = buf
        .add(&[
            Column::scalar("reward", &r),
            Column::value("obs", &bad),
            Column::ragged("tokens", &[1i32]),
            Column::value("info", b""),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidText { valid_up_to: 2, .. }),
        "{e}"
    );
    let e = buf
        .add(&[
            Column::scalar("reward", &r),
            Column::text("obs", "x"),
            Column::value("info", b""),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::MissingField { field } if field == "tokens"),
        "{e}"
    );
    let e = buf
        .add_batch(&[
            Column::new("reward", &[1.0f32, 2.0]),
            Column::values("obs", DType::U8, b"abc", &[0, 2, 1]),
            Column::values("tokens", DType::I32, &[], &[0, 0, 0]),
            Column::values("info", DType::U8, &[], &[0, 0, 0]),
        ])
        .unwrap_err();
    assert!(matches!(&e, Error::BadOffsets { .. }), "{e}");
    assert_eq!(buf.stats().tail, 1);
    check_all(&buf);
    add_one(&mut buf, 1);
    check_all(&buf);
}

/// Adds items `ids` to `lanes`, item `ids[r]` to lane `to[r]`, in one call.
fn add_to_lanes(lanes: &mut replaystore::Lanes, ids: &[u64], to: &[usize]) -> Vec<u64> {
    let items = Items::new(ids.iter().copied());
    lanes.add_batch(&items.columns(), to).unwrap()
}

/// Every row of a lanes draw holds the values of the item its reward names.
fn check_rows(batch: &replaystore::Batch) {
    for r in 0..batch.len() {
        check(batch, r, batch.get::<f32>("reward").unwrap()[r] as u64);
    }
}

#[test]
fn lanes_keep_values_per_lane_draw_them_across_lanes_and_checkpoint_them_as_one() {
    use replaystore::Lanes;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("l");
    // Each lane gets a third of the chunk ring's bytes: small enough to lap.
    let config = Config::new(schema(), 300)
        .seed(5)
        .heap_bytes((3 * 96) << 10)
        .evict_for_room();
    let mut lanes = Lanes::create(&dir, config, 3).unwrap();
    assert!(lanes.lane(0).unwrap().value_room() < 96 << 10);
    let mut next = 1;
    for round in 0..12u64 {
        let ids: Vec<u64> = (next..next + 20).collect();
        let to: Vec<usize> = ids
            .iter()
            .map(|&i| ((i * 7 + round) % 3) as usize)
            .collect();
        let idx = add_to_lanes(&mut lanes, &ids, &to);
        for (&i, &k) in idx.iter().zip(&to) {
            assert_eq!(Lanes::lane_of(i), k as u64);
        }
        next += 20;
        check_rows(&lanes.sample(64).unwrap());
        check_rows(&lanes.get_many(&idx).unwrap());
        if round == 5 {
            lanes.get_state_named("mid").unwrap();
        }
    }
    let evicted: u64 = lanes.stats().iter().map(|s| s.evicted).sum();
    assert!(evicted > 0, "the chunk rings never lapped");
    // Every lane's values come back from a checkpoint taken before they lapped.
    let at_mid = lanes.snapshot_state("mid").unwrap();
    lanes.set_state(&at_mid).unwrap();
    let live: Vec<u64> = lanes.lane_edges().into_iter().flatten().collect();
    check_rows(&lanes.get_many(&live).unwrap());
    assert!(
        live.iter()
            .all(|&i| lanes.get(i).unwrap().get::<f32>("reward").unwrap()[0] <= 120.0)
    );
    lanes.close().unwrap();
    // A reader of every lane, by priority-free draws, and verify of each lane.
    let mut reader = Lanes::open_reader(&dir).unwrap();
    check_rows(&reader.sample(200).unwrap());
    for k in 0..3 {
        let lane = dir.join(format!("lane-{k}"));
        assert!(replaystore::verify(&lane).unwrap().is_sound());
    }
}

#[test]
fn a_lanes_add_whose_values_one_lane_cannot_hold_adds_nothing_to_any_lane() {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::new(schema(), 30).heap_bytes((2 * 8) << 10);
    let mut lanes = replaystore::Lanes::create(tmp.path().join("l"), config, 2).unwrap();
    // Lane 1 gets 40 items of up to 1.5 KB of text each: more than its 8 KB.
    let ids: Vec<u64> = (1..=42).collect();
    let to: Vec<usize> = ids.iter().map(|&i| usize::from(i > 2)).collect();
    let items = Items::new(ids.iter().copied());
    let e = lanes.add_batch(&items.columns(), &to).unwrap_err();
    assert!(
        matches!(&e, Error::ValueTooLong { field, .. } if field.contains("lane 1")),
        "{e}"
    );
    assert_eq!(
        lanes.len(),
        0,
        "lane 0's rows were added before lane 1 refused"
    );
}

/// Items 0..12 in a new buffer at `dir`, closed (every chunk sealed), verify sound.
fn twelve_sealed(dir: &Path) {
    let mut buf = ReplayBuffer::create(dir, Config::new(schema(), 50).heap_bytes(1 << 20)).unwrap();
    add_batch(&mut buf, 0, 12);
    buf.close().unwrap();
    assert!(replaystore::verify(dir).unwrap().is_sound());
}

#[test]
fn a_damaged_chunk_is_found_by_verify_and_refused_by_reads_naming_the_item() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    twelve_sealed(&dir);
    // Item 3's obs: its first byte, in a sealed chunk (row 0 of the first heap file is
    // chunk 0; the chunk stride is 1024, the payload starts 16 bytes into the row).
    let buf = ReplayBuffer::open(&dir).unwrap();
    let pos = {
        let b = buf.get(3).unwrap();
        let before: usize = (0..3)
            .map(|i| obs(i).len() + tokens(i).len() * 4 + info(i).len())
            .sum();
        assert_eq!(b.text("obs", 0).unwrap(), obs(3));
        before as u64
    };
    drop(buf);
    let heap = dir.join("lane-0").join("heap-00000000.dat");
    let mut bytes = std::fs::read(&heap).unwrap();
    let at = 4096 + (pos / 1008) as usize * 1024 + 16 + (pos % 1008) as usize;
    bytes[at] ^= 0x20;
    std::fs::write(&heap, &bytes).unwrap();
    let report = replaystore::verify(&dir).unwrap();
    assert!(!report.is_sound());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.what.contains("item 3") && p.what.contains("obs")),
        "{:?}",
        report.problems
    );
    let buf = ReplayBuffer::open(&dir).unwrap();
    let e = buf.get(3).unwrap_err();
    assert!(
        matches!(&e, Error::BadItem { index: 3, problem, .. } if problem.contains("checksum")),
        "{e}"
    );
    // Items whose values lie in other chunks still read.
    let far = (0..12).find(|&i| {
        let p: usize = (0..i)
            .map(|j| obs(j).len() + tokens(j).len() * 4 + info(j).len())
            .sum();
        p as u64 / 1008 > pos / 1008 + 1
    });
    if let Some(i) = far {
        let b = buf.get(i).unwrap();
        assert_eq!(b.text("obs", 0).unwrap(), obs(i));
    }
}

#[test]
fn a_checkpoint_keeps_its_values_while_the_ring_laps_and_a_restore_brings_them_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    // Chunk segments of 16 chunks: the laps below copy linked ones on write.
    let config = Config::new(schema(), 500)
        .heap_bytes(64 * 1024)
        .evict_for_room()
        .segment_bytes(16 * 1024)
        .segment_slots(64);
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    add_batch(&mut buf, 0, 12);
    let state = buf.get_state().unwrap();
    let at_checkpoint = buf.live();
    // Lap the chunk ring twice over: every chunk the snapshot links is written again.
    let mut next = 12;
    while buf.stats().evicted < 3 * at_checkpoint.end {
        add_batch(&mut buf, next, 3);
        next += 3;
    }
    check_all(&buf);
    assert!(replaystore::verify(&dir).unwrap().is_sound());
    buf.set_state(&state).unwrap();
    assert_eq!(buf.live(), at_checkpoint);
    check_all(&buf);
    // The restored buffer goes on from the snapshot's values.
    add_one(&mut buf, at_checkpoint.end);
    add_batch(&mut buf, at_checkpoint.end + 1, 4);
    check_all(&buf);
    let second = buf.get_state().unwrap();
    buf.keep_last(1).unwrap();
    assert_eq!(replaystore::snapshots(&dir).unwrap().len(), 1);
    buf.close().unwrap();
    let mut buf = ReplayBuffer::open_at_state(&dir, &second).unwrap();
    check_all(&buf);
    let end = buf.live().end;
    add_one(&mut buf, end);
    check_all(&buf);
    assert!(replaystore::verify(&dir).unwrap().is_sound());
}

/// Promise: a reader (its own mappings, as in another process) sampling while the
/// writer laps a small chunk ring and evicts for room never returns a value that is not
/// its item's: every row it returns holds the values added with its index, mapped and
/// with pread; draws that meet an item evicted mid-read draw again. Snapshots open for
/// reading, by the writer's handle and by a reader.
#[test]
fn a_reader_never_returns_a_torn_or_foreign_value_while_the_ring_laps() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    // About 150 items' values: the writer below laps them every few hundred calls.
    let config = Config::new(schema(), 400)
        .heap_bytes(384 * 1024)
        .evict_for_room();
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    add_batch(&mut buf, 0, 10);
    buf.flush().unwrap();
    use std::sync::atomic::{AtomicU64, Ordering};
    const ROWS: u64 = 20_000;
    let drawn = std::sync::Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let readers: Vec<_> = [
        replaystore::RowAccess::Mapped,
        replaystore::RowAccess::Pread,
    ]
    .into_iter()
    .enumerate()
    .map(|(k, access)| {
        let (dir, drawn) = (dir.clone(), drawn.clone());
        std::thread::spawn(move || {
            let mut r = replaystore::Reader::open(&dir).unwrap();
            r.set_row_access(access).unwrap();
            let mut batch = replaystore::Batch::default();
            while drawn[k].load(Ordering::Relaxed) < ROWS {
                r.sample_into(Request::rows(16), &mut batch).unwrap();
                for (j, &i) in batch.indices().to_vec().iter().enumerate() {
                    check(&batch, j, i);
                }
                drawn[k].fetch_add(16, Ordering::Relaxed);
            }
        })
    })
    .collect();
    // The writer laps the chunk ring until both readers have drawn their rows.
    let (mut next, mut round) = (10, 0u64);
    while drawn.iter().any(|d| d.load(Ordering::Relaxed) < ROWS)
        && readers.iter().all(|r| !r.is_finished())
        && round < 1_000_000
    {
        add_batch(&mut buf, next, 1 + round % 4);
        next += 1 + round % 4;
        if round % 50 == 0 {
            buf.flush().unwrap();
        }
        round += 1;
    }
    for r in readers {
        r.join().unwrap();
    }
    println!("writer calls while the readers drew: {round}");
    assert!(buf.stats().evicted > 100, "{:?}", buf.stats());
    let state = buf.get_state().unwrap();
    let snap = ReplayBuffer::open_snapshot(&dir, &state.name).unwrap();
    check_all(&snap);
    let mut r = replaystore::Reader::open_snapshot(&dir, &state.name).unwrap();
    let live: Vec<u64> = snap.live().collect();
    let b = r.get_many(&live).unwrap();
    for (k, &i) in live.iter().enumerate() {
        check(&b, k, i);
    }
}

/// Promise: a slot that lies (a length of 2 GiB, a position outside the ring), written
/// with a valid row crc so that only the slot's own checks can catch it, is a typed
/// error naming the item from `get`, `sample` and `verify`: never an allocation of its
/// length, never a read outside the chunk ring.
#[test]
fn a_hostile_slot_is_a_typed_error_never_a_huge_allocation_or_a_stray_read() {
    use replaystore::internal::format::heap::VarSlot;
    use replaystore::internal::format::row::{RowLayout, item_crc};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema(), 8).heap_bytes(1 << 20)).unwrap();
    add_batch(&mut buf, 0, 4);
    buf.close().unwrap();
    let layout = RowLayout::of(&schema());
    let seg = dir.join("lane-0").join("seg-00000000.dat");
    let original = std::fs::read(&seg).unwrap();
    for (what, slot) in [
        (
            "length",
            VarSlot {
                pos: 0,
                len: u32::MAX,
            },
        ),
        (
            "position",
            VarSlot {
                pos: 1 << 40,
                len: 16,
            },
        ),
    ] {
        let mut bytes = original.clone();
        // Item 2's "obs" slot (the first variable field), then its row crc made right.
        let row = 4096 + 2 * layout.stride;
        let (off, _) = layout.fields[layout.fixed];
        bytes[row + off..row + off + 16].copy_from_slice(&slot.encode());
        let span = layout.payload_span();
        let crc = item_crc(2, &bytes[row + span.start..row + span.end]);
        bytes[row + 8..row + 12].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&seg, &bytes).unwrap();
        let buf = ReplayBuffer::open(&dir).unwrap();
        let e = buf.get(2).unwrap_err();
        assert!(
            matches!(&e, Error::Corrupt { field, .. } if field.contains("item 2")),
            "{what}: {e}"
        );
        assert!(
            buf.get_many(&[0, 1, 3]).is_ok(),
            "{what}: the other items read"
        );
        drop(buf);
        let report = replaystore::verify(&dir).unwrap();
        assert!(
            report.problems.iter().any(|p| p.what.contains("item 2")),
            "{what}: {:?}",
            report.problems
        );
    }
    std::fs::write(&seg, &original).unwrap();
    assert!(replaystore::verify(&dir).unwrap().is_sound());
}

/// A sink that takes values one field at a time (the `Sink::values` path, not
/// `all_values`), keeping each field's bytes end to end.
#[derive(Default)]
struct FieldByField {
    fixed: Vec<Vec<u8>>,
    values: Vec<(String, Vec<u8>)>,
}

impl replaystore::Sink for FieldByField {
    fn arrays(&mut self, layout: &replaystore::Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
        self.values.clear();
        self.fixed = layout.arrays().iter().map(|a| vec![0; a.bytes()]).collect();
        Ok(self.fixed.iter_mut().map(Vec::as_mut_slice).collect())
    }

    fn values(
        &mut self,
        field: &replaystore::VarField,
        lengths: &[u64],
    ) -> replaystore::Result<replaystore::ValuesOut<'_>> {
        let n = lengths.iter().sum::<u64>() as usize;
        self.values.push((field.name().to_string(), vec![0; n]));
        Ok(replaystore::ValuesOut::EndToEnd(
            &mut self.values.last_mut().unwrap().1,
        ))
    }
}

#[test]
fn a_sink_taking_values_field_by_field_gets_what_a_batch_gets_and_damage_too() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf =
        ReplayBuffer::create(&dir, Config::new(schema(), 200).heap_bytes(1 << 20)).unwrap();
    add_batch(&mut buf, 0, 150);
    buf.flush().unwrap();
    let indices: Vec<u64> = (0..150).rev().step_by(7).collect();
    let mut sink = FieldByField::default();
    buf.sample_into(Request::at(&indices), &mut sink).unwrap();
    let batch = buf.get_many(&indices).unwrap();
    for (name, bytes) in &sink.values {
        assert_eq!(
            bytes.as_slice(),
            batch.values(name).unwrap().bytes(),
            "{name}"
        );
    }
    assert_eq!(sink.values.len(), 3);
    // A flipped byte in the chunk where item 3's obs ends and its tokens begin: both
    // paths refuse item 3 (each chunk checked once per item, whichever value asks).
    buf.close().unwrap();
    let end_of_obs: usize = (0..3)
        .map(|i| obs(i).len() + tokens(i).len() * 4 + info(i).len())
        .sum::<usize>()
        + obs(3).len();
    let pos = end_of_obs as u64 + 1;
    let heap = dir.join("lane-0").join("heap-00000000.dat");
    let mut bytes = std::fs::read(&heap).unwrap();
    bytes[4096 + (pos / 1008) as usize * 1024 + 16 + (pos % 1008) as usize] ^= 0x01;
    std::fs::write(&heap, &bytes).unwrap();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let e = buf.get(3).unwrap_err();
    assert!(
        matches!(&e, Error::BadItem { index: 3, problem, .. } if problem.contains("checksum")),
        "{e}"
    );
    let e = buf
        .sample_into(Request::at(&[3]), &mut FieldByField::default())
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadItem { index: 3, problem, .. } if problem.contains("checksum")),
        "{e}"
    );
}

/// Rewrites `len` bytes at `at` in `file`, then the stored checksum of the row of
/// logical index `index` that holds them (row `row` of the file, payload `payload`
/// bytes after its 16-byte header): a crafted value whose checksums hold.
fn craft(
    file: &Path,
    row: usize,
    stride: usize,
    payload: usize,
    index: u64,
    at: usize,
    new: &[u8],
) {
    use replaystore::internal::format::row::item_crc;
    let mut bytes = std::fs::read(file).unwrap();
    let start = 4096 + row * stride;
    let stored = u32::from_le_bytes(bytes[start + 8..start + 12].try_into().unwrap());
    // The layout is as assumed: the untouched row's checksum is the stored one.
    assert_eq!(
        item_crc(index, &bytes[start + 16..start + 16 + payload]),
        stored
    );
    bytes[at..at + new.len()].copy_from_slice(new);
    let crc = item_crc(index, &bytes[start + 16..start + 16 + payload]);
    bytes[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(file, &bytes).unwrap();
}

#[test]
fn verify_finds_crafted_values_whose_checksums_hold_text_not_utf8_and_part_elements() {
    use replaystore::internal::storage::{heap_segment_path, segment_path};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    twelve_sealed(&dir);
    // Item 1's obs starts at byte 0 of chunk 0 (item 0's obs and tokens are empty, its
    // info too): a 0xff there, with chunk 0's checksum made to hold.
    assert!(obs(0).is_empty() && tokens(0).is_empty() && info(0).is_empty());
    let heap = heap_segment_path(&dir, 0);
    craft(&heap, 0, 1024, 1008, 0, 4096 + 16, &[0xff]);
    let report = replaystore::verify(&dir).unwrap();
    assert!(
        report.problems.iter().any(|p| p.what.contains("item 1")
            && p.what.contains("\"obs\"")
            && p.what.contains("UTF-8")),
        "{:?}",
        report.problems
    );
    // A tokens slot (i32[]) whose length is not whole elements: item 2's, one byte
    // shorter, its row's checksum made to hold. The row: header 16, reward 4 (to 24),
    // then the obs, tokens and info slots of 16 bytes each.
    let rows = segment_path(&dir, 0);
    let stride = replaystore::inspect(&dir).unwrap().row_stride as usize;
    let slot = 4096 + 2 * stride + 40;
    let bytes = std::fs::read(&rows).unwrap();
    let len = u32::from_le_bytes(bytes[slot + 8..slot + 12].try_into().unwrap());
    assert_eq!(len as usize, tokens(2).len() * 4);
    craft(
        &rows,
        2,
        stride,
        72 - 16,
        2,
        slot + 8,
        &(len - 1).to_le_bytes(),
    );
    let report = replaystore::verify(&dir).unwrap();
    assert!(
        report.problems.iter().any(|p| p.what.contains("item 2")
            && p.what.contains("\"tokens\"")
            && p.what.contains("not whole 4-byte elements")),
        "{:?}",
        report.problems
    );
}

/// A sink that lets the writer add `adds` items (one call each) while a reader's draw is
/// between reading an item's slots and copying its values: the interleaving of a writer
/// in another process, made exact.
struct WriterMidRead<'w> {
    inner: replaystore::Batch,
    writer: &'w mut ReplayBuffer,
    adds: std::ops::Range<u64>,
}

impl WriterMidRead<'_> {
    fn meddle(&mut self) {
        for i in std::mem::take(&mut self.adds) {
            self.writer
                .add(&[
                    Column::scalar("i", &i),
                    Column::text("t", &format!("{i:0>100}")),
                ])
                .unwrap();
        }
    }
}

impl replaystore::Sink for WriterMidRead<'_> {
    fn arrays(&mut self, layout: &replaystore::Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
        replaystore::Sink::arrays(&mut self.inner, layout)
    }
    fn values(
        &mut self,
        field: &replaystore::VarField,
        lengths: &[u64],
    ) -> replaystore::Result<replaystore::ValuesOut<'_>> {
        self.meddle();
        replaystore::Sink::values(&mut self.inner, field, lengths)
    }
    fn all_values(
        &mut self,
        fields: &[&replaystore::VarField],
        lengths: &[Vec<u64>],
    ) -> replaystore::Result<Option<Vec<replaystore::ValuesOut<'_>>>> {
        self.meddle();
        replaystore::Sink::all_values(&mut self.inner, fields, lengths)
    }
}

/// Promise: a reader never takes a race with the writer for damage. After a checkpoint
/// the reader may read an old item's row from a segment the snapshot still links (the
/// writer copies it before it changes it, so the reader's copy keeps its stamps) while
/// the item's value chunk, in a chunk segment already copied, is evicted and rewritten
/// in place. The trial saw this as `CorruptError`s ("chunk N holds ..., expected stamp")
/// from readers of text buffers whose writer called `get_state`.
#[test]
fn a_value_rewritten_while_a_reader_reads_a_row_a_snapshot_froze_is_a_race_not_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let schema = Schema::builder()
        .field("i", DType::U64, &[])
        .variable("t", VarKind::Str, None)
        .build()
        .unwrap();
    // 4 rows a segment, 7 chunk rows of 1 KiB (one a call): the chunk ring laps long
    // before the rows, and the oldest live item lies two segments behind the tail.
    let config = Config::new(schema, 256)
        .evict_for_room()
        .segment_slots(4)
        .heap_bytes(7 * 1024)
        .chunk_bytes(1008);
    let mut writer = ReplayBuffer::create(&dir, config).unwrap();
    let add = |w: &mut ReplayBuffer, i: u64| {
        w.add(&[
            Column::scalar("i", &i),
            Column::text("t", &format!("{i:0>100}")),
        ])
        .unwrap();
    };
    // 7 chunks: items 19..26 live, item 19 the last of its row segment.
    for i in 0..26 {
        add(&mut writer, i);
    }
    writer.get_state().unwrap();
    // One more add evicts item 19: its row segment, the tail's and the chunk segment get
    // copies of their own; the segment of the oldest live item, 20, stays the snapshot's.
    add(&mut writer, 26);
    let mut reader = replaystore::Reader::open(&dir).unwrap();
    reader.refresh().unwrap();
    let oldest = reader.live().start;
    assert_eq!(oldest, 20);
    // Read the oldest item while the writer adds 8 more: it is evicted, its chunk reused.
    let mut sink = WriterMidRead {
        inner: replaystore::Batch::default(),
        writer: &mut writer,
        adds: 27..35,
    };
    let got = reader.sample_into(Request::at(&[oldest]), &mut sink);
    assert!(
        matches!(got, Err(Error::Evicted { index, .. }) if index == oldest),
        "{got:?}"
    );
    // A draw in the same position draws again from what is live then, and gets values
    // that are its items'.
    let mut sink = WriterMidRead {
        inner: replaystore::Batch::default(),
        writer: &mut writer,
        adds: 35..43,
    };
    reader.reseed(1);
    reader.sample_into(Request::rows(64), &mut sink).unwrap();
    let batch = sink.inner;
    let ids: &[u64] = batch.get("i").unwrap();
    for (r, &i) in ids.iter().enumerate() {
        assert_eq!(batch.text("t", r).unwrap(), format!("{i:0>100}"));
    }
}

#[test]
fn an_add_the_value_space_cannot_hold_before_capacity_is_refused_and_nothing_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    // 64 chunk rows: a few adds fill them long before 1,000 items are held.
    let config = Config::new(schema(), 1000).heap_bytes(64 * 1024);
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    let mut next = 0;
    let err = loop {
        let (o, t, f, r) = (obs(next), tokens(next), info(next), next as f32);
        let added = buf.add(&[
            Column::scalar("reward", &r),
            Column::text("obs", &o),
            Column::ragged("tokens", &t),
            Column::value("info", &f),
        ]);
        match added {
            Ok(i) => assert_eq!(i, next),
            Err(e) => break e,
        }
        next += 1;
        assert!(next < 1000, "the value space never filled");
    };
    match err {
        Error::ValueSpaceFull {
            live,
            capacity,
            early,
            limit,
            ..
        } => {
            assert_eq!((live, capacity), (next, 1000));
            assert!(early >= 1);
            assert_eq!(limit, 64 * 1024 / 1024 * 1024);
        }
        e => panic!("expected ValueSpaceFull, got {e}"),
    }
    // Every item added before is held and whole; a batch is refused the same way.
    let s = buf.stats();
    assert_eq!((s.head, s.tail, s.evicted), (0, next, 0));
    check_all(&buf);
    let mut batch = ReplayBuffer::create(
        tmp.path().join("c"),
        Config::new(schema(), 1000).heap_bytes(8 * 1024),
    )
    .unwrap();
    add_batch(&mut batch, 0, 3);
    assert!(matches!(
        batch.add_batch(&[
            Column::new("reward", &[0f32; 2]),
            Column::values("obs", DType::U8, &[b'x'; 7500], &[0, 3750, 7500]),
            Column::values("tokens", DType::I32, &[], &[0, 0, 0]),
            Column::values("info", DType::U8, &[], &[0, 0, 0]),
        ]),
        Err(Error::ValueSpaceFull { early: 3, .. })
    ));
    assert_eq!(batch.len(), 3);
    // The refusal is the buffer's, not the handle's: a reopen refuses as well.
    buf.close().unwrap();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let (o, t, f, r) = (obs(next), tokens(next), info(next), next as f32);
    let cols = [
        Column::scalar("reward", &r),
        Column::text("obs", &o),
        Column::ragged("tokens", &t),
        Column::value("info", &f),
    ];
    assert!(matches!(buf.add(&cols), Err(Error::ValueSpaceFull { .. })));
    assert_eq!(buf.stats().tail, next);
    check_all(&buf);
}

#[test]
fn a_full_ring_replaces_its_oldest_item_per_add_and_refuses_a_value_needing_more() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let schema = text_only();
    // 8 items of one chunk row each: the ring replaces one item per add, for ever.
    let config = Config::new(schema, 8).heap_bytes(8 * 1024);
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    for i in 0..100u64 {
        let text = format!("item {i}");
        assert_eq!(buf.add(&[Column::text("text", &text)]).unwrap(), i);
        assert_eq!(buf.len(), (i + 1).min(8));
    }
    let s = buf.stats();
    assert_eq!((s.head, s.tail), (92, 100));
    for i in 92..100 {
        assert_eq!(
            buf.get(i).unwrap().text("text", 0).unwrap(),
            format!("item {i}")
        );
    }
    // A value of three chunk rows would take two items more than the ring replaces.
    let long = "x".repeat(2500);
    match buf.add(&[Column::text("text", &long)]) {
        Err(Error::ValueSpaceFull {
            early: 2,
            live: 8,
            capacity: 8,
            ..
        }) => {}
        other => panic!("expected ValueSpaceFull, got {other:?}"),
    }
    assert_eq!((buf.stats().head, buf.stats().tail), (92, 100));
}

#[test]
fn the_value_space_takes_disk_as_values_arrive_not_at_create() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let schema = text_only();
    // 256 MiB of value space in segments of 1 MiB.
    let config = Config::new(schema, 1000)
        .heap_bytes(256 << 20)
        .segment_bytes(1 << 20);
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    let heap_disk = |dir: &Path| -> (u64, u64) {
        let lane = dir.join("lane-0");
        let mut files = 0;
        let mut bytes = 0;
        for e in std::fs::read_dir(lane).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().starts_with("heap-") {
                files += 1;
                bytes += e.metadata().unwrap().blocks() * 512;
            }
        }
        (files, bytes)
    };
    let (files, at_create) = heap_disk(&dir);
    assert_eq!(files, 256);
    assert!(at_create <= 256 * 16 * 1024, "{at_create} bytes at create");
    // 3 MiB of values: the segments written are reserved whole, the rest stay sparse.
    let text = "y".repeat(100 * 1024);
    for _ in 0..30 {
        buf.add(&[Column::text("text", &text)]).unwrap();
    }
    buf.flush().unwrap();
    let (_, used) = heap_disk(&dir);
    assert!(used >= 3 << 20, "{used}");
    assert!(
        used <= at_create + (5 << 20),
        "{used} bytes for 3 MiB of values"
    );
    assert_eq!(buf.get(29).unwrap().text("text", 0).unwrap(), text);
}
