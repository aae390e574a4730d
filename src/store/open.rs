//! Opening a buffer: create (its files sparse, reserved as rows arrive), open as the
//! writer, an actor or a snapshot, and recovery after an unclean shutdown.

use std::fs::File;
use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::state::Commits;
use crate::algo::recovery;
use crate::draw::{Draws, Picked, Rows};
use crate::error::{Error, Result};
use crate::format::manifest::{Commit, FLAG_CLEAN, Superblock};
use crate::format::row::{MAX_CAPACITY, RowLayout};
use crate::format::schema_doc;
use crate::format::state::State;
use crate::parts::heap::Heap;
use crate::parts::hooks::{Holder, Opening};
use crate::parts::lifecycle::Lifecycle;
use crate::parts::priorities::{LiveRange, Priorities};
use crate::parts::recovery::{item_slots, recover_range};
use crate::parts::set::Parts;
use crate::parts::snapshot::{self};
use crate::storage::behind::{DEFAULT_WINDOW, WriteBehind};
use crate::storage::io::{self, Access, Io, IoRef};
use crate::storage::ring::Ring;
use crate::storage::{self, LANE_DIR, MANIFEST, Manifest};

use super::commit::{files_changing, release_in_background};
use super::{Opened, Store};
use crate::parts::config::Config;

/// Names a field may not have: what every sample returns beside the fields.
pub(crate) const RESERVED_NAMES: [&str; 2] = ["indices", "weights"];

impl Store {
    /// Creates a buffer in `dir` (which must be absent or empty).
    pub(crate) fn create(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        if cfg!(target_endian = "big") {
            return Err(Error::Unsupported("the file format is little-endian"));
        }
        let dir = storage::resolve_root(dir.as_ref());
        let io = config.io.clone().unwrap_or_else(io::os);
        if config.capacity == 0 || config.capacity > MAX_CAPACITY {
            return Err(Error::InvalidConfig {
                field: "capacity",
                problem: format!("{} is not in 1..={MAX_CAPACITY}", config.capacity),
            });
        }
        if let Some(p) = &config.priorities {
            p.check()?;
        }
        let fields = config.schema.fields().iter();
        if let Some(name) = fields
            .map(|f| f.name())
            .find(|n| RESERVED_NAMES.contains(n))
        {
            return Err(Error::InvalidSchema(format!(
                "field {name:?}: every sample returns its own {name:?} beside the fields \
                 (a dict key in Python, which the field would hide or be hidden by): \
                 rename the field"
            )));
        }
        let heap = config.heap_geometry()?;
        if let Some(life) = config.lifecycle {
            let max_use = life.max_use;
            if max_use > crate::format::lifecycle::MAX_USES {
                return Err(Error::InvalidConfig {
                    field: "max_use",
                    problem: format!(
                        "{max_use} is more than {} (uses are counted in 16 bits)",
                        crate::format::lifecycle::MAX_USES
                    ),
                });
            }
            if config.is_episodic() {
                // A removal takes whole episodes; what counts or moves single rows
                // would cut one.
                let reservoir = life.policy == Some(crate::format::lifecycle::Policy::Reservoir);
                let refused = match () {
                    () if max_use > 0 => Some("max_use"),
                    () if reservoir => Some("reservoir"),
                    () if life.rate_limit.is_some() => Some("rate_limit"),
                    () => None,
                };
                if let Some(field) = refused {
                    return Err(Error::InvalidConfig {
                        field,
                        problem: "an episodic buffer removes whole episodes (remove, draws \
                                  that remove, downsampling by episode); max_use, a \
                                  reservoir and a rate limiter count or move single rows, \
                                  which would cut an episode"
                            .into(),
                    });
                }
            }
            let reservoir = life.policy == Some(crate::format::lifecycle::Policy::Reservoir);
            if config.fragments && (reservoir || life.rate_limit.is_some()) {
                return Err(Error::InvalidConfig {
                    field: if reservoir { "reservoir" } else { "rate_limit" },
                    problem: "a reservoir moves single rows and a rate limiter counts \
                              single rows, so neither keeps a fragment whole: a fragments \
                              buffer downsamples whole fragments (Config::downsample)"
                        .into(),
                });
            }
            if let Some(rl) = life.rate_limit {
                if rl.min_size_to_sample > config.capacity {
                    return Err(Error::InvalidConfig {
                        field: "min_size_to_sample",
                        problem: format!(
                            "{} is more than the capacity {}: no draw could ever go ahead",
                            rl.min_size_to_sample, config.capacity
                        ),
                    });
                }
                let spi = rl.samples_per_insert;
                let sound = spi.is_finite() && spi > 0.0 && rl.min_diff <= rl.max_diff;
                if !sound {
                    return Err(Error::InvalidConfig {
                        field: "rate_limit",
                        problem: format!(
                            "samples_per_insert {spi} must be finite and > 0, min_diff {} \
                             at most max_diff {}",
                            rl.min_diff, rl.max_diff
                        ),
                    });
                }
            }
            // Kept items move to the tail through a free slot; one more stays free for
            // items with values, which are copied, never renamed in place.
            let room = u64::from(config.schema.has_var()) + 1;
            if reservoir && life.max_size + room > config.capacity {
                return Err(Error::InvalidConfig {
                    field: "reservoir",
                    problem: format!(
                        "a reservoir of {} in a ring of {}: it needs {room} slot(s) beyond \
                         the items it keeps (max_size at most the capacity less {room})",
                        life.max_size, config.capacity
                    ),
                });
            }
            if life.policy.is_some() && !(1..=config.capacity).contains(&life.max_size) {
                return Err(Error::InvalidConfig {
                    field: "max_size",
                    problem: format!(
                        "{} is not in 1..={} (the capacity)",
                        life.max_size, config.capacity
                    ),
                });
            }
        }
        if config.fragments && config.is_episodic() {
            return Err(Error::InvalidConfig {
                field: "fragments",
                problem: "episodic buffers add one row per call: sample episodes or \
                          sequences instead"
                    .into(),
            });
        }
        let layout = RowLayout::with_steps(&config.schema, config.is_episodic())
            .with_fragments(config.fragments);
        let stride = layout.stride as u64;
        let segment_slots = config.slots_per_segment(stride)?;
        let archive = schema_doc::encode(&config.schema);
        let uuid = crate::algo::entropy::uuid();
        let sb = Superblock {
            uuid,
            capacity: config.capacity,
            segment_slots,
            segment_count: Superblock::segments_for(config.capacity, segment_slots),
            row_stride: stride,
            item_bytes: config.schema.item_bytes() as u64,
            schema_len: archive.len() as u64,
            schema_crc: crate::format::crc32(&archive),
            prioritized: config.priorities.is_some(),
            episodic: config.is_episodic(),
            whole_episodes: config.whole_episodes,
            fragments: config.fragments,
            evict_for_room: config.evict_for_room && heap.is_some(),
            heap,
            lifecycle: config.lifecycle.is_some(),
        };
        // Every refusal of the configuration comes before the folder is made: a create
        // refused leaves nothing behind.
        refuse_what_cannot_fit(&dir, &sb)?;
        storage::refuse_network_fs(&*io, &dir)?;
        let made = matches!(io.kind(&dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        create_empty_dir(&*io, &dir)?;
        let lock = match storage::lock(&*io, &dir) {
            Ok(lock) => lock,
            Err(e) => {
                if made {
                    let _ = io.remove_dir(&dir);
                }
                return Err(e);
            }
        };
        let result = write_new_buffer(
            &*io,
            &dir,
            &sb,
            &archive,
            config.seed.unwrap_or_else(crate::algo::entropy::seed),
            &config,
        );
        if let Err(e) = result {
            remove_new_buffer(&*io, &dir, &sb, made);
            return Err(e);
        }
        // A buffer that cannot be opened (its mappings refused: ENOMEM) is removed too:
        // it holds nothing yet, and its reserved files would only fill the disk.
        Store::open_as(dir.clone(), io.clone(), Holder::Writer, Some(lock), false).inspect_err(
            |_| {
                remove_new_buffer(&*io, &dir, &sb, made);
            },
        )
    }
    /// `open` through a given file-operation seam.
    pub(crate) fn open_with(dir: impl AsRef<Path>, io: IoRef) -> Result<Store> {
        if cfg!(target_endian = "big") {
            return Err(Error::Unsupported("the file format is little-endian"));
        }
        let dir = storage::resolve_root(dir.as_ref());
        // Check that this is a buffer before creating a lock file in it (a restore
        // never changes the superblock).
        let sb = Manifest::load(&*io, &dir)?.superblock;
        let lock = storage::lock(&*io, &dir)?;
        // A set_state a kill interrupted is finished before anything else is read.
        if snapshot::pending_restore(&*io, &dir)?.is_some() {
            files_changing(&*io, &dir, &sb)?;
        }
        snapshot::finish_restore(&*io, &dir)?;
        snapshot::clean_leftovers(&*io, &dir, &sb)?;
        Store::open_as(dir, io, Holder::Writer, Some(lock), false)
    }
    /// `open_actor` through a given file-operation seam.
    pub(crate) fn open_actor_with(dir: impl AsRef<Path>, io: IoRef) -> Result<Store> {
        let dir = storage::resolve_root(dir.as_ref());
        let sb = Manifest::load(&*io, &dir)?.superblock;
        let lock = storage::lock(&*io, &dir)?;
        if snapshot::pending_restore(&*io, &dir)?.is_some() {
            // Finishing a restore replaces the tree: no owner may have it mapped.
            let _owner = sb
                .prioritized
                .then(|| storage::lock_priorities(&*io, &dir))
                .transpose()?;
            files_changing(&*io, &dir, &sb)?;
            snapshot::finish_restore(&*io, &dir)?;
        }
        snapshot::clean_leftovers(&*io, &dir, &sb)?;
        Store::open_as(dir, io, Holder::Actor, Some(lock), false)
    }
    /// Opens snapshot `name` of the buffer in `dir` read-only: sampling and reads work
    /// (from the snapshot's RNG position), and the handle has no method that writes (see
    /// [`Frozen`]).
    pub(crate) fn open_snapshot(dir: impl AsRef<Path>, name: &str) -> Result<Store> {
        let o = snapshot_parts(dir.as_ref(), name)?;
        Ok(Store::from_opened(o))
    }

    /// `open_at_state` through a given file-operation seam.
    pub(crate) fn open_at_state_with(
        dir: impl AsRef<Path>,
        state: &State,
        io: IoRef,
    ) -> Result<Store> {
        let dir = storage::resolve_root(dir.as_ref());
        let sb = Manifest::load(&*io, &dir)?.superblock;
        let lock = storage::lock(&*io, &dir)?;
        snapshot::finish_restore(&*io, &dir)?;
        snapshot::clean_leftovers(&*io, &dir, &sb)?;
        let state = &snapshot::bring_home(&*io, &dir, &sb, state)?;
        snapshot::check(&*io, &dir, &sb, state)?;
        files_changing(&*io, &dir, &sb)?;
        snapshot::write_intent(&*io, &dir, state)?;
        let replaced = snapshot::restore(&*io, &dir, &sb, &state.name)?;
        release_in_background(replaced);
        Store::open_as(dir, io, Holder::Writer, Some(lock), true)
    }
}

impl Store {
    /// Opens the buffer in `dir` held as `holder` says, with the writer `lock` (see
    /// [`open_parts`]).
    pub(crate) fn open_as(
        dir: PathBuf,
        io: IoRef,
        holder: Holder,
        lock: Option<File>,
        restored: bool,
    ) -> Result<Store> {
        let o = open_parts(dir, io, holder, lock, restored)?;
        let mut buf = Store::from_opened(o);
        if buf.commits.lock.is_some() && !restored {
            // Mark the buffer as open for writing: a crash from here on is detected on
            // the next open and recovered.
            buf.commit(0, true)?;
        }
        if buf.commits.lock.is_some() {
            buf.finish_episode_removals()?;
        }
        buf.publish_open();
        Ok(buf)
    }
}

/// The files of snapshot `name` of the buffer in `dir`, opened frozen (private mappings:
/// recovery's repairs and reads never change a byte on disk).
pub(crate) fn snapshot_parts(dir: &Path, name: &str) -> Result<Opened> {
    let dir = &storage::resolve_root(dir);
    snapshot::valid_name(name)?;
    let snap = snapshot::snapshot_dir(dir, name);
    if !snapshot::exists(&io::OsIo, dir, name)? {
        return Err(Error::NoSuchSnapshot {
            dir: dir.to_path_buf(),
            name: name.to_owned(),
        });
    }
    open_parts(snap, io::os(), Holder::Frozen, None, false).map_err(|e| Error::BadSnapshot {
        dir: dir.to_path_buf(),
        name: name.to_owned(),
        source: Box::new(e),
    })
}

/// Opens the files of the buffer in `dir` for `holder`, who holds the writer `lock` if
/// it writes. `restored`: this process has just put a snapshot's files in place, whose
/// commit `restore` already marked open (not clean); they are exactly the snapshot's,
/// so they need no recovery and no marker commit.
pub(crate) fn open_parts(
    dir: PathBuf,
    io: IoRef,
    holder: Holder,
    lock: Option<File>,
    restored: bool,
) -> Result<Opened> {
    let access = match holder {
        Holder::Writer | Holder::Actor => Access::Write,
        Holder::Frozen => Access::Frozen,
        Holder::Live => Access::Read,
    };
    if access.writes_file() {
        storage::refuse_network_fs(&*io, &dir)?;
    }
    let m = Manifest::load(&*io, &dir)?;
    let commit = m.newest_commit()?;
    let sb = m.superblock.clone();
    let segments = (0..sb.segment_count)
        .map(|n| storage::open_segment(&*io, &dir, &storage::SegmentSet::rows(&sb), n, access))
        .collect::<Result<Vec<_>>>()?;
    let mut ring = Ring::new(segments, m.layout.clone(), sb.capacity, sb.segment_slots)?;
    let mut heap = Heap::open(&*io, &dir, &sb, access)?;
    // What every part is handed while the buffer opens, over the ring as it is then.
    macro_rules! at {
        ($ring:expr) => {
            &Opening {
                io: &*io,
                dir: &dir,
                sb: &sb,
                schema: &m.schema,
                ring: $ring,
                holder,
                restored,
            }
        };
    }
    let range = |head: u64, tail: u64| LiveRange {
        head,
        head_slot: head % sb.capacity,
        tail,
    };
    let mut parts = Parts::open(at!(&ring), range(commit.head, commit.tail))?;
    let (mut head, mut tail) = (commit.head, commit.tail);
    let mut recovered = None;
    // A live reader takes the live range from the progress page instead, and never
    // repairs: the writer owns the files.
    if !commit.is_clean() && !restored && holder != Holder::Live {
        let trust_stamps = storage::same_boot(&commit);
        let r = recover_range(&m, &commit, &ring, heap.as_ref(), trust_stamps);
        for slot in recovery::stale_slots(&ring, sb.capacity, r.tail) {
            ring.clear_stamp(slot);
        }
        // The commit below covers the items rolled forward: seal them first.
        let from = r.head.max(commit.tail);
        if r.tail > from {
            ring.seal(from % sb.capacity, from, r.tail - from);
            // And the chunks of their values, which no flush sealed either.
            if let Some(h) = &mut heap {
                let first = item_slots(&ring, &m.layout, sb.capacity, from)
                    .iter()
                    .map(|s| s.pos / h.chunk_bytes())
                    .min();
                let newest = item_slots(&ring, &m.layout, sb.capacity, r.tail - 1);
                h.resume_after(&newest);
                if let Some(first) = first {
                    h.seal_from(first);
                    if access.writes_file() {
                        h.flush_all(&*io, &dir)?;
                    }
                }
            }
        }
        // Read-only: the repairs stay in private pages; the files are not changed.
        if access.writes_file() {
            ring.flush_all(&*io)
                .map_err(|(s, e)| Error::io("msync", storage::segment_path(&dir, s as u64), e))?;
        }
        parts.recovered(at!(&ring), range(r.head, r.tail))?;
        (head, tail) = (r.head, r.tail);
        recovered = Some(r);
    }
    // Items dropped by `clear` are counted below the head recovery settled on;
    // settling a cut first episode moves the head by eviction.
    let cleared = commit.cleared.min(head);
    let head = parts.ready(at!(&ring), range(head, tail))?;
    // Where the next call's values go: after the newest item's (its row is never
    // overwritten while it is the newest, and keeps its stamp through `clear`).
    if let Some(h) = &mut heap
        && holder != Holder::Live
    {
        let newest = tail
            .checked_sub(1)
            .filter(|&i| ring.stamp(i % sb.capacity) == crate::format::row::stamp_of(i))
            .map(|i| item_slots(&ring, &m.layout, sb.capacity, i))
            .unwrap_or_default();
        h.resume_after(&newest);
    }
    let progress = if access.writes_file() {
        Some(storage::open_progress(&*io, &dir, &sb, Access::Write)?)
    } else {
        None
    };
    let manifest_path = dir.join(MANIFEST);
    let manifest = if access.writes_file() {
        // Commits are written in place: never into another name of the file.
        storage::sole_name(&*io, &manifest_path)?;
        Some(
            io.open_rw(&manifest_path)
                .map_err(|e| Error::io("open", &manifest_path, e))?,
        )
    } else {
        None
    };
    let behind = if access.writes_file() {
        WriteBehind::new(DEFAULT_WINDOW, sb.capacity, ring.stride(), tail)
    } else {
        WriteBehind::off()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(commit.rng_seed);
    rng.set_word_pos(commit.rng_word_pos);
    Ok(Opened {
        rows: Rows {
            schema: m.schema,
            ring,
            head,
            tail,
            head_slot: head % sb.capacity,
            tail_slot: tail % sb.capacity,
            cleared,
            flushed_tail: tail,
            read_checks: true,
            draws: Draws {
                rng,
                seed: commit.rng_seed,
                sampled: commit.sampled,
                picked: Picked::default(),
            },
            superblock: sb,
            dir,
            io,
            heap,
            groups: None,
        },
        commits: Commits {
            path: manifest_path,
            file: manifest,
            lock,
            generation: commit.generation,
            boot_id: storage::boot_id(),
            lane_dirty: false,
            behind,
        },
        recovered,
        parts,
        progress,
    })
}

fn write_new_buffer(
    io: &dyn io::Io,
    dir: &Path,
    sb: &Superblock,
    archive: &[u8],
    seed: u64,
    config: &Config,
) -> Result<()> {
    let lane = dir.join(LANE_DIR);
    io.create_dir_all(&lane)
        .map_err(|e| Error::io("create directory", &lane, e))?;
    for set in storage::SegmentSet::all(sb) {
        for n in 0..set.segment_count {
            storage::create_segment(io, dir, &set, n)?;
        }
    }
    // The progress page too, durable before MANIFEST is published: a reader that finds
    // MANIFEST always finds the page (even after a power cut), so a sound new buffer is
    // never one whose readers refuse it.
    drop(storage::open_progress(io, dir, sb, Access::Write)?);
    io.sync_dir(&lane)
        .map_err(|e| Error::io("fsync", &lane, e))?;
    if let Some(p) = &config.priorities {
        Priorities::create(io, dir, sb, p)?;
    }
    if let Some(life) = config.lifecycle {
        // The policy's decisions get a stream of their own, from the sampling seed (so
        // a seeded buffer decides the same way every run) or from entropy.
        let seed = match config.seed {
            Some(s) => s ^ 0x005e_ed0f_d05a_4b1e,
            None => crate::algo::entropy::seed(),
        };
        let header = crate::format::lifecycle::LifeHeader {
            uuid: sb.uuid,
            capacity: sb.capacity,
            max_use: life.max_use,
            max_size: life.max_size,
            policy: life
                .policy
                .unwrap_or(crate::format::lifecycle::Policy::Fifo),
            seed,
            rate_limit: life.rate_limit,
            checked: true,
        };
        Lifecycle::create(io, dir, &header)?;
    }
    let first = Commit {
        head: config.first_index,
        tail: config.first_index,
        rng_seed: seed,
        flags: FLAG_CLEAN,
        ..Commit::default()
    };
    let bytes = storage::manifest_bytes(sb, archive, &first);
    let tmp = dir.join(storage::MANIFEST_TMP);
    let file = io
        .create_new(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    io.write_at(&file, 0, &bytes)
        .map_err(|e| Error::io("write", &tmp, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &tmp, e))?;
    crate::killpoint::hit("create-before-manifest");
    let path = dir.join(MANIFEST);
    io.rename(&tmp, &path)
        .map_err(|e| Error::io("rename", &path, e))?;
    io.sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))?;
    Ok(())
}

/// Makes `dir` (if absent) and checks that it is empty: a buffer is only ever created
/// where it cannot overwrite anything.
pub(crate) fn create_empty_dir(io: &dyn io::Io, dir: &Path) -> Result<()> {
    io.create_dir_all(dir)
        .map_err(|e| Error::io("create directory", dir, e))?;
    let entries = io
        .list_dir(dir)
        .map_err(|e| Error::io("read directory", dir, e))?;
    let Some((name, _)) = entries.first() else {
        return Ok(());
    };
    let has = |n: &str| entries.iter().any(|(e, _)| e == n);
    if !has(MANIFEST) && has(storage::LOCK) {
        // A create killed before it published MANIFEST: its files and no buffer, so
        // neither open (no MANIFEST) nor create (not empty) would take the folder.
        // Its lock says whether that create still runs (then this is `Locked`); if
        // not, the folder is cleared (only if it holds nothing but the engine's own
        // names) and made again.
        let lock = storage::lock(io, dir)?;
        crate::parts::snapshot::remove_tree(io, dir)?;
        drop(lock);
        return io
            .create_dir_all(dir)
            .map_err(|e| Error::io("create directory", dir, e));
    }
    Err(Error::AlreadyExists {
        what: format!("the directory is not empty (it has {name:?})"),
        dir: dir.to_path_buf(),
    })
}

/// Refuses, before a byte is written, a buffer whose files' header pages the disk
/// cannot hold now (or whose mappings no address space can): `capacity=2**40` is an
/// error at once. Its segments take disk as data arrives, so a buffer larger than the
/// free space is made, and an add that finds the disk full is `DiskFull` then.
fn refuse_what_cannot_fit(dir: &Path, sb: &Superblock) -> Result<()> {
    let page = crate::format::segment::DATA_OFFSET as u64;
    // Mapped: every segment of both rings. Written now: the header pages; segments are
    // reserved as rows and values arrive (each add checks, `ensure_storable`).
    let (mapped, reserved) =
        storage::SegmentSet::all(sb)
            .iter()
            .fold((0u64, 0u64), |(mapped, reserved), set| {
                let rows = set.capacity.saturating_mul(set.stride);
                let headers = set.segment_count.saturating_mul(page);
                (
                    mapped.saturating_add(rows).saturating_add(headers),
                    reserved.saturating_add(headers),
                )
            });
    // The tree: at most two f64 words per slot plus its header page.
    let tree = if sb.prioritized {
        sb.capacity.saturating_mul(16).saturating_add(4096)
    } else {
        0
    };
    let bytes = mapped.saturating_add(tree);
    // 2^46: the user half of a 47-bit address space, where every segment is mapped.
    if bytes > 1 << 46 {
        return Err(Error::InvalidConfig {
            field: "capacity",
            problem: format!(
                "{} items of {} bytes need {bytes} bytes of mappings, more than a 64-bit \
                 process can map",
                sb.capacity, sb.row_stride
            ),
        });
    }
    let Some(existing) = storage::nearest_existing(dir) else {
        return Ok(());
    };
    let bytes = reserved.saturating_add(tree);
    match fs2::available_space(existing) {
        Ok(free) if free < bytes => Err(Error::DiskFull {
            path: dir.to_path_buf(),
            bytes,
        }),
        _ => Ok(()),
    }
}

/// Best-effort removal of a buffer whose creation failed (the error is what matters),
/// and of its folder when the create `made` it. Segments are made in order, so the
/// first missing one ends the walk: a refused `capacity=2**40` does not try
/// 2^40 / slots names.
fn remove_new_buffer(io: &dyn Io, dir: &Path, sb: &Superblock, made: bool) {
    // MANIFEST first: a kill during the removal leaves no buffer rather than a MANIFEST
    // over missing segments.
    let _ = io.remove_file(&dir.join(MANIFEST));
    for set in storage::SegmentSet::all(sb) {
        for n in 0..set.segment_count {
            let gone = io.remove_file(&set.path(dir, n));
            if gone.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
                break;
            }
        }
    }
    let _ = io.remove_file(&storage::progress_path(dir));
    let _ = io.remove_dir(&dir.join(LANE_DIR));
    let _ = io.remove_file(&dir.join(storage::MANIFEST_TMP));
    let _ = io.remove_file(&storage::tree_path(dir));
    let _ = io.remove_file(&storage::life_path(dir));
    let _ = io.remove_file(&dir.join(storage::LOCK));
    if made {
        // Only if empty: a folder the create made holds nothing else.
        let _ = io.remove_dir(dir);
    }
}
