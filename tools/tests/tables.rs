//! Promise: `export` to Parquet and JSON lines, and `import` from them, move every field,
//! variable-length ones included (issue 29): a Parquet round trip keeps every dtype,
//! shape and value and is byte-identical on a second export; the Parquet file holds the
//! Arrow types pandas and pyarrow read (checked here with an independent reader); JSON
//! lines come back with the types JSON has; a bad file is refused naming the line or
//! column, and no buffer appears.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int32Type, UInt8Type};
use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use replaystore::{Column, Config, DType, ReplayBuffer, Schema, VarKind};

mod common;
use common::{run, s, text};

/// Item `i`: one fixed field of every dtype (two with shapes), text with non-ASCII
/// characters (empty for every 5th item), bytes, and ragged arrays of `i % 7` elements.
struct Item {
    fixed: Vec<u8>,
    text: String,
    blob: Vec<u8>,
    tokens: Vec<i32>,
    logprobs: Vec<f32>,
    ids: Vec<u64>,
}

fn item(i: u64) -> Item {
    let n = (i % 7) as usize;
    let mut fixed = Vec::new();
    fixed.push(u8::from(i.is_multiple_of(2)));
    fixed.extend([i as u8, (i + 1) as u8, (i + 2) as u8, (i + 3) as u8]);
    fixed.extend((i as i8).wrapping_neg().to_le_bytes());
    fixed.extend((i as u16).wrapping_mul(300).to_le_bytes());
    fixed.extend((i as i16).wrapping_mul(-100).to_le_bytes());
    fixed.extend((i as u32 * 70_000).to_le_bytes());
    fixed.extend((i as i32 - 50).to_le_bytes());
    fixed.extend((i << 40).to_le_bytes());
    fixed.extend((-(i as i64) << 35).to_le_bytes());
    for k in 0..3 {
        fixed.extend((i as f32 / 3.0 + k as f32).to_le_bytes());
    }
    fixed.extend((i as f64).sqrt().to_le_bytes());
    Item {
        fixed,
        text: if i.is_multiple_of(5) {
            String::new()
        } else {
            format!("étape {i}: \"move\" ♞\n").repeat(n + 1)
        },
        blob: (0..n as u8 * 3).map(|b| b ^ i as u8).collect(),
        tokens: (0..n as i32).map(|k| k * 1000 - i as i32).collect(),
        logprobs: (0..n).map(|k| -(k as f32) / (i as f32 + 1.0)).collect(),
        ids: (0..n as u64).map(|k| u64::MAX - k - i).collect(),
    }
}

fn schema() -> Schema {
    Schema::builder()
        .field("done", DType::Bool, &[])
        .field("frame", DType::U8, &[2, 2])
        .field("i8", DType::I8, &[])
        .field("u16", DType::U16, &[])
        .field("i16", DType::I16, &[])
        .field("u32", DType::U32, &[])
        .field("i32", DType::I32, &[])
        .field("u64", DType::U64, &[])
        .field("i64", DType::I64, &[])
        .field("obs", DType::F32, &[3])
        .field("f64", DType::F64, &[])
        .variable("text", VarKind::Str, None)
        .variable("blob", VarKind::Bytes, None)
        .variable("tokens", VarKind::Ragged(DType::I32), Some(64))
        .variable("logprobs", VarKind::Ragged(DType::F32), None)
        .variable("ids", VarKind::Ragged(DType::U64), None)
        .build()
        .unwrap()
}

/// Byte ranges of each fixed field in `Item::fixed`, in schema order.
fn fixed_sizes() -> Vec<usize> {
    schema().fields().iter().map(|f| f.bytes()).collect()
}

/// A buffer of `capacity` holding items `0..added`.
fn make(dir: &Path, capacity: u64, added: u64) {
    let schema = schema();
    let names: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    let mut buf = ReplayBuffer::create(dir, Config::new(schema.clone(), capacity)).unwrap();
    for i in 0..added {
        let it = item(i);
        let mut cols = Vec::new();
        let mut at = 0;
        for (f, size) in schema.fields().iter().zip(fixed_sizes()) {
            let bytes = &it.fixed[at..at + size];
            cols.push(Column::from_bytes(
                &names[cols.len()],
                f.dtype(),
                f.shape(),
                bytes,
            ));
            at += size;
        }
        cols.push(Column::text("text", &it.text));
        cols.push(Column::value("blob", &it.blob));
        cols.push(Column::ragged("tokens", &it.tokens));
        cols.push(Column::ragged("logprobs", &it.logprobs));
        cols.push(Column::ragged("ids", &it.ids));
        buf.add(&cols).unwrap();
    }
    buf.close().unwrap();
}

/// Checks that `dir` holds items `first..first + n` as `make` made them, position `k`
/// holding item `first + k`.
fn check_items(dir: &Path, first: u64, n: u64) {
    let buf = ReplayBuffer::open(dir).unwrap();
    assert_eq!(buf.len(), n);
    let head = buf.stats().head;
    for k in 0..n {
        let b = buf.get(head + k).unwrap();
        let want = item(first + k);
        assert_eq!(b.item_bytes(0), want.fixed, "item {k}: fixed fields");
        assert_eq!(b.text("text", 0).unwrap(), want.text, "item {k}");
        assert_eq!(b.values("blob").unwrap().value(0).unwrap(), want.blob);
        assert_eq!(
            b.values("tokens").unwrap().elements::<i32>(0).unwrap(),
            want.tokens
        );
        assert_eq!(
            b.values("logprobs").unwrap().elements::<f32>(0).unwrap(),
            want.logprobs
        );
        assert_eq!(
            b.values("ids").unwrap().elements::<u64>(0).unwrap(),
            want.ids
        );
    }
}

#[test]
fn a_parquet_round_trip_keeps_every_field_and_a_second_export_is_byte_identical() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    // 3,000 items past a ring of 2,500: the export reads three chunks of a wrapped ring.
    make(&dir, 2500, 3000);
    let out = d.path().join("steps.parquet");
    let o = run(&["export", s(&dir), s(&out)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("exported 2500 items x 16 fields"),
        "{}",
        text(&o)
    );

    // An independent reader sees the Arrow types pandas and pyarrow map to NumPy,
    // lists and strings, and the values stored.
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap()).unwrap();
    let arrow = reader.schema().clone();
    let type_of = |name: &str| arrow.field_with_name(name).unwrap().data_type().clone();
    assert_eq!(type_of("u64"), DataType::UInt64);
    assert_eq!(type_of("text"), DataType::Utf8);
    assert_eq!(type_of("blob"), DataType::Binary);
    assert!(matches!(type_of("tokens"), DataType::List(f) if f.data_type() == &DataType::Int32));
    assert!(matches!(
        type_of("frame"),
        DataType::FixedSizeList(f, 2) if matches!(f.data_type(), DataType::FixedSizeList(g, 2) if g.data_type() == &DataType::UInt8)
    ));
    let batches: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 2500);
    let first = &batches[0];
    for r in [0usize, 1, 6, 13] {
        let want = item(500 + r as u64);
        let text = first.column_by_name("text").unwrap().as_string::<i32>();
        assert_eq!(text.value(r), want.text);
        let tokens = first
            .column_by_name("tokens")
            .unwrap()
            .as_list::<i32>()
            .value(r);
        assert_eq!(
            tokens.as_primitive::<Int32Type>().values().to_vec(),
            want.tokens
        );
        let lp = first
            .column_by_name("logprobs")
            .unwrap()
            .as_list::<i32>()
            .value(r);
        assert_eq!(
            lp.as_primitive::<Float32Type>().values().to_vec(),
            want.logprobs
        );
        let frame = first
            .column_by_name("frame")
            .unwrap()
            .as_fixed_size_list()
            .value(r);
        let inner = frame
            .as_fixed_size_list()
            .values()
            .as_primitive::<UInt8Type>()
            .values()
            .to_vec();
        assert_eq!(inner, want.fixed[1..5]);
    }

    let back = d.path().join("back");
    let o = run(&["import", s(&out), s(&back)]);
    assert!(o.status.success(), "{}", text(&o));
    check_items(&back, 500, 2500);
    // The imported schema is the exported one, maximum length aside (Parquet has none).
    let o = run(&["info", s(&back), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 16);
    assert_eq!(v["schema"][13]["dtype"], "i32[]");
    let again = d.path().join("again.parquet");
    assert!(run(&["export", s(&back), s(&again)]).status.success());
    assert_eq!(std::fs::read(&again).unwrap(), std::fs::read(&out).unwrap());

    // --fields and --last pick columns and rows; --capacity leaves room for more.
    let some = d.path().join("some.pq");
    let o = run(&[
        "export",
        s(&dir),
        s(&some),
        "--fields",
        "tokens,done",
        "--last",
        "10",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let bigger = d.path().join("bigger");
    let o = run(&["import", s(&some), s(&bigger), "--capacity", "40"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut buf = ReplayBuffer::open(&bigger).unwrap();
    assert_eq!((buf.len(), buf.capacity()), (10, 40));
    let b = buf.get(9).unwrap();
    assert_eq!(
        b.values("tokens").unwrap().elements::<i32>(0).unwrap(),
        item(2999).tokens
    );
    // The chunk ring was sized for 40 such items: 30 more of the largest all stay.
    for _ in 0..30 {
        buf.add(&[
            Column::ragged("tokens", &[7i32; 6]),
            Column::scalar("done", &true),
        ])
        .unwrap();
    }
    assert_eq!(buf.len(), 40);
}

#[test]
fn json_lines_come_back_with_the_types_json_has() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    make(&dir, 100, 130);
    let out = d.path().join("steps.jsonl");
    let o = run(&["export", s(&dir), s(&out)]);
    assert!(o.status.success(), "{}", text(&o));
    let content = std::fs::read_to_string(&out).unwrap();
    assert_eq!(content.lines().count(), 100);
    let first: serde_json::Value = serde_json::from_str(content.lines().next().unwrap()).unwrap();
    assert_eq!(first["text"], item(30).text.as_str());
    assert!(
        first.get("index").is_none(),
        "an export holds items, not positions"
    );

    let back = d.path().join("back");
    let o = run(&["import", s(&out), s(&back)]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["info", s(&back), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let types: Vec<(String, String)> = v["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().into(),
                f["dtype"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("done", "bool"),
        ("frame", "i64"),
        ("i8", "i64"),
        ("u64", "i64"),
        ("obs", "f64"),
        ("f64", "f64"),
        ("text", "str"),
        ("blob", "str"),
        ("tokens", "i64[]"),
        ("logprobs", "f64[]"),
        ("ids", "u64[]"),
    ];
    for (name, dtype) in want {
        let got = types.iter().find(|t| t.0 == name).unwrap();
        assert_eq!(got.1, dtype, "{name}");
    }
    let buf = ReplayBuffer::open(&back).unwrap();
    for k in 0..100u64 {
        let b = buf.get(k).unwrap();
        let it = item(30 + k);
        assert_eq!(b.text("text", 0).unwrap(), it.text);
        let hex: String = it.blob.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(b.text("blob", 0).unwrap(), hex);
        let tokens: Vec<i32> = b
            .values("tokens")
            .unwrap()
            .elements::<i64>(0)
            .unwrap()
            .iter()
            .map(|&t| t as i32)
            .collect();
        assert_eq!(tokens, it.tokens);
        // f32 printed shortest-exact, read as f64: narrowing gives the stored bits.
        let lp: Vec<f32> = b
            .values("logprobs")
            .unwrap()
            .elements::<f64>(0)
            .unwrap()
            .iter()
            .map(|&x| x as f32)
            .collect();
        assert_eq!(lp, it.logprobs);
        assert_eq!(b.values("ids").unwrap().elements::<u64>(0).unwrap(), it.ids);
        let obs: Vec<f32> = b
            .get::<f64>("obs")
            .unwrap()
            .iter()
            .map(|&x| x as f32)
            .collect();
        let at: usize = fixed_sizes()[..9].iter().sum();
        let want: Vec<f32> = it.fixed[at..at + 12]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(obs, want);
        assert_eq!(
            b.get::<i64>("frame").unwrap(),
            it.fixed[1..5]
                .iter()
                .map(|&x| i64::from(x))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn json_objects_become_text_of_their_json_and_bad_lines_are_refused_by_number() {
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("steps.jsonl");
    std::fs::write(
        &good,
        "{\"pid\": 1, \"obs\": \"board\", \"step_info\": {\"valid\": true}}\n\n\
         {\"pid\": 0, \"obs\": \"\", \"step_info\": {\"valid\": false, \"why\": \"x\"}}\n",
    )
    .unwrap();
    let dir = d.path().join("b");
    let o = run(&["import", s(&good), s(&dir)]);
    assert!(o.status.success(), "{}", text(&o));
    let buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(
        buf.get(1).unwrap().text("step_info", 0).unwrap(),
        r#"{"valid":false,"why":"x"}"#
    );
    assert_eq!(buf.get(0).unwrap().get::<i64>("pid").unwrap(), [1]);
    // Arrays empty on every line so far are a ragged field (a fixed one of shape [0]
    // cannot be), which takes longer ones later.
    let empty = d.path().join("empty.jsonl");
    std::fs::write(&empty, "{\"tokens\": []}\n{\"tokens\": []}\n").unwrap();
    let o = run(&[
        "import",
        s(&empty),
        s(&d.path().join("e")),
        "--capacity",
        "4",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let mut e = ReplayBuffer::open(d.path().join("e")).unwrap();
    e.add(&[Column::ragged("tokens", &[5i64, 6])]).unwrap();
    assert_eq!(
        e.get(2)
            .unwrap()
            .values("tokens")
            .unwrap()
            .elements::<i64>(0)
            .unwrap(),
        [5, 6]
    );

    let cases: [(&str, &str); 7] = [
        (
            "{\"a\": 1}\n{\"a\": 2, \"b\": 3}\n",
            "line 2: key \"b\", which the first line does not have",
        ),
        ("{\"a\": 1, \"b\": 3}\n{\"a\": 2}\n", "line 2: no key \"b\""),
        ("{\"a\": 1}\n{\"a\": null}\n", "line 2: key \"a\": null"),
        (
            "{\"a\": 1}\n{\"a\": \"one\"}\n",
            "line 2: key \"a\": a string after values that were whole numbers",
        ),
        (
            "{\"a\": [[1, 2], [3]]}\n",
            "line 1: key \"a\": a ragged nested array",
        ),
        (
            "{\"a\": [[1, 2]]}\n{\"a\": [[1, 2], [3, 4]]}\n",
            "key \"a\": nested arrays whose shape varies",
        ),
        ("{\"a\": 1}\n[1, 2]\n", "line 2: an array, not an object"),
    ];
    for (i, (content, said)) in cases.iter().enumerate() {
        let bad = d.path().join(format!("bad{i}.jsonl"));
        std::fs::write(&bad, content).unwrap();
        let target = d.path().join(format!("nothing{i}"));
        let o = run(&["import", s(&bad), s(&target)]);
        assert_eq!(o.status.code(), Some(2), "{content}: {}", text(&o));
        assert!(text(&o).contains(said), "{content}: {}", text(&o));
        assert!(!target.exists(), "{content}: no buffer appears");
    }
}

#[test]
fn a_parquet_file_with_a_null_or_a_type_without_a_field_is_refused_by_column() {
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, field: Field, column: Arc<dyn Array>| {
        let path = d.path().join(name);
        let schema = Arc::new(ArrowSchema::new(vec![field]));
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema.clone(), None)
                .unwrap();
        w.write(&RecordBatch::try_new(schema, vec![column]).unwrap())
            .unwrap();
        w.close().unwrap();
        path
    };
    let nulls = write(
        "nulls.parquet",
        Field::new("reward", DataType::Int64, true),
        Arc::new(Int64Array::from(vec![Some(1), Some(2), None, Some(4)])),
    );
    let dates = write(
        "dates.parquet",
        Field::new("day", DataType::Date32, false),
        Arc::new(arrow_array::Date32Array::from(vec![1, 2])),
    );
    let junk = d.path().join("junk.parquet");
    std::fs::write(&junk, b"PAR1 not really").unwrap();
    for (file, said) in [
        (&nulls, "column \"reward\", row 2: null"),
        (
            &dates,
            "column \"day\": type Date32 has no replaystore field",
        ),
        (&junk, "not a readable Parquet file"),
    ] {
        let target = d.path().join("nothing");
        let o = run(&["import", s(file), s(&target)]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(said), "{}", text(&o));
        assert!(!target.exists());
    }
    // A column without nulls but declared nullable (as pandas writes) is fine.
    let ok = write(
        "ok.parquet",
        Field::new("reward", DataType::Int64, true),
        Arc::new(Int64Array::from(vec![5, 6])),
    );
    let o = run(&["import", s(&ok), s(&d.path().join("b"))]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Promise: a Parquet export leaves removed items out unless `--include-removed`, which
/// adds a nullable `removed` column naming each removed item's cause.
#[test]
fn a_parquet_export_keeps_removed_items_only_when_asked_with_their_cause() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("b");
    let schema = Schema::builder()
        .field("x", DType::I64, &[])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema, 16).item_states()).unwrap();
    buf.add_batch(&[Column::new("x", &(0..6i64).collect::<Vec<_>>())])
        .unwrap();
    buf.remove(&[1, 4]).unwrap();
    buf.close().unwrap();
    let out = d.path().join("a.parquet");
    let read = |path: &Path| -> RecordBatch {
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
        let batches: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        arrow_select_concat(&batches)
    };
    let o = run(&["export", s(&dir), s(&out)]);
    assert!(o.status.success(), "{}", text(&o));
    let rb = read(&out);
    assert_eq!(rb.num_rows(), 4);
    assert!(rb.column_by_name("removed").is_none());
    let o = run(&["export", s(&dir), s(&out), "--include-removed"]);
    assert!(o.status.success(), "{}", text(&o));
    let rb = read(&out);
    assert_eq!(rb.num_rows(), 6);
    let removed = rb.column_by_name("removed").unwrap().as_string::<i32>();
    let got: Vec<Option<&str>> = removed.iter().collect();
    assert_eq!(
        got,
        [None, Some("explicit"), None, None, Some("explicit"), None]
    );
}

/// The rows of `batches`, one after another, as one batch (a small file has one).
fn arrow_select_concat(batches: &[RecordBatch]) -> RecordBatch {
    assert_eq!(batches.len(), 1, "a small export is one row group");
    batches[0].clone()
}
