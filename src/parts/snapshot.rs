//! Snapshots: frozen states of a buffer inside its own directory, made of hard links to
//! the segment files and copies of the small mutable files.
//!
//! ```text
//! BUFFER/snapshots/NAME/MANIFEST                 copy, with the frozen commit (clean)
//! BUFFER/snapshots/NAME/priorities.tree          copy (each part's files: `Parts::files`)
//! BUFFER/snapshots/NAME/lane-0/seg-00000000.dat  hard link to the live segment
//! ```
//!
//! A snapshot folder is itself a buffer directory, so everything that opens or verifies
//! a buffer opens or verifies a snapshot. Every change is made under a temporary name
//! and published by one rename, so a kill at any point leaves each snapshot either whole
//! or absent, and the live buffer either before or after a `set_state` (see `RESTORE`).
//! The writer never stores into a file another name links (copy-on-write, in
//! [`crate::ReplayBuffer`]), so a snapshot's bytes never change once it is published.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::format::manifest::{COMMIT_LEN, COMMIT_SLOT_OFFSET, Commit, Superblock};
use crate::format::state::{State, check_name};
use crate::storage::io::{Io, Kind};
use crate::storage::{self, COW_EXT, LANE_DIR, MANIFEST, Manifest, RESTORE_EXT};

use super::set::Parts;

/// Folder of a buffer's snapshots.
pub const SNAPSHOTS_DIR: &str = "snapshots";
/// Intent file of a `set_state` under way: a serialized [`State`]. While it exists, the
/// live files may be part old, part restored; the next open finishes the restore.
pub const RESTORE: &str = "RESTORE";
/// The intent file while it is written, before its rename to [`RESTORE`].
const RESTORE_TMP: &str = "RESTORE.tmp";
/// Prefix of a snapshot folder being written by `get_state`.
const TMP_PREFIX: &str = ".tmp-";
/// Prefix of a snapshot folder being deleted.
const DEL_PREFIX: &str = ".del-";

/// The folder of snapshot `name` of the buffer in `dir`.
pub fn snapshot_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join(SNAPSHOTS_DIR).join(name)
}

/// Checks a snapshot name (see [`check_name`]).
pub(crate) fn valid_name(name: &str) -> Result<()> {
    check_name(name).map_err(|problem| Error::InvalidName {
        name: name.to_owned(),
        problem,
    })
}

/// One snapshot, as listed.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotInfo {
    /// Its name.
    pub name: String,
    /// Its folder.
    pub path: PathBuf,
    /// The frozen commit (`None` when the snapshot is damaged: see `problem`).
    pub commit: Option<Commit>,
    /// Bytes of files that other names link too (segments the live buffer or other
    /// snapshots still share): freed only when every name is gone.
    pub bytes_shared: u64,
    /// Bytes only this snapshot holds: deleting it frees them.
    pub bytes_owned: u64,
    /// When it was taken (the folder's modification time).
    pub created: Option<SystemTime>,
    /// Why it cannot be used, if it cannot.
    pub problem: Option<String>,
}

impl SnapshotInfo {
    /// Items the snapshot holds.
    pub fn len(&self) -> u64 {
        self.commit.map_or(0, |c| c.tail - c.head)
    }

    /// Whether it holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The snapshots of the buffer in `dir`, oldest commit first. A damaged snapshot is
/// listed with its problem rather than failing the whole list.
///
/// ```
/// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
/// # let dir = tempfile::tempdir()?;
/// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
/// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
/// buf.add(&[Column::scalar("x", &3u8)])?;
/// let state = buf.get_state()?;
/// let list = replaystore::snapshots(dir.path().join("b"))?;
/// assert_eq!(list.len(), 1);
/// assert_eq!(list[0].name, state.name);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn snapshots(dir: impl AsRef<Path>) -> Result<Vec<SnapshotInfo>> {
    use std::os::unix::fs::MetadataExt;
    let dir = &storage::resolve_root(dir.as_ref());
    let io = &crate::storage::io::OsIo;
    let root = dir.join(SNAPSHOTS_DIR);
    let entries = match io.list_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read directory", &root, e)),
    };
    let mut out = Vec::new();
    for (name, kind) in entries {
        let Some(name) = name.to_str().map(str::to_owned) else {
            continue;
        };
        // Only folders with a MANIFEST are snapshots (one that is not a regular file is
        // listed with that problem): anything else in here (a link, a stray file, a
        // folder someone made) is not listed, so nothing that lists and then deletes
        // (keep_last) ever touches it.
        if name.starts_with('.') || kind != Kind::Dir {
            continue;
        }
        let path = root.join(&name);
        if io.kind(&path.join(MANIFEST)).is_err() {
            continue;
        }
        let (commit, problem) = match Manifest::load(io, &path).and_then(|m| m.newest_commit()) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let (mut shared, mut owned) = (0, 0);
        for file in files_of(io, &path) {
            if let Ok(meta) = std::fs::symlink_metadata(&file) {
                let bytes = meta.blocks() * 512;
                if meta.nlink() > 1 {
                    shared += bytes;
                } else {
                    owned += bytes;
                }
            }
        }
        out.push(SnapshotInfo {
            name,
            created: std::fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .ok(),
            path,
            commit,
            bytes_shared: shared,
            bytes_owned: owned,
            problem,
        });
    }
    out.sort_by(|a, b| {
        let key = |s: &SnapshotInfo| s.commit.map_or(0, |c| c.generation);
        key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
    });
    Ok(out)
}

/// The names of the snapshots of the buffer in `dir` (folders with a MANIFEST), in no
/// order: what pruning needs, without loading a manifest or sizing a file.
pub(crate) fn names(io: &dyn Io, dir: &Path) -> Result<Vec<String>> {
    let root = dir.join(SNAPSHOTS_DIR);
    let entries = match io.list_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read directory", &root, e)),
    };
    Ok((entries.into_iter())
        .filter(|(_, kind)| *kind == Kind::Dir)
        .filter_map(|(name, _)| name.to_str().map(str::to_owned))
        .filter(|name| !name.starts_with('.'))
        .filter(|name| io.kind(&root.join(name).join(MANIFEST)).is_ok())
        .collect())
}

/// The regular files under `dir`, one level of folders deep (a snapshot's layout),
/// links not followed.
fn files_of(io: &dyn Io, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = io.list_dir(&d) else {
            continue;
        };
        for (name, kind) in entries {
            match kind {
                Kind::Dir if depth < 1 => stack.push((d.join(name), depth + 1)),
                Kind::File => out.push(d.join(name)),
                _ => {}
            }
        }
    }
    out
}

/// `path` refused: `found` stands where the engine keeps `expected`.
fn refused(path: PathBuf, op: &'static str, found: Kind, expected: Kind) -> Error {
    Error::ForeignFile {
        path,
        op,
        found: found.describe(),
        expected: expected.describe(),
    }
}

/// Whether the engine writes an entry called `name` of kind `kind` at `depth` below a
/// buffer or snapshot folder. Only such entries are ever removed, so a folder holding
/// anything else (a link, a FIFO, a folder of someone's) is refused whole.
fn engine_entry(depth: usize, name: &str, kind: Kind) -> bool {
    let segment = |n: &str| {
        let n = [COW_EXT, RESTORE_EXT]
            .iter()
            .find_map(|e| n.strip_suffix(e).and_then(|n| n.strip_suffix('.')))
            .unwrap_or(n);
        n.strip_prefix("seg-")
            .or_else(|| n.strip_prefix("heap-"))
            .and_then(|n| n.strip_suffix(".dat"))
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    let restore_copy = |n: &str| {
        n.strip_suffix(RESTORE_EXT)
            .and_then(|n| n.strip_suffix('.'))
            .is_some_and(|n| {
                n == MANIFEST
                    || n == crate::format::tree::FILE_NAME
                    || n == crate::format::lifecycle::FILE_NAME
            })
    };
    match (depth, kind) {
        (0, Kind::Dir) => name == LANE_DIR,
        (0, Kind::File) => {
            [
                MANIFEST,
                storage::MANIFEST_TMP,
                storage::LOCK,
                storage::PRIORITY_LOCK,
                RESTORE,
                RESTORE_TMP,
                crate::format::tree::FILE_NAME,
                crate::format::lifecycle::FILE_NAME,
            ]
            .contains(&name)
                || restore_copy(name)
        }
        (1, Kind::File) => name == storage::PROGRESS || segment(name),
        _ => false,
    }
}

/// Every entry under `dir` in the order to remove them (contents before their folder),
/// or an error naming the first entry the engine did not write. At depth 0 an entry
/// named `skip` is left out (a buffer's `snapshots/`, planned folder by folder).
fn removal_plan(
    io: &dyn Io,
    dir: &Path,
    depth: usize,
    skip: Option<&str>,
    out: &mut Vec<(PathBuf, Kind)>,
) -> Result<()> {
    let entries = io
        .list_dir(dir)
        .map_err(|e| Error::io("read directory", dir, e))?;
    for (name, kind) in entries {
        let path = dir.join(&name);
        if depth == 0 && kind == Kind::Dir && skip.is_some_and(|s| name == s) {
            continue;
        }
        if !name.to_str().is_some_and(|n| engine_entry(depth, n, kind)) {
            return Err(Error::ForeignFile {
                path,
                op: "remove",
                found: kind.describe(),
                expected: "a name the engine writes",
            });
        }
        if kind == Kind::Dir {
            removal_plan(io, &path, depth + 1, None, out)?;
        }
        out.push((path, kind));
    }
    Ok(())
}

/// Whether `dir` is a folder to remove: `false` when nothing is there; a link or
/// anything but a folder is refused.
fn is_folder(io: &dyn Io, dir: &Path) -> Result<bool> {
    match io.kind(dir) {
        Ok(Kind::Dir) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Ok(found) => Err(refused(dir.to_path_buf(), "remove", found, Kind::Dir)),
        Err(e) => Err(Error::io("inspect", dir, e)),
    }
}

/// Removes what `plan` lists, in its order.
fn carry_out(io: &dyn Io, plan: Vec<(PathBuf, Kind)>) -> Result<()> {
    for (path, kind) in plan {
        let done = if kind == Kind::Dir {
            io.remove_dir(&path)
        } else {
            io.remove_file(&path)
        };
        done.map_err(|e| Error::io("remove", &path, e))?;
    }
    Ok(())
}

/// Removes a folder written by the engine (files, then one level of folders). Nothing
/// is removed unless every entry is one the engine writes (see [`engine_entry`]); a
/// link is never followed, and a folder that is itself a link is refused.
pub(crate) fn remove_tree(io: &dyn Io, dir: &Path) -> Result<()> {
    if !is_folder(io, dir)? {
        return Ok(());
    }
    let mut plan = Vec::new();
    removal_plan(io, dir, 0, None, &mut plan)?;
    plan.push((dir.to_path_buf(), Kind::Dir));
    carry_out(io, plan)
}

/// Removes a whole buffer folder the engine made, snapshots included. The whole tree
/// is planned first (each snapshot folder as [`remove_tree`] would remove it, then
/// `snapshots/`, then the rest), so a foreign entry anywhere refuses the folder with
/// nothing removed. A group's member whose creation a kill cut short is removed so.
pub(crate) fn remove_buffer(io: &dyn Io, dir: &Path) -> Result<()> {
    if !is_folder(io, dir)? {
        return Ok(());
    }
    let mut plan = Vec::new();
    let snaps = dir.join(SNAPSHOTS_DIR);
    if is_folder(io, &snaps)? {
        let entries = io
            .list_dir(&snaps)
            .map_err(|e| Error::io("read directory", &snaps, e))?;
        for (name, kind) in entries {
            let path = snaps.join(&name);
            if kind != Kind::Dir {
                return Err(refused(path, "remove", kind, Kind::Dir));
            }
            removal_plan(io, &path, 0, None, &mut plan)?;
            plan.push((path, Kind::Dir));
        }
        plan.push((snaps, Kind::Dir));
    }
    // The rest after the snapshots, `snapshots/` itself left out: it is planned above.
    removal_plan(io, dir, 0, Some(SNAPSHOTS_DIR), &mut plan)?;
    plan.push((dir.to_path_buf(), Kind::Dir));
    carry_out(io, plan)
}

/// Whether snapshot `name` of the buffer in `dir` exists: a folder, which is its
/// snapshot; nothing there, which is none; anything else is refused.
pub(crate) fn exists(io: &dyn Io, dir: &Path, name: &str) -> Result<bool> {
    let snap = snapshot_dir(dir, name);
    match io.kind(&snap) {
        Ok(Kind::Dir) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Ok(found) => Err(refused(snap, "open snapshot", found, Kind::Dir)),
        Err(e) => Err(Error::io("inspect", &snap, e)),
    }
}

/// Removes `path` if it exists (a leftover of an interrupted operation).
fn remove_if_present(io: &dyn Io, path: &Path) -> Result<()> {
    match io.remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path, e)),
    }
}

fn sync_dir(io: &dyn Io, dir: &Path) -> Result<()> {
    io.sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))
}

/// The MANIFEST of `dir` (its superblock and schema) with `commit` as its only commit:
/// in its slot, the other slot empty. A snapshot's (commit marked clean) opens without
/// recovery and never with a newer commit than the one frozen.
fn frozen_manifest(io: &dyn Io, dir: &Path, commit: &Commit) -> Result<Vec<u8>> {
    let path = dir.join(MANIFEST);
    let mut bytes = io.read(&path).map_err(|e| Error::io("read", &path, e))?;
    let len = bytes.len() as u64;
    for (i, off) in COMMIT_SLOT_OFFSET.iter().enumerate() {
        let slot = bytes
            .get_mut(*off..off + COMMIT_LEN)
            .ok_or(Error::Truncated {
                file: path.clone(),
                expected: (off + COMMIT_LEN) as u64,
                got: len,
            })?;
        if i == commit.slot() {
            slot.copy_from_slice(&commit.encode());
        } else {
            slot.fill(0);
        }
    }
    Ok(bytes)
}

/// Writes a new file durably.
fn write_durable(io: &dyn Io, path: &Path, bytes: &[u8]) -> Result<()> {
    let file = io
        .create_new(path)
        .map_err(|e| Error::io("create", path, e))?;
    io.write_at(&file, 0, bytes)
        .map_err(|e| Error::io("write", path, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", path, e))
}

/// Writes snapshot `name` of the buffer in `dir`, whose newest durable commit is
/// `commit` (already flushed: every live row sealed and synced, the parts ready for a
/// checkpoint); `parts` fix up their copies before the snapshot is published.
pub(crate) fn create(
    io: &dyn Io,
    dir: &Path,
    sb: &Superblock,
    commit: &Commit,
    name: &str,
    parts: &mut Parts,
) -> Result<()> {
    publish(io, dir, name, "snapshot-before-rename", |tmp| {
        link_files(io, sb, dir, tmp, "snapshot-mid-links")?;
        parts.checkpoint_copied(io, tmp)?;
        frozen_manifest(io, dir, commit)
    })
}

/// Makes snapshot folder `name` of the buffer in `dir`, the one way every snapshot is
/// made (taken, or brought from another buffer): `fill` puts its files into a
/// temporary folder (its lane folder made already) and returns its MANIFEST's bytes;
/// then the MANIFEST is written durably, the folders synced, and the folder published
/// by one rename. A kill leaves it whole or absent. A failure before the rename (a
/// full disk mid-copy) removes the partial folder at once: its links would count
/// against every segment until the next open cleans it (best effort: the error that
/// stopped the snapshot is the one reported).
fn publish(
    io: &dyn Io,
    dir: &Path,
    name: &str,
    before_rename: &'static str,
    fill: impl FnOnce(&Path) -> Result<Vec<u8>>,
) -> Result<()> {
    let root = dir.join(SNAPSHOTS_DIR);
    let tmp = root.join(format!("{TMP_PREFIX}{name}"));
    // A kill during an earlier attempt at this name may have left a partial folder.
    remove_tree(io, &tmp)?;
    let made = (|| {
        let lane = tmp.join(LANE_DIR);
        io.create_dir_all(&lane)
            .map_err(|e| Error::io("create directory", &lane, e))?;
        let manifest = fill(&tmp)?;
        write_durable(io, &tmp.join(MANIFEST), &manifest)?;
        sync_dir(io, &lane)?;
        sync_dir(io, &tmp)?;
        crate::killpoint::hit(before_rename);
        let target = root.join(name);
        io.rename(&tmp, &target)
            .map_err(|e| Error::io("rename", &target, e))?;
        sync_dir(io, &root)
    })();
    if made.is_err() {
        let _ = remove_tree(io, &tmp);
    }
    made
}

/// Puts the segment files of the buffer (or snapshot) folder `from` into the folder
/// `to` as hard links (copies where the two are on different file systems), and
/// copies of the parts' files; `point` is the kill point after each segment.
fn link_files(io: &dyn Io, sb: &Superblock, from: &Path, to: &Path, point: &str) -> Result<()> {
    // The rows' segments and the chunk ring's (values of variable-length fields).
    for set in storage::SegmentSet::all(sb) {
        for n in 0..set.segment_count {
            let (src, dst) = (set.path(from, n), set.path(to, n));
            match io.hard_link(&src, &dst) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => io
                    .copy_file(&src, &dst)
                    .map_err(|e| Error::io("copy", &dst, e))?,
                Err(e) => return Err(Error::io("hard link", &dst, e)),
            }
            crate::killpoint::hit(point);
        }
    }
    for file in Parts::files(sb) {
        let (src, dst) = ((file.path)(from), (file.path)(to));
        io.copy_file(&src, &dst)
            .map_err(|e| Error::io("copy", &dst, e))?;
    }
    Ok(())
}

/// The [`State`] of snapshot `name` of the buffer in `dir`, whose superblock is `sb`
/// and whose frozen commit is `commit`.
pub(crate) fn state_of(dir: &Path, name: &str, sb: &Superblock, commit: &Commit) -> State {
    State {
        name: name.to_owned(),
        uuid: sb.uuid,
        generation: commit.generation,
        head: commit.head,
        tail: commit.tail,
        cleared: commit.cleared,
        sampled: commit.sampled,
        rng_seed: commit.rng_seed,
        rng_word_pos: commit.rng_word_pos,
        origin: dir.to_path_buf(),
        schema_crc: sb.schema_crc,
    }
}

/// The first field in which two superblocks differ, other than the uuid (the
/// identity of a line of snapshots, not of a layout): `(field, expected, got)`.
fn layout_difference(
    want: &Superblock,
    got: &Superblock,
) -> Option<(&'static str, String, String)> {
    let heap = |h: &Option<crate::format::manifest::HeapGeometry>| match h {
        Some(h) => format!(
            "{} chunks of {} bytes in {} segments of {}",
            h.capacity, h.stride, h.segment_count, h.segment_slots
        ),
        None => "none".into(),
    };
    let fields: [(&'static str, String, String); 12] = [
        (
            "schema crc",
            format!("{:#010x}", want.schema_crc),
            format!("{:#010x}", got.schema_crc),
        ),
        (
            "schema length",
            want.schema_len.to_string(),
            got.schema_len.to_string(),
        ),
        (
            "capacity",
            want.capacity.to_string(),
            got.capacity.to_string(),
        ),
        (
            "item bytes",
            want.item_bytes.to_string(),
            got.item_bytes.to_string(),
        ),
        (
            "row stride",
            want.row_stride.to_string(),
            got.row_stride.to_string(),
        ),
        (
            "segment slots",
            want.segment_slots.to_string(),
            got.segment_slots.to_string(),
        ),
        (
            "segment count",
            want.segment_count.to_string(),
            got.segment_count.to_string(),
        ),
        (
            "prioritized",
            want.prioritized.to_string(),
            got.prioritized.to_string(),
        ),
        (
            "episodic",
            want.episodic.to_string(),
            got.episodic.to_string(),
        ),
        (
            "whole episodes",
            want.whole_episodes.to_string(),
            got.whole_episodes.to_string(),
        ),
        (
            "fragments",
            want.fragments.to_string(),
            got.fragments.to_string(),
        ),
        (
            "item states",
            want.lifecycle.to_string(),
            got.lifecycle.to_string(),
        ),
    ];
    let chunk_ring = ("chunk ring", heap(&want.heap), heap(&got.heap));
    fields
        .into_iter()
        .chain(std::iter::once(chunk_ring))
        .find(|(_, a, b)| a != b)
}

/// The state to restore in this buffer for `state`: itself when its snapshot is this
/// folder's (its origin is this folder, or names none, or no longer holds it: a folder
/// moved since); otherwise the snapshot of the buffer at `state.origin` is first
/// checked against this buffer's layout (`sb`: the same schema and geometry; the uuid
/// may differ) and brought into this folder's `snapshots/`, and the state of that copy
/// is returned. Bringing it is making a snapshot: in a temporary folder, published by
/// one rename, so a kill leaves it whole or absent and nothing live changes. Segments
/// are hard links (O(1), as taking a snapshot) where the two folders share a file
/// system, copies otherwise; the small files are copies.
pub(crate) fn bring_home(io: &dyn Io, dir: &Path, sb: &Superblock, state: &State) -> Result<State> {
    if state.schema_crc != 0 && state.schema_crc != sb.schema_crc {
        return Err(Error::StateMismatch {
            name: state.name.clone(),
            what: "this buffer",
            field: "schema crc",
            expected: format!("{:#010x}", sb.schema_crc),
            got: format!("{:#010x}", state.schema_crc),
        });
    }
    let origin = &state.origin;
    // The same folder by device and inode: one reached by another path is still this.
    if origin.as_os_str().is_empty() || same_file(origin, dir) {
        return Ok(state.clone());
    }
    let origin = &storage::resolve_root(origin);
    valid_name(&state.name)
        .map_err(|_| Error::BadState(format!("snapshot name {:?}", state.name)))?;
    if !exists(io, origin, &state.name)? {
        return Ok(state.clone());
    }
    check(io, origin, sb, state)?;
    let mut name = state.name.clone();
    for k in 1u32.. {
        if !exists(io, dir, &name)? {
            break;
        }
        // A copy an earlier `set_state` of this state brought (and then, maybe, a kill
        // stopped): the same snapshot, used again.
        let here = State {
            name: name.clone(),
            origin: dir.to_path_buf(),
            ..state.clone()
        };
        if check(io, dir, sb, &here).is_ok() {
            return Ok(here);
        }
        let suffix = format!(".{k}");
        let keep = state
            .name
            .len()
            .min(crate::format::state::MAX_NAME_LEN - suffix.len());
        name = format!("{}{suffix}", state.name.get(..keep).unwrap_or("s"));
    }
    let from = snapshot_dir(origin, &state.name);
    publish(io, dir, &name, "bring-before-rename", |tmp| {
        link_files(io, sb, &from, tmp, "bring-mid-links")?;
        // The origin's MANIFEST as it is: frozen and clean already.
        let manifest = from.join(MANIFEST);
        io.read(&manifest)
            .map_err(|e| Error::io("read", &manifest, e))
    })?;
    Ok(State {
        name,
        origin: dir.to_path_buf(),
        ..state.clone()
    })
}

/// Checks that snapshot `state.name` of the buffer in `dir` can be restored into a
/// buffer laid out as `sb`: the same schema and geometry (the uuid is the snapshot's
/// own, and the state's), and that it froze exactly `state` and has every file with a
/// sound header. Cheap: no item is read (`verify` reads them all).
pub(crate) fn check(io: &dyn Io, dir: &Path, sb: &Superblock, state: &State) -> Result<()> {
    valid_name(&state.name)
        .map_err(|_| Error::BadState(format!("snapshot name {:?}", state.name)))?;
    let snap = snapshot_dir(dir, &state.name);
    if !exists(io, dir, &state.name)? {
        return Err(Error::NoSuchSnapshot {
            dir: dir.to_path_buf(),
            name: state.name.clone(),
        });
    }
    let bad = |source: Error| Error::BadSnapshot {
        dir: dir.to_path_buf(),
        name: state.name.clone(),
        source: Box::new(source),
    };
    let m = Manifest::load(io, &snap).map_err(bad)?;
    let mismatch = |field: &'static str, expected: String, got: String| Error::StateMismatch {
        name: state.name.clone(),
        what: "its snapshot",
        field,
        expected,
        got,
    };
    if let Some((field, expected, got)) = layout_difference(sb, &m.superblock) {
        return Err(Error::StateMismatch {
            name: state.name.clone(),
            what: "this buffer's layout",
            field,
            expected,
            got,
        });
    }
    if state.uuid != m.superblock.uuid {
        return Err(mismatch(
            "uuid",
            crate::format::segment::hex(&m.superblock.uuid),
            crate::format::segment::hex(&state.uuid),
        ));
    }
    let c = m.newest_commit().map_err(bad)?;
    let pairs = [
        ("generation", state.generation, c.generation),
        ("head", state.head, c.head),
        ("tail", state.tail, c.tail),
        ("cleared", state.cleared, c.cleared),
        ("sampled", state.sampled, c.sampled),
        ("rng_seed", state.rng_seed, c.rng_seed),
    ];
    for (field, want, got) in pairs {
        if want != got {
            return Err(mismatch(field, want.to_string(), got.to_string()));
        }
    }
    if state.rng_word_pos != c.rng_word_pos {
        return Err(mismatch(
            "rng_word_pos",
            state.rng_word_pos.to_string(),
            c.rng_word_pos.to_string(),
        ));
    }
    if !c.is_clean() {
        return Err(bad(Error::Corrupt {
            file: m.path,
            offset: 0,
            field: "commit flags".into(),
            expected: "a clean commit".into(),
            got: format!("{:#x}", c.flags),
        }));
    }
    for set in storage::SegmentSet::all(&m.superblock) {
        for n in 0..set.segment_count {
            storage::check_segment_file(io, &snap, &set, n).map_err(bad)?;
        }
    }
    for file in Parts::files(&m.superblock) {
        (file.check)(io, &snap, &m.superblock).map_err(bad)?;
    }
    Ok(())
}

/// Writes the intent to restore `state` durably: from here on, the restore happens,
/// whether this process finishes it or the next open does.
pub(crate) fn write_intent(io: &dyn Io, dir: &Path, state: &State) -> Result<()> {
    let tmp = dir.join(RESTORE_TMP);
    remove_if_present(io, &tmp)?;
    let file = io
        .create_new(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    io.write_at(&file, 0, &state.to_bytes())
        .map_err(|e| Error::io("write", &tmp, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &tmp, e))?;
    let path = dir.join(RESTORE);
    io.rename(&tmp, &path)
        .map_err(|e| Error::io("rename", &path, e))?;
    sync_dir(io, dir)
}

/// Removes the intent to restore, durably: once the restore is done, or for a lane
/// set's restore that never committed (no lane was restored yet).
pub(crate) fn drop_intent(io: &dyn Io, dir: &Path) -> Result<()> {
    let path = dir.join(RESTORE);
    remove_if_present(io, &path)?;
    sync_dir(io, dir)
}

/// The restore under way, if a `set_state` was interrupted.
pub(crate) fn pending_restore(io: &dyn Io, dir: &Path) -> Result<Option<State>> {
    let path = dir.join(RESTORE);
    match io.read(&path) {
        Ok(bytes) => State::decode(&bytes)
            .map(Some)
            .map_err(|p| p.into_error(&path, "restore intent")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Makes `live` another name of the snapshot's file `frozen`, through a temporary name.
fn relink(io: &dyn Io, frozen: &Path, live: &Path) -> Result<()> {
    let tmp = with_ext(live, RESTORE_EXT);
    remove_if_present(io, &tmp)?;
    io.hard_link(frozen, &tmp)
        .map_err(|e| Error::io("hard link", &tmp, e))?;
    io.rename(&tmp, live)
        .map_err(|e| Error::io("rename", live, e))
}

/// `path` with `.ext` appended to its file name.
fn with_ext(path: &Path, ext: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Makes the live files those of snapshot `name`: each segment and the tree become
/// another link to the snapshot's (skipped where they already are), and MANIFEST (last: it
/// is what open reads first) the snapshot's with its commit renumbered past every
/// generation the live buffer has used (so generations never repeat, and neither do the
/// snapshot names made from them) and marked open for writing. Idempotent, so the next
/// open can redo it after a kill; the intent file goes last.
///
/// Returns the replaced segment files, still open: a replaced file that nothing else
/// links is freed when its last handle goes (milliseconds for a segment of page cache
/// and extents), so the caller decides where that happens.
pub(crate) fn restore(
    io: &dyn Io,
    dir: &Path,
    sb: &Superblock,
    name: &str,
) -> Result<Vec<std::fs::File>> {
    let snap = snapshot_dir(dir, name);
    let (frozen, uuid) = Manifest::load(io, &snap)
        .and_then(|m| Ok((m.newest_commit()?, m.superblock.uuid)))
        .map_err(|e| Error::BadSnapshot {
            dir: dir.to_path_buf(),
            name: name.to_owned(),
            source: Box::new(e),
        })?;
    // The live MANIFEST is always whole (it is only ever replaced by a rename).
    let used = Manifest::load(io, dir)
        .and_then(|m| m.newest_commit())
        .map_or(0, |c| c.generation);
    // Marked open (not clean), as the writer's own first commit would: the writer that
    // made this restore goes on from it without another commit, and a crash from here
    // on is recovered like any other.
    let generation = used
        .max(frozen.generation)
        .checked_add(1)
        .ok_or_else(|| Error::Corrupt {
            file: snap.join(MANIFEST),
            offset: 0,
            field: "commit generation".into(),
            expected: "below 2^64 - 1".into(),
            got: u64::MAX.to_string(),
        })?;
    let renumbered = Commit {
        generation,
        flags: 0,
        boot_id: storage::boot_id(),
        ..frozen
    };
    let mut replaced = Vec::new();
    for set in storage::SegmentSet::all(sb) {
        for n in 0..set.segment_count {
            let (live, frozen) = (set.path(dir, n), set.path(&snap, n));
            if same_file(&live, &frozen) {
                continue;
            }
            // A live file may be missing only when a redo finds an earlier attempt's
            // work.
            replaced.extend(io.open_ro(&live).ok());
            relink(io, &frozen, &live)?;
            crate::killpoint::hit("restore-mid-links");
        }
    }
    // The parts' files (the tree) are linked too: the owner maps a linked file
    // read-only and copies it before its first store (`storage::private_tree`).
    // Their renames become durable with MANIFEST's, by the fsync of the folder below.
    for file in Parts::files(sb) {
        let (live, frozen) = ((file.path)(dir), (file.path)(&snap));
        if !same_file(&live, &frozen) {
            replaced.extend(io.open_ro(&live).ok());
            relink(io, &frozen, &live)?;
        }
    }
    if uuid != sb.uuid {
        renamed_progress(io, dir, &uuid)?;
    }
    sync_dir(io, &dir.join(LANE_DIR))?;
    let manifest = frozen_manifest(io, &snap, &renumbered)?;
    let live = dir.join(MANIFEST);
    let tmp = with_ext(&live, RESTORE_EXT);
    remove_if_present(io, &tmp)?;
    write_durable(io, &tmp, &manifest)?;
    io.rename(&tmp, &live)
        .map_err(|e| Error::io("rename", &live, e))?;
    sync_dir(io, dir)?;
    drop_intent(io, dir)?;
    Ok(replaced)
}

/// Gives the progress page the uuid of a snapshot of another line (one brought from
/// another buffer), which readers check it against: its header rewritten in place and
/// synced, before the MANIFEST naming that uuid is. A page with other names (never the
/// engine's doing) is removed instead, so no write reaches them; the writer's open
/// makes a new one, as it does when the page is missing.
fn renamed_progress(io: &dyn Io, dir: &Path, uuid: &[u8; 16]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let path = storage::progress_path(dir);
    let file = match io.open_rw(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("open", &path, e)),
    };
    let meta = file.metadata().map_err(|e| Error::io("stat", &path, e))?;
    if meta.nlink() > 1 {
        drop(file);
        return remove_if_present(io, &path);
    }
    let page = crate::format::progress::encode(uuid);
    let header = page
        .get(..crate::format::progress::HEADER_LEN)
        .unwrap_or(&[]);
    io.write_at(&file, 0, header)
        .map_err(|e| Error::io("write header", &path, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &path, e))
}

/// Finishes a restore a kill interrupted. The snapshot it names must still be sound.
pub(crate) fn finish_restore(io: &dyn Io, dir: &Path) -> Result<()> {
    let Some(state) = pending_restore(io, dir)? else {
        return Ok(());
    };
    // The live MANIFEST is whole at every point of a restore (it is replaced by rename).
    let sb = Manifest::load(io, dir)?.superblock;
    check(io, dir, &sb, &state)?;
    restore(io, dir, &sb, &state.name).map(drop)
}

/// Deletes snapshot `name`: renamed out of the listing first (one atomic step), then its
/// files are removed. Segments the live buffer still links stay, of course.
pub(crate) fn delete(io: &dyn Io, dir: &Path, name: &str) -> Result<()> {
    let root = dir.join(SNAPSHOTS_DIR);
    let snap = root.join(name);
    if !exists(io, dir, name)? {
        return Err(Error::NoSuchSnapshot {
            dir: dir.to_path_buf(),
            name: name.to_owned(),
        });
    }
    // Refused before anything moves if the folder holds what the engine did not write.
    removal_plan(io, &snap, 0, None, &mut Vec::new())?;
    let doomed = root.join(format!("{DEL_PREFIX}{name}"));
    remove_tree(io, &doomed)?;
    io.rename(&snap, &doomed)
        .map_err(|e| Error::io("rename", &doomed, e))?;
    sync_dir(io, &root)?;
    remove_tree(io, &doomed)?;
    sync_dir(io, &root)
}

/// Removes what interrupted operations left behind: snapshot folders being written or
/// deleted, segment copies never renamed into place, restore temporaries. Only the
/// writer calls this, after finishing any restore; `sb` says which part files a
/// restore may have left a temporary copy of.
pub(crate) fn clean_leftovers(io: &dyn Io, dir: &Path, sb: &Superblock) -> Result<()> {
    let listed = |d: &Path| match io.list_dir(d) {
        Ok(entries) => Ok(entries),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io("read directory", d, e)),
    };
    let root = dir.join(SNAPSHOTS_DIR);
    for (name, _) in listed(&root)? {
        let text = name.to_string_lossy();
        if text.starts_with(TMP_PREFIX) || text.starts_with(DEL_PREFIX) {
            remove_tree(io, &root.join(&name))?;
        }
    }
    let lane = dir.join(LANE_DIR);
    for (name, kind) in listed(&lane)? {
        let path = lane.join(&name);
        let ext = path.extension().and_then(|x| x.to_str());
        if matches!(ext, Some(COW_EXT | RESTORE_EXT)) {
            if kind != Kind::File {
                return Err(refused(path, "remove", kind, Kind::File));
            }
            remove_if_present(io, &path)?;
        }
    }
    let part_copies = Parts::files(sb)
        .into_iter()
        .map(|f| with_ext(&(f.path)(dir), RESTORE_EXT));
    let leftovers = [
        with_ext(&dir.join(MANIFEST), RESTORE_EXT),
        dir.join(RESTORE_TMP),
    ];
    for leftover in leftovers.into_iter().chain(part_copies) {
        remove_if_present(io, &leftover)?;
    }
    Ok(())
}
