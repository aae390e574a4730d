//! Promise (issue 27, point 3): every draw of every handle is one `Request` into one
//! `Sink`. What a sink receives is exactly what `sample` returns, for every unit; a
//! value no builder can rule out (a beta, a relabel's fields) is refused by name; a name the draw would return
//! twice is refused, never hidden; a draw refused before its units are picked asks no
//! sink for storage; a sink of the wrong size is refused naming the array.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use replaystore::{
    Batch, Column, Config, DType, Error, GoalStrategy, Lanes, Layout, Reader, Relabel,
    ReplayBuffer, Request, Schema, Sink,
};

/// A sink that allocates what each layout asks for, and remembers the layouts.
#[derive(Default)]
struct Recording {
    asked: Vec<Vec<(String, DType, Vec<usize>)>>,
    arrays: Vec<Vec<u8>>,
}

impl Sink for Recording {
    fn arrays(&mut self, layout: &Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
        let arrays = layout.arrays();
        self.asked.push(
            (arrays.iter())
                .map(|a| (a.full_name(), a.dtype, a.shape()))
                .collect(),
        );
        // Not zeroed: the draw must write every byte.
        self.arrays = arrays.iter().map(|a| vec![0xA5; a.bytes()]).collect();
        Ok(self.arrays.iter_mut().map(|a| &mut a[..]).collect())
    }
}

fn episodic(dir: &std::path::Path, config: impl Fn(Config) -> Config) -> ReplayBuffer {
    let schema = Schema::builder()
        .field("obs", DType::F32, &[2])
        .field("action", DType::I64, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(dir, config(Config::new(schema, 200).seed(3))).unwrap();
    for e in 0..12u64 {
        buf.add_reset(&[Column::new("obs", &[e as f32, 0.0])])
            .unwrap();
        let len = 3 + e % 5;
        for t in 1..=len {
            let obs = [e as f32, t as f32];
            let (a, r) = (t as i64, 0.5f32 * t as f32);
            let cols = [
                Column::new("obs", &obs),
                Column::scalar("action", &a),
                Column::scalar("reward", &r),
            ];
            buf.add_step(&cols, t == len, false).unwrap();
        }
    }
    buf
}

/// The arrays of `batch` in the draw's order, as bytes, with `indices` and `weights`
/// where the layout has them.
fn batch_arrays(batch: &Batch, asked: &[(String, DType, Vec<usize>)]) -> Vec<Vec<u8>> {
    asked
        .iter()
        .map(|(name, _, _)| match name.as_str() {
            "indices" => batch
                .indices()
                .iter()
                .flat_map(|i| i.to_le_bytes())
                .collect(),
            "weights" => batch
                .weights()
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect(),
            other => batch.field(other).unwrap().bytes().to_vec(),
        })
        .collect()
}

#[test]
fn every_unit_drawn_into_a_callers_sink_is_exactly_what_sample_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = episodic(&tmp.path().join("e"), |c| {
        c.episodic().prioritized(0.7, 1e-3)
    });
    let obs = ["obs"];
    let requests: [Request; _] = [
        Request::rows(17).into(),
        Request::rows(9).prioritized(0.4).into(),
        Request::rows(5).without_replacement().newest(30).into(),
        Request::at(&[12, 40, 3]).into(),
        Request::transitions(11, &obs).nstep(3, 0.9).into(),
        Request::transitions(7, &obs)
            .stack(3)
            .prioritized(0.5)
            .into(),
        Request::transitions(6, &obs)
            .stack(2)
            .nstep(2, 0.5)
            .window()
            .into(),
        Request::sequences(4, 5, &obs).burn_in(2).into(),
        Request::sequences(3, 2, &obs).prioritized(1.0).into(),
        Request::episodes(5).into(),
        Request::episodes(4).prioritized(0.6),
    ];
    for request in requests {
        buf.reseed(77);
        let batch = buf.sample(request).unwrap();
        buf.reseed(77);
        let mut sink = Recording::default();
        buf.sample_into(request, &mut sink).unwrap();
        let asked = &sink.asked[0];
        assert_eq!(sink.asked.len(), 1, "{request:?}: one request for storage");
        assert_eq!(
            batch_arrays(&batch, asked),
            sink.arrays,
            "{request:?}: {asked:?}"
        );
        // The batch holds exactly the layout's arrays, and nothing of an earlier draw.
        let own = asked
            .iter()
            .filter(|a| a.0 == "indices" || a.0 == "weights");
        assert_eq!(batch.fields().len(), asked.len() - own.count());
        for (name, dtype, shape) in asked {
            if let Some(f) = batch.field(name) {
                assert_eq!((f.dtype(), &f.shape()), (*dtype, shape), "{name}");
            }
        }
    }
    // Fragments, from a buffer that keeps them.
    let schema = Schema::builder()
        .field("x", DType::U16, &[3])
        .build()
        .unwrap();
    let config = Config::new(schema, 64).fragments().seed(1);
    let mut frag = ReplayBuffer::create(tmp.path().join("f"), config).unwrap();
    for n in 1..6u16 {
        let xs: Vec<u16> = (0..3 * n).collect();
        frag.add_batch(&[Column::new("x", &xs).with_shape(&[n as usize, 3])])
            .unwrap();
    }
    frag.reseed(5);
    let batch = frag.sample(Request::fragments(6)).unwrap();
    frag.reseed(5);
    let mut sink = Recording::default();
    frag.sample_into(Request::fragments(6), &mut sink).unwrap();
    assert_eq!(batch_arrays(&batch, &sink.asked[0]), sink.arrays);
}

/// A request's shape is the builders' to hold (an option of another unit does not
/// compile: the `request` module's examples); what is left to a draw are values, each
/// refused by name before any storage is asked for.
#[test]
fn a_value_no_builder_can_rule_out_is_refused_by_name_before_the_sink_is_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("achieved", DType::F32, &[])
        .field("desired", DType::F32, &[])
        .build()
        .unwrap();
    let mut buf =
        ReplayBuffer::create(tmp.path().join("h"), Config::new(schema, 64).episodic()).unwrap();
    let nine = 9.0f32;
    let goal = Column::scalar("desired", &nine);
    buf.add_reset(&[Column::scalar("achieved", &0.0f32), goal])
        .unwrap();
    for t in 1..=4 {
        let t = t as f32;
        let reached = Column::scalar("achieved", &t);
        buf.add_step(&[reached, goal], t == 4.0, false).unwrap();
    }
    let obs = ["achieved", "desired"];
    let her = |goal, fraction| Relabel {
        goal,
        achieved: "achieved",
        strategy: GoalStrategy::Future,
        fraction,
    };
    let refused: [(Request, &str); 7] = [
        (Request::rows(4).prioritized(f64::NAN).into(), "beta NaN"),
        (Request::rows(4).prioritized(-0.5).into(), "beta -0.5"),
        (Request::episodes(1).prioritized(f64::INFINITY), "beta inf"),
        (
            Request::transitions(4, &obs)
                .relabel(her("desired", 1.5))
                .into(),
            "fraction 1.5",
        ),
        (
            Request::transitions(4, &obs[..1])
                .relabel(her("desired", 0.5))
                .into(),
            "\"desired\" is not one of the observation fields",
        ),
        (
            Request::transitions(4, &obs)
                .relabel(her("achieved", 0.5))
                .into(),
            "both \"achieved\"",
        ),
        (Request::groups(2, &[]).into(), "at least one field"),
    ];
    for (request, says) in refused {
        let mut sink = Recording::default();
        match buf.sample_into(request, &mut sink) {
            Err(Error::InvalidSample(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{request:?}: {other:?}"),
        }
        assert!(sink.asked.is_empty(), "{request:?} asked for storage");
    }
}

#[test]
fn a_field_named_like_an_array_of_the_draw_is_refused_never_hidden() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("obs", DType::F32, &[])
        .field("terminated", DType::Bool, &[])
        .field("next_obs", DType::F32, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 50).episodic();
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), config).unwrap();
    buf.add_reset(&[Column::scalar("obs", &0.0f32)]).unwrap();
    for t in 1..=5 {
        let (o, end) = (t as f32, t == 5);
        let cols = [
            Column::scalar("obs", &o),
            Column::scalar("terminated", &end),
            Column::scalar("next_obs", &0.0f32),
        ];
        buf.add_step(&cols, t == 5, false).unwrap();
    }
    // A field and the draw's own `terminated`; `next_obs` and obs's next observation.
    for obs in [&["next_obs"][..], &["obs"][..]] {
        match buf.sample(Request::transitions(4, obs)) {
            Err(Error::InvalidSchema(why)) => assert!(why.contains("rename"), "{why}"),
            other => panic!("{obs:?}: {other:?}"),
        }
    }
    // Rows have no arrays of their own but indices: all three fields come back.
    let rows = buf.sample(4).unwrap();
    assert_eq!(rows.fields().len(), 3);
}

#[test]
fn a_batch_reused_across_units_holds_only_the_last_draw() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = episodic(&tmp.path().join("e"), |c| {
        c.episodic().prioritized(1.0, 1e-3)
    });
    let mut batch = Batch::default();
    buf.sample_into(Request::rows(8).prioritized(0.5), &mut batch)
        .unwrap();
    assert_eq!(batch.weights().len(), 8);
    buf.sample_into(Request::transitions(6, &["obs"]), &mut batch)
        .unwrap();
    assert!(batch.weights().is_empty(), "a uniform draw has no weights");
    assert_eq!(batch.len(), 6);
    assert!(batch.field("returns").is_some() && batch.field("next_obs").is_some());
    buf.sample_into(Request::episodes(2), &mut batch).unwrap();
    assert!(batch.field("returns").is_none() && batch.field("next_obs").is_none());
    let offsets = batch.get::<u64>("offsets").unwrap();
    assert_eq!(offsets.last().copied(), Some(batch.len() as u64));
    buf.sample_into(3, &mut batch).unwrap();
    assert_eq!(batch.fields().len(), 3);
    assert_eq!(batch.field("obs").unwrap().shape(), [3, 2]);
}

#[test]
fn readers_draw_every_unit_into_one_sink_and_lanes_refuse_other_units() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("e");
    let mut buf = episodic(&path, |c| c.episodic());
    let mut reader = Reader::open(&path).unwrap();
    assert_eq!(
        reader.sample(Request::at(&[0, 1])).unwrap().indices(),
        [0, 1]
    );
    // With no writer racing it, a reader asks its sink once, for the writer's arrays,
    // and fills them with the writer's bytes for the same seed.
    let requests: [Request; 3] = [
        Request::transitions(2, &["obs"]).into(),
        Request::sequences(2, 2, &["obs"]).into(),
        Request::episodes(1).into(),
    ];
    for request in requests {
        let (mut read, mut written) = (Recording::default(), Recording::default());
        reader.reseed(4);
        reader.sample_into(request, &mut read).unwrap();
        buf.reseed(4);
        buf.sample_into(request, &mut written).unwrap();
        assert_eq!(read.asked.len(), 1, "{request:?}");
        assert_eq!(read.asked, written.asked, "{request:?}");
        assert_eq!(read.arrays, written.arrays, "{request:?}");
    }
    let schema = Schema::builder()
        .field("x", DType::U8, &[])
        .build()
        .unwrap();
    let lanes_dir = tmp.path().join("l");
    let mut lanes = Lanes::create(&lanes_dir, Config::new(schema, 8).fragments(), 2).unwrap();
    lanes
        .add_batch(&[Column::new("x", &[1u8, 2, 3])], &[0, 1, 1])
        .unwrap();
    assert!(matches!(
        lanes.sample(Request::fragments(1)),
        Err(Error::InvalidSample(_))
    ));
    // Given indices across lanes, in the caller's order.
    let lane1 = Lanes::lane_of(1 << 56);
    assert_eq!(lane1, 1);
    let at = [(1 << 56) + 1, 0, 1 << 56];
    let got = lanes.sample(Request::at(&at)).unwrap();
    assert_eq!(got.indices(), at);
    assert_eq!(got.get::<u8>("x").unwrap(), [3, 1, 2]);
}

#[test]
fn a_draw_refused_before_its_units_are_picked_asks_no_sink() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("x", DType::U32, &[])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), Config::new(schema, 8)).unwrap();
    let mut sink = Recording::default();
    assert!(matches!(buf.sample_into(4, &mut sink), Err(Error::Empty)));
    assert!(matches!(
        buf.sample_into(Request::rows(4).prioritized(0.4), &mut sink),
        Err(Error::NotPrioritized { .. })
    ));
    assert!(matches!(
        buf.sample_into(Request::rows(usize::MAX >> 2), &mut sink),
        Err(Error::TooLarge { .. })
    ));
    assert!(sink.asked.is_empty());
    // A sink of the wrong size is refused naming the array it got wrong.
    buf.add(&[Column::scalar("x", &9u32)]).unwrap();
    let mut short = common::Arrays(vec![vec![0; 4 * 3], vec![0; 8 * 4]]);
    match buf.sample_into(4, &mut short) {
        Err(Error::OutputSize {
            field,
            expected,
            got,
        }) => assert_eq!((field.as_str(), expected, got), ("x", 16, 12)),
        other => panic!("{other:?}"),
    }
}
