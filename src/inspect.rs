//! Read-only looks at a buffer: [`inspect`] (what `replaystore info` prints) and
//! [`verify`] (every checksum and stamp). Neither takes the lock nor writes a byte, so
//! they are safe on a damaged buffer and next to a running writer.

use std::path::{Path, PathBuf};

use crate::algo::recovery::Recovered;
use crate::error::{Error, Finding, Result};
use crate::format::heap::VarSlot;
use crate::format::manifest::{COMMIT_LEN, COMMIT_SLOT_OFFSET, Commit, HeapGeometry};
use crate::format::segment::hex;
use crate::parts::heap::Heap;
use crate::parts::hooks::{Checking, Found};
use crate::parts::priorities::{PriorityInfo, TreeCopy};
use crate::parts::recovery::{item_slots, recover_range};
use crate::parts::set::Parts;
use crate::schema::{Schema, VarField, VarKind};
use crate::storage::io::{self, Access, Io};
use crate::storage::ring::Ring;
use crate::storage::{self, MANIFEST, Manifest};

/// What a buffer's files say about it.
#[derive(Clone, Debug)]
pub struct Info {
    /// The directory.
    pub dir: PathBuf,
    /// The buffer's uuid, in hex.
    pub uuid: String,
    /// The format version of its files.
    pub format_version: u32,
    /// The schema.
    pub schema: Schema,
    /// Items the ring holds.
    pub capacity: u64,
    /// Slots per segment file.
    pub segment_slots: u64,
    /// Segment files.
    pub segment_count: u64,
    /// Bytes per slot.
    pub row_stride: u64,
    /// The chunk ring of a buffer with variable-length fields (format version 2).
    pub heap: Option<HeapGeometry>,
    /// The newest valid commit.
    pub commit: Commit,
    /// Items readers drew that no commit counts yet (their progress page's count; 0
    /// when the page is missing or its header unsound): the draws in all are
    /// `commit.sampled + reader_draws` ([`Info::sampled`]).
    pub reader_draws: u64,
    /// The live items' indices as readers and the next open see them: the commit's,
    /// plus what a running (or killed) writer added since, proved by their stamps on
    /// this boot (`verify` reports the same range).
    pub live: std::ops::Range<u64>,
    /// Payload bytes of the live items.
    pub data_bytes: u64,
    /// Bytes the files occupy on disk: they take disk as data arrives.
    pub bytes_on_disk: u64,
    /// The most the files may take on disk, once every segment is written.
    pub bytes_at_most: u64,
    /// Priorities of the live items, for a prioritized buffer.
    pub priorities: Option<PriorityInfo>,
    /// Episodes of the live items, for an episodic buffer.
    pub episodes: Option<EpisodeStats>,
    /// Eviction removes whole episodes (superblock flag bit 2).
    pub whole_episodes: bool,
    /// Lengths of the live items' variable-length values, when the schema has any.
    pub values: Option<ValueStats>,
    /// Rows record their `add` / `add_batch` call (superblock flag bit 3): the
    /// `fragments` storage unit.
    pub fragments: bool,
    /// Removed and live items and their uses, for a buffer with item states (format
    /// version 3).
    pub items: Option<crate::parts::lifecycle::ItemStats>,
}

/// Episode counts and lengths of an episodic buffer's live rows (as of the newest
/// commit), from the rows' step headers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EpisodeStats {
    /// Episodes with a live row.
    pub count: u64,
    /// Of those, the ones that ended (terminated, truncated or abandoned).
    pub ended: u64,
    /// Steps of the shortest, mean and longest episode (as far as their rows are live).
    pub steps: Option<(u64, f64, u64)>,
    /// Mean return of the ended episodes whose every step is live.
    pub mean_return: Option<f64>,
    /// Why the step headers could not be read as episodes, if they could not.
    pub problem: Option<String>,
}

/// Lengths of the live items' variable-length values, read from their slots.
#[derive(Clone, Debug, Default)]
pub struct ValueStats {
    /// One entry per variable-length field, in schema order.
    pub fields: Vec<ValueLengths>,
    /// Bytes of the chunk ring from the oldest live value's chunk to the newest's end:
    /// what the live values occupy, packing and chunk tails included.
    pub chunk_bytes_used: u64,
    /// Bytes the chunk ring holds in all: the most the values may take (`heap_bytes`).
    pub chunk_bytes_capacity: u64,
    /// Bytes of disk the chunk segments take now (they are reserved as values arrive).
    pub chunk_bytes_on_disk: u64,
    /// When the ring is full before capacity, an add evicts the oldest items for room
    /// (`Config::evict_for_room`) instead of being refused.
    pub evict_for_room: bool,
    /// Why the slots could not be read, if they could not.
    pub problem: Option<String>,
}

/// Length statistics of one variable-length field over the live items.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValueLengths {
    /// The field.
    pub field: String,
    /// What a length counts: `"bytes"` for text and bytes, `"elements"` for ragged arrays.
    pub unit: &'static str,
    /// `(min, median, p99, max)` lengths (nearest rank), `None` with no live item.
    pub lengths: Option<(u64, u64, u64, u64)>,
    /// Bytes of all its live values.
    pub bytes: u64,
}

impl ValueLengths {
    /// The statistics of `lengths` (in `unit`s) whose values take `bytes` in all.
    fn of(field: &VarField, mut lengths: Vec<u64>, bytes: u64) -> ValueLengths {
        lengths.sort_unstable();
        let rank = |q: f64| {
            let k = ((q * lengths.len() as f64).ceil() as usize).max(1) - 1;
            lengths.get(k).copied().unwrap_or(0)
        };
        ValueLengths {
            field: field.name().to_string(),
            unit: match field.kind() {
                VarKind::Ragged(_) => "elements",
                VarKind::Bytes | VarKind::Str => "bytes",
            },
            lengths: (!lengths.is_empty()).then(|| (rank(0.0), rank(0.5), rank(0.99), rank(1.0))),
            bytes,
        }
    }
}

impl EpisodeStats {
    fn of(episodes: &[crate::parts::episodes::EpisodeInfo]) -> EpisodeStats {
        let count = episodes.len() as u64;
        let ended = episodes.iter().filter(|e| e.end.is_some()).count() as u64;
        let steps = (count > 0).then(|| {
            let s = episodes
                .iter()
                .map(crate::parts::episodes::EpisodeInfo::steps);
            let total: u64 = s.clone().sum();
            (
                s.clone().min().unwrap_or(0),
                total as f64 / count as f64,
                s.max().unwrap_or(0),
            )
        });
        let whole: Vec<f64> = episodes
            .iter()
            .filter(|e| e.end.is_some() && e.ret_complete)
            .map(|e| e.ret)
            .collect();
        EpisodeStats {
            count,
            ended,
            steps,
            mean_return: (!whole.is_empty())
                .then(|| whole.iter().sum::<f64>() / whole.len() as f64),
            problem: None,
        }
    }
}

impl Info {
    /// Live items (`live`: a running writer's items since its last commit included);
    /// with item states, the removed ones (as the state file says now) are not counted.
    pub fn len(&self) -> u64 {
        let removed = self.items.as_ref().map_or(0, |i| i.removed);
        (self.live.end - self.live.start).saturating_sub(removed)
    }

    /// Whether no item was live at the newest commit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items drawn: every draw the newest commit counts (the writer's and, up to it,
    /// readers'), and readers' draws since.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, Reader, ReplayBuffer, Schema, inspect};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut writer = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// writer.add(&[Column::scalar("x", &1u8)])?;
    /// writer.sample(3)?;
    /// writer.flush()?;
    /// Reader::open(dir.path().join("b"))?.sample(5)?; // usually another process
    /// let info = inspect(dir.path().join("b"))?;
    /// assert_eq!((info.commit.sampled, info.reader_draws, info.sampled()), (3, 5, 8));
    /// writer.flush()?; // the next commit counts the reader's draws
    /// assert_eq!(inspect(dir.path().join("b"))?.commit.sampled, 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sampled(&self) -> u64 {
        self.commit.sampled.saturating_add(self.reader_draws)
    }
}

/// Reads what a buffer's manifest says, without locking or changing anything.
///
/// ```
/// # use replaystore::{Config, DType, ReplayBuffer, Schema, inspect};
/// # let dir = tempfile::tempdir()?;
/// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
/// ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?.close()?;
/// let info = inspect(dir.path().join("b"))?;
/// assert_eq!((info.capacity, info.len()), (10, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn inspect(dir: impl AsRef<Path>) -> Result<Info> {
    let dir = &storage::resolve_root(dir.as_ref());
    let m = Manifest::load(&io::OsIo, dir)?;
    let commit = m.newest_commit()?;
    let sb = &m.superblock;
    let live = live_range(dir, &m, &commit);
    let (head, tail) = (live.start, live.end);
    let priorities = if sb.prioritized {
        let copy = TreeCopy::read(&io::OsIo, dir, sb)?;
        Some(PriorityInfo::of(&copy, sb, commit.head, commit.tail))
    } else {
        None
    };
    let episodes = sb.episodic.then(|| episode_stats(dir, &m, head, tail));
    let values = sb.heap.map(|h| value_stats(dir, &m, h, head, tail));
    let value_bytes: u64 = values.iter().flat_map(|v| &v.fields).map(|f| f.bytes).sum();
    let items = match sb.lifecycle {
        true => Some(crate::parts::lifecycle::ItemStats::read(
            &io::OsIo,
            dir,
            sb,
            head,
            tail,
        )?),
        false => None,
    };
    Ok(Info {
        items,
        values,
        priorities,
        episodes,
        dir: dir.to_path_buf(),
        uuid: hex(&sb.uuid),
        format_version: sb.version(),
        capacity: sb.capacity,
        segment_slots: sb.segment_slots,
        segment_count: sb.segment_count,
        row_stride: sb.row_stride,
        heap: sb.heap,
        whole_episodes: sb.whole_episodes,
        fragments: sb.fragments,
        data_bytes: (tail - head) * sb.item_bytes + value_bytes,
        bytes_on_disk: storage::bytes_on_disk(dir, sb),
        bytes_at_most: storage::bytes_at_most(dir, sb),
        reader_draws: pending_reader_draws(dir, sb),
        commit,
        live,
        schema: m.schema,
    })
}

/// The reader draws the progress page holds that no commit counts yet; 0 when the
/// page is missing or its header is not this buffer's (then its words mean nothing).
fn pending_reader_draws(dir: &Path, sb: &crate::format::manifest::Superblock) -> u64 {
    use crate::format::progress;
    let Ok(bytes) = io::OsIo.read(&storage::progress_path(dir)) else {
        return 0;
    };
    match progress::check(&bytes, &sb.uuid) {
        Ok(()) => progress::reader_draws(&bytes),
        Err(_) => 0,
    }
}

/// The live range `inspect` reports: the commit's when the last writer closed the
/// buffer; else what `verify` finds and the next open keeps (items past the commit
/// proved by their stamps on this boot). The commit's when the files cannot say more.
fn live_range(dir: &Path, m: &Manifest, commit: &Commit) -> std::ops::Range<u64> {
    if commit.is_clean() {
        return commit.head..commit.tail;
    }
    // As `verify`: a superblock that declares far more segments than the folder holds
    // is not looped over.
    let files = io::OsIo
        .list_dir(&dir.join(storage::LANE_DIR))
        .map_or(0, |e| e.len() as u64);
    if m.superblock.segment_count > files + 16 {
        return commit.head..commit.tail;
    }
    let Ok(ring) = read_ring(dir, m) else {
        return commit.head..commit.tail;
    };
    let heap = Heap::open(&io::OsIo, dir, &m.superblock, Access::Read)
        .ok()
        .flatten();
    let r = recover_range(m, commit, &ring, heap.as_ref(), storage::same_boot(commit));
    r.head..r.tail
}

/// The row ring of a buffer, opened for reading.
fn read_ring(dir: &Path, m: &Manifest) -> Result<Ring> {
    let sb = &m.superblock;
    (0..sb.segment_count)
        .map(|n| {
            storage::open_segment(
                &io::OsIo,
                dir,
                &storage::SegmentSet::rows(sb),
                n,
                Access::Read,
            )
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|segments| Ring::new(segments, m.layout.clone(), sb.capacity, sb.segment_slots))
}

/// Value length statistics of the rows `head..tail`, read from their slots (the values
/// themselves are not read: `verify` checks them).
fn value_stats(dir: &Path, m: &Manifest, heap: HeapGeometry, head: u64, tail: u64) -> ValueStats {
    let capacity = heap.capacity * heap.chunk_bytes();
    let on_disk =
        crate::storage::SegmentSet::heap(&m.superblock).map_or(0, |set| set.bytes_on_disk(dir));
    let evict_for_room = m.superblock.evict_for_room;
    let problem = |e: String| ValueStats {
        chunk_bytes_capacity: capacity,
        chunk_bytes_on_disk: on_disk,
        evict_for_room,
        problem: Some(e),
        ..ValueStats::default()
    };
    let ring = match read_ring(dir, m) {
        Ok(ring) => ring,
        Err(e) => return problem(e.to_string()),
    };
    let (cap, fixed) = (ring.capacity(), ring.layout().fixed);
    let fields = m.schema.var_fields();
    let mut acc: Vec<(Vec<u64>, u64)> = fields
        .iter()
        .map(|_| (Vec::with_capacity((tail - head) as usize), 0))
        .collect();
    let (mut first, mut last) = (u64::MAX, 0u64);
    for index in head..tail {
        for (v, (field, (lengths, bytes))) in fields.iter().zip(&mut acc).enumerate() {
            let mut b = [0u8; crate::format::heap::SLOT_LEN];
            ring.read_field(index % cap, fixed + v, &mut b);
            let slot = match VarSlot::decode(&b) {
                Ok(slot) => slot,
                Err(p) => {
                    return problem(format!("item {index}: slot of {:?}: {p}", field.name()));
                }
            };
            let len = u64::from(slot.len);
            first = first.min(slot.pos);
            // Saturating: a damaged slot must not panic a look at a damaged buffer.
            last = last.max(slot.pos.saturating_add(len));
            *bytes += len;
            lengths.push(len / field.kind().dtype().size() as u64);
        }
    }
    // Whole chunks from the oldest value's chunk to the end of the newest's.
    let c = heap.chunk_bytes();
    let used = if last > first {
        (last.div_ceil(c) - first / c) * c
    } else {
        0
    };
    ValueStats {
        fields: fields
            .iter()
            .zip(acc)
            .map(|(f, (l, b))| ValueLengths::of(f, l, b))
            .collect(),
        chunk_bytes_used: used,
        chunk_bytes_capacity: capacity,
        chunk_bytes_on_disk: on_disk,
        evict_for_room,
        problem: None,
    }
}

/// Episode statistics of the rows `head..tail`, read from their step headers.
fn episode_stats(dir: &Path, m: &Manifest, head: u64, tail: u64) -> EpisodeStats {
    let ring = match read_ring(dir, m) {
        Ok(ring) => ring,
        Err(e) => {
            return EpisodeStats {
                problem: Some(e.to_string()),
                ..EpisodeStats::default()
            };
        }
    };
    match crate::parts::episodes::Episodes::from_rows(
        &m.schema,
        &ring,
        m.superblock.capacity,
        head,
        tail,
        dir,
    ) {
        Ok(table) => EpisodeStats::of(&table.iter().copied().collect::<Vec<_>>()),
        Err(e) => EpisodeStats {
            problem: Some(e.to_string()),
            ..EpisodeStats::default()
        },
    }
}

/// What `verify` checked and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Damage: the buffer is not sound while this is non-empty.
    pub problems: Vec<Finding>,
    /// Things worth knowing that are not damage (a torn commit slot that the other slot
    /// covers, an unclean shutdown that open will recover).
    pub notes: Vec<String>,
    /// Items whose stamp and checksum were checked.
    pub items_checked: u64,
    /// Segment headers checked.
    pub segments_checked: u64,
    /// Snapshots checked (each as thoroughly as the buffer).
    pub snapshots_checked: u64,
    /// The commit verified against.
    pub commit: Option<Commit>,
    /// After an unclean shutdown: what open will recover.
    pub recovery: Option<Recovered>,
    /// For a lane set: how many lanes were checked (each as a buffer of its own).
    pub lanes: Option<u32>,
    /// For a buffer group: its members' names, lane by lane (each checked as a lane).
    pub members: Option<Vec<String>>,
}

impl Report {
    /// Whether nothing is damaged.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

/// How far `verify` reads, and who hears about its progress.
#[derive(Clone, Copy, Default)]
pub struct VerifyOptions<'a> {
    /// Also check every item, episode and priority-tree node of each snapshot, as the
    /// live buffer's are checked. Without it a snapshot's manifest, commit, segment
    /// headers and priorities header are checked: its segments are mostly hard links to
    /// the live ones, so reading their items again mostly re-reads the same bytes.
    pub deep: bool,
    /// Told how many more items were checked, every `PROGRESS_EVERY` items and at the
    /// end of each buffer (a progress bar's `inc`).
    pub progress: Option<&'a dyn Fn(u64)>,
}

impl std::fmt::Debug for VerifyOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyOptions")
            .field("deep", &self.deep)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Items between two calls of [`VerifyOptions::progress`].
pub const PROGRESS_EVERY: u64 = 1 << 16;

/// Checks a buffer: manifest, both commit slots, every segment header, the stamp and
/// checksum of every live item, the episode chain and the priority tree, and each
/// snapshot as thoroughly (`VerifyOptions::deep`). A lane set is checked lane by lane.
/// `Err` only when `dir` is not a buffer at all.
///
/// ```
/// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema, verify};
/// # let dir = tempfile::tempdir()?;
/// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
/// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
/// buf.add(&[Column::scalar("x", &3u8)])?;
/// buf.close()?;
/// let report = verify(dir.path().join("b"))?;
/// assert!(report.is_sound());
/// assert_eq!(report.items_checked, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify(dir: impl AsRef<Path>) -> Result<Report> {
    verify_with(dir.as_ref(), &io::OsIo)
}

/// `verify` through a given file-operation seam.
pub fn verify_with(dir: &Path, io: &dyn Io) -> Result<Report> {
    let deep = VerifyOptions {
        deep: true,
        progress: None,
    };
    verify_opts_with(dir, io, &deep)
}

/// `verify` with a choice of depth and a progress callback (what `replaystore verify`
/// runs: shallow snapshots unless `--deep`).
///
/// ```
/// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
/// use replaystore::{VerifyOptions, verify_opts};
/// # let dir = tempfile::tempdir()?;
/// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
/// # let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
/// # buf.add(&[Column::scalar("x", &3u8)])?;
/// # buf.close()?;
/// let seen = std::cell::Cell::new(0);
/// let count = |n: u64| seen.set(seen.get() + n);
/// let opts = VerifyOptions { deep: false, progress: Some(&count) };
/// assert!(verify_opts(dir.path().join("b"), &opts)?.is_sound());
/// assert_eq!(seen.get(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_opts(dir: impl AsRef<Path>, opts: &VerifyOptions<'_>) -> Result<Report> {
    verify_opts_with(dir.as_ref(), &io::OsIo, opts)
}

/// `verify_opts` through a given file-operation seam.
pub fn verify_opts_with(dir: &Path, io: &dyn Io, opts: &VerifyOptions<'_>) -> Result<Report> {
    let dir = &storage::resolve_root(dir);
    let lanes_path = dir.join(crate::format::lanes::FILE_NAME);
    let lanes = match storage::read_lanes(io, dir) {
        Ok(Some(file)) => file.lanes,
        Ok(None) if io.kind(&dir.join(crate::format::group::FILE_NAME)).is_ok() => {
            return verify_group(dir, io, opts);
        }
        Ok(None) => return verify_buffer(dir, io, opts),
        Err(e) => {
            // The lane folders can still be checked: count the ones that are there.
            let mut r = Report::default();
            r.problems.push(Finding::of(&e, &lanes_path));
            let present = (0..crate::format::lanes::MAX_LANES)
                .take_while(|&k| matches!(io.kind(&storage::lane_dir(dir, k)), Ok(io::Kind::Dir)))
                .count();
            merge_lanes(dir, io, opts, u32::try_from(present).unwrap_or(0), &mut r)?;
            return Ok(r);
        }
    };
    let mut report = Report::default();
    merge_lanes(dir, io, opts, lanes, &mut report)?;
    Ok(report)
}

/// Verifies the buffer group in `dir`: its `GROUP` file, then each member as a lane of
/// its own (member lanes run 0, 1, ... in creation order). A member folder the file
/// does not list is a creation a kill cut short: a note (the next open removes it).
fn verify_group(dir: &Path, io: &dyn Io, opts: &VerifyOptions<'_>) -> Result<Report> {
    let path = dir.join(crate::format::group::FILE_NAME);
    let mut report = Report::default();
    let doc = match storage::read_group(io, dir) {
        Ok(Some(doc)) => doc,
        Ok(None) => {
            return Err(Error::NotABuffer {
                dir: dir.to_path_buf(),
            });
        }
        Err(e) => {
            report.problems.push(Finding::of(&e, &path));
            return Ok(report);
        }
    };
    let mut lanes: Vec<u32> = doc.members.iter().map(|m| m.lane).collect();
    lanes.sort_unstable();
    if lanes.iter().zip(0u32..).any(|(&l, k)| l != k) {
        report.problems.push(Finding {
            file: path.clone(),
            offset: 0,
            what: format!("member lanes {lanes:?}, expected 0..{}", lanes.len()),
        });
    }
    merge_lanes(dir, io, opts, lanes.len() as u32, &mut report)?;
    let listed = |k: u32| doc.members.iter().any(|m| m.lane == k);
    for k in (0..crate::format::lanes::MAX_LANES).filter(|&k| !listed(k)) {
        if io.kind(&storage::lane_dir(dir, k)).is_ok() {
            report.notes.push(format!(
                "{}: a member folder GROUP does not list (a creation a kill cut short); \
                 the next open removes it",
                storage::lane_dir(dir, k).display()
            ));
        }
    }
    let mut named: Vec<&crate::format::group::MemberDoc> = doc.members.iter().collect();
    named.sort_by_key(|m| m.lane);
    report.members = Some(named.into_iter().map(|m| m.name.clone()).collect());
    Ok(report)
}

/// Verifies lanes `0..lanes` of the lane set in `dir` into `report`, and that each lane
/// holds only its own indices (a swapped or copied lane folder would not).
fn merge_lanes(
    dir: &Path,
    io: &dyn Io,
    opts: &VerifyOptions<'_>,
    lanes: u32,
    report: &mut Report,
) -> Result<()> {
    use crate::format::lanes::first_index;
    report.lanes = Some(lanes);
    for k in 0..lanes {
        let lane = storage::lane_dir(dir, k);
        let sub = match verify_buffer(&lane, io, opts) {
            Ok(sub) => sub,
            Err(e @ Error::NotABuffer { .. }) => {
                report.problems.push(Finding {
                    file: lane,
                    offset: 0,
                    what: format!("lane {k} is missing: {e}"),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some(c) = sub.commit {
            let own = first_index(k)..first_index(k + 1);
            if c.head < own.start || c.tail < c.head || c.tail > own.end {
                report.problems.push(Finding {
                    file: lane.join(MANIFEST),
                    offset: 0,
                    what: format!(
                        "lane {k} holds indices {}..{}, expected them within {}..{}: \
                         a lane folder was moved or copied",
                        c.head, c.tail, own.start, own.end
                    ),
                });
            }
        }
        report.problems.extend(sub.problems);
        report
            .notes
            .extend(sub.notes.into_iter().map(|n| format!("lane {k}: {n}")));
        report.items_checked += sub.items_checked;
        report.segments_checked += sub.segments_checked;
        report.snapshots_checked += sub.snapshots_checked;
    }
    Ok(())
}

/// Verifies one buffer of one ring and its snapshots.
fn verify_buffer(dir: &Path, io: &dyn Io, opts: &VerifyOptions<'_>) -> Result<Report> {
    let mut report = match crate::parts::snapshot::pending_restore(io, dir) {
        Ok(Some(state)) => {
            // The live files are part old, part restored until the next open finishes:
            // only the snapshot they are becoming is worth checking.
            let mut r = Report::default();
            r.notes.push(format!(
                "a set_state to snapshot {:?} was interrupted; the next open finishes it",
                state.name
            ));
            if !crate::parts::snapshot::exists(io, dir, &state.name).unwrap_or(false) {
                r.problems.push(Finding {
                    file: dir.join(crate::parts::snapshot::RESTORE),
                    offset: 0,
                    what: format!("names snapshot {:?}, which does not exist", state.name),
                });
            }
            r
        }
        Ok(None) => verify_live(dir, io, opts.progress, true)?,
        Err(e) => {
            let mut r = verify_live(dir, io, opts.progress, true)?;
            r.problems
                .push(Finding::of(&e, &dir.join(crate::parts::snapshot::RESTORE)));
            r
        }
    };
    // While a restore is pending the page may name the uuid of either side of it (a
    // restore from another buffer's line rewrites it first); the next open settles it.
    if !matches!(
        crate::parts::snapshot::pending_restore(io, dir),
        Ok(Some(_))
    ) {
        check_progress(dir, io, &mut report);
    }
    for snap in crate::parts::snapshot::snapshots(dir)? {
        report.snapshots_checked += 1;
        if let Some(problem) = &snap.problem {
            report.problems.push(Finding {
                file: snap.path.clone(),
                offset: 0,
                what: format!("snapshot {:?}: {problem}", snap.name),
            });
            continue;
        }
        let sub = verify_live(&snap.path, io, opts.progress, opts.deep)?;
        report.problems.extend(sub.problems);
        report.notes.extend(
            sub.notes
                .into_iter()
                .map(|n| format!("snapshot {:?}: {n}", snap.name)),
        );
        report.items_checked += sub.items_checked;
        report.segments_checked += sub.segments_checked;
        if sub.commit.is_some_and(|c| !c.is_clean()) {
            report.problems.push(Finding {
                file: snap.path.join(MANIFEST),
                offset: 0,
                what: format!("snapshot {:?}: its commit is not marked clean", snap.name),
            });
        }
    }
    Ok(report)
}

/// Checks the live buffer's progress page, which readers and every writer open: a
/// damaged header is what they would refuse, so verify must not call it sound. A
/// missing page is fine (no writer of this build has opened the buffer yet).
fn check_progress(dir: &Path, io: &dyn Io, report: &mut Report) {
    let Ok(m) = Manifest::load(io, dir) else {
        return; // verify_live reported the MANIFEST already.
    };
    let path = storage::progress_path(dir);
    match io.read(&path) {
        Ok(bytes) => {
            if let Err(p) = crate::format::progress::check(&bytes, &m.superblock.uuid) {
                report
                    .problems
                    .push(Finding::of(&p.into_error(&path, "progress page"), &path));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => report
            .problems
            .push(Finding::of(&Error::io("read", &path, e), &path)),
    }
}

/// Checks one set of buffer files (the live buffer or a snapshot). Without `items`,
/// the manifest, commit, segment headers and priorities header only.
fn verify_live(
    dir: &Path,
    io: &dyn Io,
    progress: Option<&dyn Fn(u64)>,
    items: bool,
) -> Result<Report> {
    let mut report = Report::default();
    let manifest_path = dir.join(MANIFEST);
    let m = match Manifest::load(io, dir) {
        Ok(m) => m,
        Err(e @ Error::NotABuffer { .. }) => return Err(e),
        Err(e) => {
            report.problems.push(Finding::of(&e, &manifest_path));
            return Ok(report);
        }
    };
    for (i, slot) in m.slots.iter().enumerate() {
        if let Err(p) = slot {
            let never_written = io
                .read(&manifest_path)
                .ok()
                .and_then(|b| {
                    let off = COMMIT_SLOT_OFFSET.get(i).copied()?;
                    b.get(off..off + COMMIT_LEN)
                        .map(|s| s.iter().all(|&x| x == 0))
                })
                .unwrap_or(false);
            if !never_written {
                report.notes.push(format!(
                    "commit slot {} is not valid ({p}); the other slot is used",
                    ["A", "B"].get(i).unwrap_or(&"?")
                ));
            }
        }
    }
    for (i, e) in m.evictions.iter().enumerate() {
        if let Err(p) = e {
            report.notes.push(format!(
                "the eviction record of commit page {} is not valid ({p}): a power cut tore \
                 it while it was written, before anything it covers was overwritten; ignored",
                ["A", "B"].get(i).unwrap_or(&"?")
            ));
        }
    }
    let commit = match m.newest_commit() {
        Ok(c) => c,
        Err(e) => {
            report.problems.push(Finding::of(&e, &manifest_path));
            return Ok(report);
        }
    };
    report.commit = Some(commit);
    // No writer reaches 2^63 commits (a million a second for 292,000 years): a
    // generation past it was crafted or damaged, and the writer could soon number no
    // further commit (at 2^64 - 1 it can write nothing at all).
    if commit.generation > MAX_GENERATION {
        report.problems.push(Finding {
            file: manifest_path.clone(),
            offset: COMMIT_SLOT_OFFSET.get(commit.slot()).copied().unwrap_or(0) as u64,
            what: format!(
                "commit generation {} is past any a writer reaches (2^63): no commit can \
                 follow it for long, or at all",
                commit.generation
            ),
        });
    }
    let sb = &m.superblock;
    // The count is the superblock's word: before looping over it, hold it against the
    // files there are (a crafted 2^26 segments made verify run for an hour). A few
    // missing files are each named below; far more declared than present is one finding.
    let lane = dir.join(storage::LANE_DIR);
    let files = io.list_dir(&lane).map_or(0, |e| e.len() as u64);
    if sb.segment_count > files + 16 {
        report.problems.push(Finding {
            file: lane,
            offset: 0,
            what: format!(
                "the superblock declares {} segments, but the folder holds {files} files",
                sb.segment_count
            ),
        });
        report
            .notes
            .push("items were not checked: segment files are missing".into());
        return Ok(report);
    }
    let mut segments = Vec::new();
    for n in 0..sb.segment_count {
        match storage::open_segment(io, dir, &storage::SegmentSet::rows(sb), n, Access::Read) {
            Ok(seg) => segments.push(seg),
            Err(e) => report
                .problems
                .push(Finding::of(&e, &storage::segment_path(dir, n))),
        }
        report.segments_checked += 1;
    }
    if segments.len() as u64 != sb.segment_count {
        report
            .notes
            .push("items were not checked: a segment file could not be opened".into());
        return Ok(report);
    }
    let ring = Ring::new(segments, m.layout.clone(), sb.capacity, sb.segment_slots)?;
    let mut heap = None;
    if let Some(set) = storage::SegmentSet::heap(sb) {
        match Heap::open(io, dir, sb, Access::Read) {
            Ok(h) => heap = h,
            Err(e) => {
                let file = match &e {
                    Error::Io { path, .. } => path.clone(),
                    _ => storage::heap_segment_path(dir, 0),
                };
                report.problems.push(Finding::of(&e, &file));
                report
                    .notes
                    .push("values were not checked: a chunk segment could not be opened".into());
            }
        }
        report.segments_checked += set.segment_count;
    }
    // Items below `sealed_to` carry checksums; later ones (added after the last flush,
    // rolled forward on a same-boot open) are proved by their stamps.
    let (head, tail, sealed_to) = if commit.is_clean() {
        (commit.head, commit.tail, commit.tail)
    } else {
        let trust_stamps = storage::same_boot(&commit);
        let r = recover_range(&m, &commit, &ring, heap.as_ref(), trust_stamps);
        report.notes.push(format!(
            "the last writer did not close the buffer (crash, kill, or still running): open will recover \
             indices {}..{} ({} past the last commit{}{})",
            r.head,
            r.tail,
            r.rolled_forward,
            if trust_stamps {
                ", proved by their stamps: same boot"
            } else {
                "; after a reboot only flushed items are kept"
            },
            if r.dropped > 0 {
                format!(", {} not recoverable", r.dropped)
            } else {
                String::new()
            }
        ));
        report.recovery = Some(r);
        (r.head, r.tail, commit.tail)
    };
    if items {
        check_items(&ring, head..tail, sealed_to, progress, &mut report);
        if let Some(h) = &mut heap {
            check_values(&ring, h, &m.schema, head..tail, sealed_to, &mut report);
        }
    }
    let at = Checking {
        io,
        dir,
        sb,
        schema: &m.schema,
        ring: &ring,
        commit: &commit,
        head,
        tail,
        items,
    };
    let mut found = Found {
        problems: &mut report.problems,
        notes: &mut report.notes,
    };
    Parts::verify(&at, &mut found);
    Ok(report)
}

/// The largest commit generation `verify` takes for a real one.
const MAX_GENERATION: u64 = 1 << 63;

/// Checks every value of every item in `live`: its slot decodes and lies in the chunk
/// ring's live chunks within its field's bound, every chunk it lies in holds that chunk,
/// and (for items below `sealed_to`, whose chunks a flush sealed) each chunk's crc.
fn check_values(
    ring: &Ring,
    heap: &mut Heap,
    schema: &Schema,
    live: std::ops::Range<u64>,
    sealed_to: u64,
    report: &mut Report,
) {
    let cap = ring.capacity();
    let layout = ring.layout().clone();
    // Where the writer's next call would go: after the newest item's values.
    if live.end > live.start {
        heap.resume_after(&item_slots(ring, &layout, cap, live.end - 1));
    }
    for index in live {
        for (v, field) in schema.var_fields().iter().enumerate() {
            let mut b = [0u8; crate::format::heap::SLOT_LEN];
            ring.read_field(index % cap, layout.fixed + v, &mut b);
            let problem = match VarSlot::decode(&b) {
                Err(p) => Some(format!("item {index}: slot of {:?}: {p}", field.name())),
                Ok(slot) => match heap.check_slot(slot, field.max_bytes()) {
                    Err(got) => Some(format!("item {index}: slot of {:?}: {got}", field.name())),
                    Ok(()) => {
                        let mut scratch = Vec::new();
                        match heap.read(slot, &mut scratch, index < sealed_to) {
                            Err(miss) => Some(format!(
                                "item {index}: value of {:?}: {miss:?}",
                                field.name()
                            )),
                            // Whole and sealed, yet not a value of its kind: crafted, or
                            // damaged before its chunk was sealed.
                            Ok(()) => field.kind().check_value(&scratch).err().map(|fault| {
                                format!(
                                    "item {index}: value of {:?} ({}): {fault}",
                                    field.name(),
                                    field.kind().name()
                                )
                            }),
                        }
                    }
                },
            };
            if let Some(what) = problem {
                let (file, offset) = ring.place(index % cap, Path::new(""));
                report.problems.push(Finding { file, offset, what });
            }
        }
    }
}

/// Checks the stamp of every item in `live` and the checksum of those below `sealed_to`.
fn check_items(
    ring: &Ring,
    live: std::ops::Range<u64>,
    sealed_to: u64,
    progress: Option<&dyn Fn(u64)>,
    report: &mut Report,
) {
    let cap = ring.capacity();
    let mut unreported = 0;
    for index in live {
        if unreported == PROGRESS_EVERY {
            if let Some(tell) = progress {
                tell(unreported);
            }
            unreported = 0;
        }
        unreported += 1;
        let Some((seg, k)) = ring.locate(index % cap) else {
            continue;
        };
        let Some(c) = ring.check(index % cap) else {
            continue;
        };
        report.items_checked += 1;
        let what = if c.stamp != crate::format::row::stamp_of(index) {
            format!(
                "item {index}: the slot's stamp is {:#x}, expected {:#x}",
                c.stamp,
                crate::format::row::stamp_of(index)
            )
        } else if index < sealed_to && !c.crc_ok {
            format!(
                "item {index}: checksum mismatch: stored {:#010x}, computed {:#010x}",
                c.stored_crc, c.computed_crc
            )
        } else {
            continue;
        };
        report.problems.push(Finding {
            file: seg.path().to_path_buf(),
            offset: seg.row_offset(k),
            what,
        });
    }
    if let Some(tell) = progress {
        tell(unreported);
    }
}
