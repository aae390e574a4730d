//! Helpers shared by the integration tests: a schema with every kind of field, and items
//! that are a pure function of their logical index, so any torn, stale or misplaced
//! byte is detectable.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use replaystore::{Column, DType, ReplayBuffer, Role, Schema, Writes};

pub mod fingerprint;

pub fn schema() -> Schema {
    Schema::builder()
        .field("obs", DType::F32, &[5])
        .field("action", DType::I64, &[])
        .field("reward", DType::F64, &[])
        .field("done", DType::Bool, &[])
        .field("frame", DType::U8, &[3, 7])
        .field("tag", DType::U16, &[2])
        .build()
        .unwrap()
}

/// The item stored at logical index `i`.
pub struct Item {
    pub obs: [f32; 5],
    pub action: i64,
    pub reward: f64,
    pub done: bool,
    pub frame: [u8; 21],
    pub tag: [u16; 2],
}

pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn item(i: u64) -> Item {
    let h = mix(i);
    let mut frame = [0u8; 21];
    for (k, b) in frame.iter_mut().enumerate() {
        *b = (mix(h ^ k as u64) & 0xff) as u8;
    }
    Item {
        obs: std::array::from_fn(|k| (i as f32) * 0.5 + k as f32),
        action: (h % 1000) as i64 - 500,
        reward: f64::from_bits(h >> 12 | 0x3ff0_0000_0000_0000),
        done: h.is_multiple_of(7),
        frame,
        tag: [(i & 0xffff) as u16, (h >> 48) as u16],
    }
}

pub fn columns(it: &Item) -> [Column<'_>; 6] {
    [
        Column::new("obs", &it.obs),
        Column::scalar("action", &it.action),
        Column::scalar("reward", &it.reward),
        Column::scalar("done", &it.done),
        Column::new("frame", &it.frame).with_shape(&[3, 7]),
        Column::new("tag", &it.tag),
    ]
}

/// The bytes an item must read back as, field after field.
pub fn item_bytes(i: u64) -> Vec<u8> {
    let it = item(i);
    columns(&it)
        .iter()
        .flat_map(|c| c.bytes().iter().copied())
        .collect()
}

/// Adds items `from..to` as one batch (columns with the batch dimension first).
pub fn add_range<R: Writes>(buf: &mut ReplayBuffer<R>, from: u64, to: u64) -> std::ops::Range<u64> {
    let items: Vec<Item> = (from..to).map(item).collect();
    let n = items.len();
    let obs: Vec<f32> = items.iter().flat_map(|x| x.obs).collect();
    let action: Vec<i64> = items.iter().map(|x| x.action).collect();
    let reward: Vec<f64> = items.iter().map(|x| x.reward).collect();
    let done: Vec<bool> = items.iter().map(|x| x.done).collect();
    let frame: Vec<u8> = items.iter().flat_map(|x| x.frame).collect();
    let tag: Vec<u16> = items.iter().flat_map(|x| x.tag).collect();
    buf.add_batch(&[
        Column::new("obs", &obs).with_shape(&[n, 5]),
        Column::new("action", &action),
        Column::new("reward", &reward),
        Column::new("done", &done),
        Column::new("frame", &frame).with_shape(&[n, 3, 7]),
        Column::new("tag", &tag).with_shape(&[n, 2]),
    ])
    .unwrap()
}

/// Asserts every kept item (live, not removed) reads back as the item its `obs[0]`
/// numbers (twice the number it was added as): for a buffer whose policy moves kept
/// items to the tail under new indices, so the number may be below the index, never
/// above. Returns the kept indices.
pub fn assert_kept_items_intact<R: Role>(buf: &ReplayBuffer<R>, ctx: &str) -> Vec<u64> {
    let removed = removed_of(buf);
    let kept: Vec<u64> = buf.live().filter(|i| !removed.contains(i)).collect();
    let batch = buf.get_many(&kept).unwrap();
    let obs = batch.get::<f32>("obs").unwrap();
    for (r, &i) in kept.iter().enumerate() {
        let number = (obs[r * 5] * 2.0) as u64;
        assert!(number <= i, "{ctx}: item {i} holds item {number}");
        assert_eq!(batch.item_bytes(r), item_bytes(number), "{ctx}: item {i}");
    }
    kept
}

/// Asserts every live item reads back as `item_bytes(index)` (with item states: every
/// live item not removed).
pub fn assert_live_items_intact<R: Role>(buf: &ReplayBuffer<R>) {
    let mut live: Vec<u64> = buf.live().collect();
    if let Ok(states) = buf.item_states(&live) {
        let removed: std::collections::HashSet<u64> = live
            .iter()
            .zip(states)
            .filter(|(_, s)| s.removed.is_some())
            .map(|(&i, _)| i)
            .collect();
        live.retain(|i| !removed.contains(i));
    }
    for chunk in live.chunks(4096) {
        let batch = buf.get_many(chunk).unwrap();
        for (r, &i) in chunk.iter().enumerate() {
            assert_eq!(batch.item_bytes(r), item_bytes(i), "item {i} differs");
        }
    }
}

/// The removed items of `buf`'s live range (item states).
pub fn removed_of<R: Role>(buf: &ReplayBuffer<R>) -> std::collections::BTreeSet<u64> {
    let live: Vec<u64> = buf.live().collect();
    let states = buf.item_states(&live).unwrap();
    live.into_iter()
        .zip(states)
        .filter(|(_, s)| s.removed.is_some())
        .map(|(i, _)| i)
        .collect()
}

/// A sink over arrays the caller allocated once, as a binding's NumPy arrays are: it
/// hands them out as they are, one per array of the layout (the draw checks their sizes).
pub struct Arrays(pub Vec<Vec<u8>>);

impl replaystore::Sink for Arrays {
    fn arrays(&mut self, _layout: &replaystore::Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
        Ok(self.0.iter_mut().map(|a| &mut a[..]).collect())
    }
}

/// Starts child test `name` of this binary (the test re-executed) with `env` set to
/// `value`, its stdout piped.
pub fn spawn_child(
    name: &str,
    env: &str,
    value: &std::ffi::OsStr,
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    spawn_child_env(name, &[(env, value.to_os_string())])
}

/// `spawn_child` with several environment variables.
pub fn spawn_child_env(
    name: &str,
    envs: &[(&str, std::ffi::OsString)],
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// Runs the child test `name` of this binary with `env` set to the buffer path, collects
/// what it prints as `marker=...` until `marker=done`, then kills it with SIGKILL.
pub fn run_child_then_kill(name: &str, env: &str, path: &std::path::Path) -> Vec<String> {
    let (mut child, mut stdout) = spawn_child(name, env, path.as_os_str());
    let mut said = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "child {name} ended early"
        );
        // libtest may print its own header on the same line: look for the marker.
        let Some((_, what)) = line.trim().split_once("marker=") else {
            continue;
        };
        if what == "done" {
            break;
        }
        said.push(what.to_owned());
    }
    child.kill().unwrap();
    child.wait().unwrap();
    said
}

/// Offsets FORMAT.md gives: the superblock's bytes, the commit slots and their length,
/// a segment header's length.
pub const SUPERBLOCK_LEN: usize = 96;
pub const COMMIT_SLOTS: [usize; 2] = [4096, 8192];
pub const COMMIT_LEN: usize = 96;
pub const SEGMENT_HEADER_LEN: usize = 68;
const BOOT_ID_OFF: usize = 72;
const COMMIT_CRC_OFF: usize = 92;

/// Rewrites the boot id of the newest commit, as a reboot would leave it.
pub fn pretend_reboot(manifest: &std::path::Path) {
    let mut b = std::fs::read(manifest).unwrap();
    let generation = |b: &[u8], s: usize| u64::from_le_bytes(b[s + 8..s + 16].try_into().unwrap());
    let slot = if generation(&b, COMMIT_SLOTS[1]) > generation(&b, COMMIT_SLOTS[0]) {
        COMMIT_SLOTS[1]
    } else {
        COMMIT_SLOTS[0]
    };
    b[slot + BOOT_ID_OFF..slot + BOOT_ID_OFF + 16].copy_from_slice(&[0xee; 16]);
    let crc = replaystore::internal::format::crc32(&b[slot..slot + COMMIT_CRC_OFF]);
    b[slot + COMMIT_CRC_OFF..slot + COMMIT_CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(manifest, b).unwrap();
}

/// A xorshift64 step: the tests' own reproducible randomness.
pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Runs child test `name` of this binary with `env` set to `value`, hands each line it
/// prints to `note` until `lines` lines were seen (or it ends), kills it with SIGKILL,
/// then hands over the lines still in the pipe: they were written before the kill.
pub fn run_child_and_kill_after(
    name: &str,
    env: &str,
    value: &str,
    lines: u64,
    mut note: impl FnMut(&str),
) {
    let (mut child, mut stdout) = spawn_child(name, env, value.as_ref());
    let mut line = String::new();
    for _ in 0..lines {
        line.clear();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        note(&line);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    for l in rest.lines() {
        note(l);
    }
}

/// A file-operation seam that, once armed, counts operations and at operation `stop_at`
/// announces `marker=done` and waits to be killed: the parent's SIGKILL then lands
/// exactly between two operations. Unarmed (or with `stop_at` past the end), it counts.
#[derive(Debug)]
pub struct StopIo {
    inner: replaystore::io::OsIo,
    armed: std::sync::atomic::AtomicBool,
    ops: std::sync::atomic::AtomicU64,
    stop_at: u64,
}

impl StopIo {
    pub fn new(stop_at: u64) -> std::sync::Arc<StopIo> {
        std::sync::Arc::new(StopIo {
            inner: replaystore::io::OsIo,
            armed: false.into(),
            ops: 0.into(),
            stop_at,
        })
    }

    pub fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn disarm(&self) -> u64 {
        self.armed.store(false, std::sync::atomic::Ordering::SeqCst);
        self.ops.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn tick(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if !self.armed.load(SeqCst) {
            return;
        }
        if self.ops.fetch_add(1, SeqCst) == self.stop_at {
            wait_for_kill();
        }
    }
}

/// Tells the parent to kill this process now, and waits for it.
pub fn wait_for_kill() -> ! {
    use std::io::Write;
    println!("marker=done");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

/// `impl Io for $ty`: every operation runs `$before` (with `$this` bound to `self`) and
/// then the same operation of `$this.inner`, except those given in `{ ... }`, which are
/// written out there. One list of the seam's operations for every test seam.
#[macro_export]
macro_rules! forward_io {
    ($ty:ty, |$this:ident| $before:expr, { $($own:tt)* }) => {
        $crate::forward_io!(@ $ty, $this, $before, { $($own)* },
            create_new(path: &std::path::Path) -> std::io::Result<std::fs::File>;
            open_rw(path: &std::path::Path) -> std::io::Result<std::fs::File>;
            open_ro(path: &std::path::Path) -> std::io::Result<std::fs::File>;
            read(path: &std::path::Path) -> std::io::Result<Vec<u8>>;
            read_at(file: &std::fs::File, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
            allocate(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<()>;
            set_len(file: &std::fs::File, len: u64) -> std::io::Result<()>;
            write_at(file: &std::fs::File, offset: u64, bytes: &[u8]) -> std::io::Result<()>;
            sync_data(file: &std::fs::File) -> std::io::Result<()>;
            sync_dir(dir: &std::path::Path) -> std::io::Result<()>;
            map(file: &std::fs::File, len: u64, access: replaystore::io::Access) -> std::io::Result<memmap2::MmapRaw>;
            flush_map(map: &memmap2::MmapRaw, offset: usize, len: usize) -> std::io::Result<()>;
            create_dir_all(dir: &std::path::Path) -> std::io::Result<()>;
            try_lock_exclusive(file: &std::fs::File) -> std::io::Result<()>;
            rename(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()>;
            remove_file(path: &std::path::Path) -> std::io::Result<()>;
            hard_link(original: &std::path::Path, link: &std::path::Path) -> std::io::Result<()>;
            copy_file(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()>;
            fs_magic(dir: &std::path::Path) -> std::io::Result<i64>;
            remove_dir(dir: &std::path::Path) -> std::io::Result<()>;
        );
    };
    (@ $ty:ty, $this:ident, $before:expr, { $($own:tt)* },
        $($name:ident($($arg:ident: $argty:ty),*) -> $ret:ty;)*) => {
        impl replaystore::io::Io for $ty {
            $(fn $name(&self, $($arg: $argty),*) -> $ret {
                let $this = self;
                $before;
                $this.inner.$name($($arg),*)
            })*
            $($own)*
        }
    };
}

forward_io!(StopIo, |io| io.tick(), {
    fn write_behind(
        &self,
        path: &std::path::Path,
        offset: u64,
        len: u64,
        wait: bool,
    ) -> std::io::Result<()> {
        self.tick();
        self.inner.write_behind(path, offset, len, wait)
    }
});

/// A write-behind window a few rows wide for the test schema, so that even the small
/// rings of the crash tests seal rows and start their writeback behind the tail.
pub const SMALL_WRITE_BEHIND: u64 = 512;

/// A child whose output a thread drains into the last number it printed, so the child
/// never blocks on a full pipe while the parent waits on something else; a line saying
/// `bad` fails the parent's next wait or kill.
pub struct Drained {
    child: std::process::Child,
    last: std::sync::Arc<std::sync::atomic::AtomicU64>,
    bad: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drained {
    /// Starts child test `name` with `env` set to `role`.
    pub fn spawn(name: &str, env: &str, role: &str) -> Drained {
        use std::sync::atomic::Ordering::SeqCst;
        let (child, out) = spawn_child(name, env, role.as_ref());
        let last = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let bad = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (l, b) = (last.clone(), bad.clone());
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if line.contains("bad") {
                    b.store(true, SeqCst);
                }
                if let Some(n) = line.split_whitespace().last().and_then(|w| w.parse().ok()) {
                    l.store(n, SeqCst);
                }
            }
        });
        Drained { child, last, bad }
    }

    pub fn last(&self) -> u64 {
        self.last.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until the child has printed a number above `above`.
    pub fn wait_past(&self, above: u64) {
        let start = std::time::Instant::now();
        while self.last() <= above {
            assert!(
                !self.bad.load(std::sync::atomic::Ordering::SeqCst),
                "bad item"
            );
            assert!(
                start.elapsed().as_secs() < 60,
                "child stalled at {}",
                self.last()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    pub fn kill(&mut self) -> u64 {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        // Whatever it printed before dying is in the pipe: let the thread drain it.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !self.bad.load(std::sync::atomic::Ordering::SeqCst),
            "bad item"
        );
        self.last()
    }
}

impl Drop for Drained {
    /// A failing test leaves no child running (killing a dead one is harmless).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child killed when the test ends, passing or failing.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the child test `name` with `env` set to `role`, as a writer that prints
/// `marker=ready` once adding, and returns once it has filled the ring of the buffer at
/// `path` (`capacity` items live): readers started then find it full and lapping.
pub fn spawn_filling_writer(
    name: &str,
    env: &str,
    role: &str,
    path: &std::path::Path,
    capacity: u64,
) -> KillOnDrop {
    let (writer, mut out) = spawn_child(name, env, role.as_ref());
    let writer = KillOnDrop(writer);
    let mut line = String::new();
    while !line.contains("marker=ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "writer died");
    }
    while replaystore::Reader::open(path).unwrap().len() < capacity {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    writer
}

/// What a reader child printed, as `key=value` numbers.
pub fn reader_result(mut stdout: impl BufRead) -> std::collections::HashMap<String, u64> {
    let mut text = String::new();
    stdout.read_to_string(&mut text).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.split_once("marker=result "))
        .unwrap_or_else(|| panic!("reader child printed no result: {text}"))
        .1;
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

/// A count a test reads from environment variable `name` (more kill rounds on demand),
/// or `default`.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A child's endless checking loop: `bad_in(checked)` samples 64 items and counts the
/// bad ones; prints the running count after each batch, or `bad` and exits with 3.
pub fn check_forever(mut bad_in: impl FnMut(u64) -> u64) -> ! {
    let mut checked = 0u64;
    loop {
        if bad_in(checked) > 0 {
            println!("bad");
            std::process::exit(3);
        }
        checked += 64;
        println!("checked {checked}");
    }
}

/// Segment `n` of the one-ring buffer in `dir`.
pub fn segment(dir: &std::path::Path, n: u64) -> std::path::PathBuf {
    dir.join("lane-0").join(format!("seg-{n:08}.dat"))
}

/// Flips bit `bit` of byte `offset` of `file`.
pub fn flip(file: &std::path::Path, offset: usize, bit: u8) {
    let mut b = std::fs::read(file).unwrap();
    b[offset] ^= 1 << bit;
    std::fs::write(file, b).unwrap();
}

/// One run of a kill-points test: child test `child` of this binary, with `env` set to
/// `arg` and `REPLAYSTORE_KILL_POINT` to `point:n`, read to its end. Returns the lines
/// it printed, trimmed, and whether the kill landed (it never printed `finished`; then
/// it must not have exited cleanly either).
fn run_to_kill_point(
    child: &str,
    env: &str,
    arg: &str,
    point: &str,
    n: u64,
) -> (Vec<String>, bool) {
    let (mut proc, mut out) = spawn_child_env(
        child,
        &[
            (env, arg.into()),
            ("REPLAYSTORE_KILL_POINT", format!("{point}:{n}").into()),
        ],
    );
    let mut lines = Vec::new();
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        lines.push(line.trim().to_owned());
        line.clear();
    }
    let status = proc.wait().unwrap();
    let landed = !lines.iter().any(|l| l == "finished");
    if landed {
        assert!(
            !status.success(),
            "{point}:{n}: the child stopped early but cleanly"
        );
    }
    (lines, landed)
}

/// Kills child test `child` at each of `points`, at each of its `ns`-th hits, on a
/// fresh buffer folder each time: `start(dir, n)` makes the buffer and returns the
/// child's argument (passed in `env`), and `check(dir, lines, ctx)` judges the buffer the
/// kill left from the lines the child printed. Fails unless every point was reached at
/// least once.
pub fn kill_at_each_point(
    child: &str,
    env: &str,
    points: &[&'static str],
    ns: &[u64],
    mut start: impl FnMut(&std::path::Path, u64) -> String,
    mut check: impl FnMut(&std::path::Path, &[String], &str),
) {
    let mut landed = std::collections::BTreeMap::<&str, u64>::new();
    for &point in points {
        for &n in ns {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("b");
            let arg = start(&dir, n);
            let (lines, hit) = run_to_kill_point(child, env, &arg, point, n);
            if hit {
                *landed.entry(point).or_default() += 1;
            }
            check(&dir, &lines, &format!("kill point {point}:{n}"));
        }
    }
    println!("kills at named points: {landed:?}");
    for point in points {
        assert!(
            landed.get(point).copied().unwrap_or(0) > 0,
            "{point} was never reached"
        );
    }
}
