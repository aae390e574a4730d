//! One error type for everything the engine can refuse.
//!
//! Each variant carries the context a person needs to act without a debugger: the file,
//! the byte offset, the field, the index, and what was expected against what was found.
//! Nothing is logged instead of returned.

use std::path::PathBuf;

use crate::dtype::DType;

mod finding;
pub(crate) mod foreign;

pub use finding::Finding;

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, with enough context to act on.
///
/// ```
/// use replaystore::Error;
/// let e = Error::Evicted { index: 3, head: 10, tail: 20 };
/// assert!(e.to_string().contains("index 3"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call on a file failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// What was being done (`open`, `allocate`, `msync`, ...).
        op: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Reserving disk space for a file failed because the disk is full.
    #[error("disk full: could not reserve {bytes} bytes for {}", path.display())]
    DiskFull {
        /// The file that could not be reserved.
        path: PathBuf,
        /// How many bytes were asked for.
        bytes: u64,
    },

    /// Another writer holds the buffer's lock.
    #[error(
        "buffer {} is locked by another writer{} (lock file {})",
        dir.display(),
        holder.map(|p| format!(", process {p}")).unwrap_or_default(),
        lock_file.display()
    )]
    Locked {
        /// The buffer directory.
        dir: PathBuf,
        /// The lock file that is held.
        lock_file: PathBuf,
        /// The process holding it, as the buffer's progress page names it (`None` when
        /// the page names none, as for a buffer no writer of this build has opened).
        holder: Option<u32>,
    },

    /// The buffer's priorities belong to another process, its priority owner
    /// ([`crate::PriorityOwner`]): this one adds items (an actor) and may not sample by
    /// priority or update them.
    #[error(
        "the priorities of buffer {} are owned by another process{} (lock file {}): \
         only that PriorityOwner samples by priority and updates them",
        dir.display(),
        holder.map(|p| format!(", process {p}")).unwrap_or_default(),
        lock_file.display()
    )]
    NotPriorityOwner {
        /// The buffer directory.
        dir: PathBuf,
        /// The priority owner's lock file.
        lock_file: PathBuf,
        /// The owning process, as the priorities file names it (`None`: no owner is
        /// running now, or it did not say).
        holder: Option<u32>,
    },

    /// The directory holds no replay buffer (no manifest), or there is no such
    /// directory (the message says which, as the folder is when it is shown).
    #[error("{}", not_a_buffer(dir))]
    NotABuffer {
        /// The directory that was opened.
        dir: PathBuf,
    },

    /// The directory holds a buffer made of lanes: it opens with `Lanes`, and each
    /// lane (`lane-K/`) as a buffer of its own.
    #[error(
        "{} is a buffer of {lanes} lanes: open it with Lanes::open (or open_reader, \
         open_owner), or one lane with Lanes::open_lane",
        dir.display()
    )]
    IsLanes {
        /// The directory.
        dir: PathBuf,
        /// How many lanes it has.
        lanes: u32,
    },
    /// A lane number, or an index whose top byte names a lane, the buffer does not have.
    #[error("{}: no lane {lane}{}: the buffer has lanes 0..{lanes}", dir.display(),
        index.map(|i| format!(" (index {i})")).unwrap_or_default())]
    NoSuchLane {
        /// The directory.
        dir: PathBuf,
        /// The lane asked for.
        lane: u64,
        /// The index that named it, if one did.
        index: Option<u64>,
        /// How many lanes the buffer has.
        lanes: u32,
    },
    /// A buffer group was asked for a member it does not have.
    #[error("{}: the group has no member {name:?} (members: {members:?}){}", dir.display(),
        if *creatable { "" } else { "; a member is created by its first add only when the group has a template config, or by add_member" })]
    NoSuchMember {
        /// The group's directory.
        dir: PathBuf,
        /// The name asked for.
        name: String,
        /// The members it has.
        members: Vec<String>,
        /// Whether the call could have created it (false: no template to create it with).
        creatable: bool,
    },
    /// A member name that cannot be a member's, or one a group already has.
    #[error("{}: member name {name:?}: {problem}", dir.display())]
    BadMember {
        /// The group's directory.
        dir: PathBuf,
        /// The name given.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `create` was asked to make a buffer where one (or other files) already exists.
    #[error("cannot create a buffer in {}: {what}", dir.display())]
    AlreadyExists {
        /// The directory.
        dir: PathBuf,
        /// What was found there.
        what: String,
    },

    /// A file does not start with the magic bytes of its kind.
    #[error("{}: bad magic at offset {offset}: expected {expected:?}, got {got:?}", file.display())]
    BadMagic {
        /// The file.
        file: PathBuf,
        /// Byte offset of the magic.
        offset: u64,
        /// The magic the file should have.
        expected: Vec<u8>,
        /// What it has.
        got: Vec<u8>,
    },

    /// A file was written by a format version this build cannot read.
    #[error("{}: {}", file.display(), version_problem(*found, *supported))]
    UnsupportedVersion {
        /// The file.
        file: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },

    /// A file is shorter than its layout says it must be.
    #[error("{}: truncated: expected at least {expected} bytes, got {got}", file.display())]
    Truncated {
        /// The file.
        file: PathBuf,
        /// The length its layout needs.
        expected: u64,
        /// Its actual length.
        got: u64,
    },

    /// A stored checksum does not match the bytes it covers.
    #[error("{}: checksum mismatch in {what} at offset {offset}: stored {expected:#010x}, computed {got:#010x}", file.display())]
    ChecksumMismatch {
        /// The file.
        file: PathBuf,
        /// Byte offset of the checked region.
        offset: u64,
        /// Which structure (`superblock`, `segment header`, `item 17`, ...).
        what: String,
        /// The checksum stored in the file.
        expected: u32,
        /// The checksum of the bytes as they are.
        got: u32,
    },

    /// A file's contents are well-formed bytes but say something impossible.
    #[error("{}: corrupt {field} at offset {offset}: expected {expected}, got {got}", file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// Byte offset of the field.
        offset: u64,
        /// The field or structure.
        field: String,
        /// What it should be.
        expected: String,
        /// What it is.
        got: String,
    },

    /// Neither commit slot of the manifest is valid.
    #[error("{}: no valid commit slot: slot A: {slot_a}; slot B: {slot_b}", file.display())]
    NoValidCommit {
        /// The manifest.
        file: PathBuf,
        /// Why slot A was rejected.
        slot_a: String,
        /// Why slot B was rejected.
        slot_b: String,
    },

    /// The schema description is invalid (at create time, or as read from disk).
    #[error("invalid schema: {0}")]
    InvalidSchema(String),

    /// The configuration is invalid.
    #[error("invalid config: {field}: {problem}")]
    InvalidConfig {
        /// The option.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },

    /// A batch has no column for a schema field.
    #[error("missing field {field:?}: the schema has it, the batch does not")]
    MissingField {
        /// The field's name.
        field: String,
    },

    /// A batch has a column the schema does not know.
    #[error("unknown field {field:?}: not in the schema (schema fields: {known})")]
    UnknownField {
        /// The column's name.
        field: String,
        /// The schema's field names, comma-separated.
        known: String,
    },

    /// A column was given twice.
    #[error("field {field:?} given twice")]
    DuplicateField {
        /// The field's name.
        field: String,
    },

    /// A column's element type differs from the schema's.
    #[error("field {field:?}: wrong dtype: expected {expected}, got {got}")]
    DTypeMismatch {
        /// The field.
        field: String,
        /// The schema's dtype.
        expected: DType,
        /// The column's dtype.
        got: DType,
    },

    /// A column's shape does not fit the schema's.
    #[error("field {field:?}: wrong shape: expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        /// The field.
        field: String,
        /// The shape that fits (with the batch dimension first for batches).
        expected: Vec<usize>,
        /// The column's shape.
        got: Vec<usize>,
    },

    /// A column's byte length does not match its shape and dtype.
    #[error(
        "field {field:?}: {got} bytes do not hold shape {shape:?} of {dtype} ({expected} bytes)"
    )]
    LengthMismatch {
        /// The field.
        field: String,
        /// The declared shape.
        shape: Vec<usize>,
        /// The declared dtype.
        dtype: DType,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes given.
        got: usize,
    },

    /// A value no item of the field may hold (a bool byte other than 0 or 1).
    #[error("field {field:?}, element {element}: expected {expected}, got {got}")]
    BadValue {
        /// The field.
        field: String,
        /// Position of the value in the column, elements from its start.
        element: usize,
        /// What the field's values may be.
        expected: &'static str,
        /// What was given.
        got: String,
    },

    /// The columns of a batch have different lengths.
    #[error("ragged batch: field {field:?} has {got} rows, field {first_field:?} has {expected}")]
    RaggedBatch {
        /// The field that disagrees.
        field: String,
        /// The first field, whose row count is taken as the batch's.
        first_field: String,
        /// Rows in the first field.
        expected: usize,
        /// Rows in this field.
        got: usize,
    },

    /// A variable-length value is longer than its field allows (or than the chunk ring
    /// holds).
    #[error("field {field:?}, row {row} of the call: {len} elements, at most {max} allowed")]
    ValueTooLong {
        /// The field.
        field: String,
        /// The row of the `add` / `add_batch` call.
        row: usize,
        /// Its length in elements (bytes for bytes and text).
        len: usize,
        /// The most the field (or the buffer's chunk ring) takes.
        max: usize,
    },

    /// The values of an add need room in the value space (the chunk ring) that only
    /// evicting items early would make: the buffer holds fewer than its capacity would
    /// after the add, and no item is dropped before capacity unless the buffer was
    /// created with `Config::evict_for_room`. Nothing was stored.
    #[error(
        "the values of this add need {needed} bytes of value space, which holds {limit} bytes (Config::heap_bytes) and is full with the values of the {live} items held: making room would evict {early} of them before the capacity of {capacity} items is reached; raise Config::heap_bytes, or create the buffer with Config::evict_for_room to allow it"
    )]
    ValueSpaceFull {
        /// Bytes of chunk rows the call's values take.
        needed: u64,
        /// Bytes of the value space (its chunk rows).
        limit: u64,
        /// Items held before the call.
        live: u64,
        /// Items the room would evict beyond those the ring replaces anyway.
        early: u64,
        /// The buffer's capacity in items.
        capacity: u64,
    },

    /// A `str` field's value is not UTF-8.
    #[error("field {field:?}, row {row} of the call: not UTF-8 after byte {valid_up_to}")]
    InvalidText {
        /// The field.
        field: String,
        /// The row of the `add` / `add_batch` call.
        row: usize,
        /// Bytes of the value that are valid UTF-8.
        valid_up_to: usize,
    },

    /// The offsets of a variable-length column do not describe its values.
    #[error("field {field:?}: offsets {problem}")]
    BadOffsets {
        /// The field.
        field: String,
        /// What is wrong.
        problem: String,
    },

    /// An output buffer handed to a gather has the wrong size.
    #[error("output for field {field:?}: expected {expected} bytes, got {got}")]
    OutputSize {
        /// The field.
        field: String,
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
    },

    /// An array a caller handed a draw to fill (Python's `sample(..., out=...)`) is
    /// not the array the draw fills: absent, or of another dtype or shape.
    #[error("out[{array:?}]: expected {expected}, got {got}")]
    OutMismatch {
        /// The array's name, as the draw returns it.
        array: String,
        /// What the draw fills: dtype and shape.
        expected: String,
        /// What was given.
        got: String,
    },

    /// The logical index is no longer (or not yet) in the buffer.
    #[error("index {index} is not live: the buffer holds indices {head}..{tail}")]
    Evicted {
        /// The index asked for.
        index: u64,
        /// The oldest live index.
        head: u64,
        /// One past the newest index.
        tail: u64,
    },

    /// A call on item states (`remove`, a draw that removes, `item_states`) on a buffer
    /// created without them.
    #[error("the buffer in {} keeps no item states: create it with Config::item_states() (Python: item_states=True) to remove items or count their uses", dir.display())]
    NoItemStates {
        /// The buffer directory.
        dir: PathBuf,
    },

    /// The item was removed before the ring overwrote it (item lifecycles: removed by
    /// `remove`, by a draw that removes, used up, ...).
    #[error("item {index} was removed ({cause}): no draw or read returns it")]
    Removed {
        /// The index asked for.
        index: u64,
        /// Why it was removed (`explicit`, `sampled`, `used_up`, ...).
        cause: &'static str,
    },

    /// The rate limiter holds the call back: a draw before enough items are live or
    /// beyond what the adds pay for, an add before the draws caught up (Reverb's
    /// model; see `Config::rate_limit`). `waited` is how long it waited first.
    #[error("rate limited: {what} of {n} may not go ahead ({inserts} added, {samples} drawn, {size} live; {limit}){}", match waited { Some(w) => format!(" after waiting {w:?}"), None => String::new() })]
    RateLimited {
        /// `draw` or `add`.
        what: &'static str,
        /// Items the call asked for.
        n: u64,
        /// Items added since create.
        inserts: u64,
        /// Items drawn since create, by every handle.
        samples: u64,
        /// Items live now.
        size: u64,
        /// The bound that holds it back.
        limit: String,
        /// How long the call waited, when it was allowed to.
        waited: Option<std::time::Duration>,
    },

    /// A sample was asked of an empty buffer (or an empty range of it).
    #[error("cannot sample: the buffer is empty")]
    Empty,

    /// A sample request cannot be met.
    #[error("invalid sample request: {0}")]
    InvalidSample(String),

    /// A prioritized operation on a buffer created without priorities.
    #[error("{}: the buffer has no priorities (create it with Config::prioritized)", dir.display())]
    NotPrioritized {
        /// The buffer directory.
        dir: PathBuf,
    },

    /// Every live item has priority 0 (possible only with `eps` 0), so no item can be
    /// drawn by priority.
    #[error("all {live} live items have priority 0 (eps is 0): nothing can be drawn by priority")]
    ZeroTotalPriority {
        /// Items live.
        live: u64,
    },

    /// A priority given to `update_priorities` is not a finite number >= 0; nothing
    /// of that call was applied.
    #[error("priority {value} at position {position} (index {index}) is not finite and >= 0")]
    InvalidPriority {
        /// Position in the call's arrays.
        position: usize,
        /// The logical index it was for.
        index: u64,
        /// The value given.
        value: f64,
    },

    /// Two arrays of one call that must have the same length do not.
    #[error("{what}: {expected} expected, got {got}")]
    CountMismatch {
        /// Which arrays.
        what: &'static str,
        /// Length of the first.
        expected: usize,
        /// Length of the second.
        got: usize,
    },

    /// A logical index that was never handed out (at or past the tail).
    #[error("index {index} was never added (the next index is {tail})")]
    NotYetAdded {
        /// The index.
        index: u64,
        /// The next index to be given.
        tail: u64,
    },

    /// A slot did not hold the item its index says it should: the bytes were overwritten
    /// or damaged after the item was stored. The item is never served.
    #[error("{}: item {index} at offset {offset}: {problem}", file.display())]
    BadItem {
        /// The segment file.
        file: PathBuf,
        /// Byte offset of the item's slot.
        offset: u64,
        /// The logical index asked for.
        index: u64,
        /// What the check found.
        problem: String,
    },

    /// An earlier sync failed, so the buffer no longer accepts writes: retrying a failed
    /// msync/fsync and reporting success would hide lost data (the kernel has already
    /// marked the pages clean).
    #[error("buffer {} is read-only after an earlier failure: {reason}", dir.display())]
    Poisoned {
        /// The buffer directory.
        dir: PathBuf,
        /// The first failure.
        reason: String,
    },

    /// An episode getter's index outside the chunk and its lookback, without a fill.
    #[error("index {index} is outside the episode chunk: {lookback} lookback entries, then {len}")]
    OutOfWindow {
        /// The index asked for.
        index: i64,
        /// Entries before ts = 0 that may be read.
        lookback: u64,
        /// Entries from ts = 0 on.
        len: u64,
    },

    /// An episode call on a buffer created without `Config::episodic`.
    #[error("{}: the buffer does not keep episodes (create it with Config::episodic)", dir.display())]
    NotEpisodic {
        /// The buffer directory.
        dir: PathBuf,
    },

    /// A row that cannot go where it was asked to in an episode.
    #[error("episode order: {0}")]
    EpisodeOrder(String),

    /// An episode that has no live row (never begun, or evicted), or whose rows a
    /// chunk needs were evicted.
    #[error("episode {id}: {problem}")]
    NoSuchEpisode {
        /// The episode's number.
        id: u64,
        /// What is missing.
        problem: String,
    },

    /// A write on a handle opened read-only (a snapshot).
    #[error("{} is open read-only: {op} is not allowed", dir.display())]
    ReadOnly {
        /// The directory opened.
        dir: PathBuf,
        /// What was attempted.
        op: &'static str,
    },

    /// A snapshot could not be used: its files are missing or damaged.
    #[error("snapshot {name:?} of {}: {source}", dir.display())]
    BadSnapshot {
        /// The buffer directory.
        dir: PathBuf,
        /// The snapshot's name.
        name: String,
        /// What was wrong, naming the file inside the snapshot.
        source: Box<Error>,
    },

    /// No snapshot of that name. An unnamed checkpoint's (`gen-…`) says why it may be
    /// gone: the newest `keep_states` of them are kept.
    #[error("buffer {} has no snapshot {name:?}{}", dir.display(), pruned_note(name))]
    NoSuchSnapshot {
        /// The buffer directory.
        dir: PathBuf,
        /// The name asked for.
        name: String,
    },

    /// A snapshot of that name exists already (snapshots are never overwritten).
    #[error("buffer {} already has a snapshot {name:?}", dir.display())]
    SnapshotExists {
        /// The buffer directory.
        dir: PathBuf,
        /// The name.
        name: String,
    },

    /// A snapshot name that cannot be a folder name everywhere.
    #[error("invalid snapshot name {name:?}: {problem}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },

    /// A `State` that does not describe this buffer or the snapshot of its name.
    #[error("state {name:?} does not match {what}: {field}: expected {expected}, got {got}")]
    StateMismatch {
        /// The state's snapshot name.
        name: String,
        /// What it was compared with.
        what: &'static str,
        /// The field that differs.
        field: &'static str,
        /// The value it should have.
        expected: String,
        /// The value it has.
        got: String,
    },

    /// Bytes that are not a serialized `State`.
    #[error("not a replaystore state: {0}")]
    BadState(String),

    /// The buffer's folder is on a network file system, where shared mappings are not
    /// coherent between machines and `flock` may not exclude a second writer.
    #[error(
        "{}: {fs} is a network file system: a writer's mapped pages are not coherent between \
         machines there and its lock may not keep a second writer out; put the buffer on a \
         local disk (or set REPLAYSTORE_ALLOW_NETWORK_FS=1 if only this machine ever opens it)",
        dir.display()
    )]
    NetworkFileSystem {
        /// The buffer directory.
        dir: PathBuf,
        /// The file system found (`nfs`, `cifs`, ...).
        fs: &'static str,
    },

    /// The platform cannot hold this format (it is little-endian by definition).
    #[error("not supported: {0}")]
    Unsupported(&'static str),

    /// A draw asks for more rows than this machine's memory can hold (checked before
    /// anything is allocated).
    #[error(
        "a draw of {rows} rows needs {} bytes, more than this machine's memory ({limit} \
         bytes): draw fewer rows at a time",
        bytes.map_or_else(|| "over 2^64".to_owned(), |b| b.to_string())
    )]
    TooLarge {
        /// Rows asked for.
        rows: u64,
        /// Bytes they need (`None`: more than a `u64` counts).
        bytes: Option<u64>,
        /// The machine's memory, in bytes.
        limit: u64,
    },

    /// Memory the process could not have (a cap such as `ulimit -v` or a container's):
    /// refused as an error, never an abort.
    #[error("could not allocate {bytes} bytes for {what}: the process's memory is capped below it")]
    OutOfMemory {
        /// What the memory was for.
        what: String,
        /// Bytes asked for.
        bytes: u64,
    },

    /// A path inside a buffer names something the engine did not make: a symbolic link
    /// (anywhere on the way), a FIFO, a device, a socket, or a folder where a file
    /// belongs. Refused before anything is read, written or removed through it.
    #[error(
        "refused to {op} {}: it is {found}, not {expected} (the engine never follows a \
         link, opens a special file or removes what it did not make)",
        path.display()
    )]
    ForeignFile {
        /// The path refused.
        path: PathBuf,
        /// What was about to be done.
        op: &'static str,
        /// What is there (`a symbolic link`, `a named pipe (FIFO)`, ...).
        found: &'static str,
        /// What the engine keeps there (`a regular file`, `a directory`, `a name the
        /// engine writes`).
        expected: &'static str,
    },
}

impl Error {
    /// Wraps an I/O error with the path and operation it came from.
    /// Whether the disk was full: `DiskFull` (a reservation refused up front), or a
    /// write, copy or sync that failed with ENOSPC (a checkpoint's copy, a restore's
    /// files). Either way, freeing space and trying again is the remedy.
    ///
    /// ```
    /// use replaystore::Error;
    /// let e = Error::Io {
    ///     path: "b/MANIFEST".into(),
    ///     op: "write",
    ///     source: std::io::Error::from_raw_os_error(28),
    /// };
    /// assert!(e.is_disk_full());
    /// ```
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::DiskFull { .. } => true,
            Error::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::StorageFull
                    || source.raw_os_error() == Some(28)
            }
            _ => false,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if let Some(f) = foreign::foreign_of(&source) {
            return Error::ForeignFile {
                path: path.into(),
                op,
                found: f.found.describe(),
                expected: f.expected.describe(),
            };
        }
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }
}

/// Says which side is newer, so a person knows whether to upgrade replaystore or to
/// look for damage.
fn version_problem(found: u32, supported: u32) -> String {
    if found > supported {
        format!(
            "written by a newer replaystore (format version {found}); this build reads \
             version {supported}: upgrade replaystore to open it"
        )
    } else {
        format!("format version {found} is not supported (this build reads version {supported})")
    }
}

/// What `NotABuffer` says: no such folder, or a folder without a manifest.
fn not_a_buffer(dir: &std::path::Path) -> String {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("{}: no such folder", dir.display())
        }
        Ok(m) if !m.is_dir() => format!("{} is a file, not a buffer's folder", dir.display()),
        _ => format!(
            "{} is not a replaystore buffer: no MANIFEST file (where a create was cut \
             short, creating the buffer again reuses the folder)",
            dir.display()
        ),
    }
}

/// Why an unnamed checkpoint may be missing: the rule that removes them, and the
/// settings that keep them.
fn pruned_note(name: &str) -> &'static str {
    if name.starts_with("gen-") {
        ": an unnamed checkpoint is removed once keep_states newer ones exist (3 \
         unless set); set_keep_states(None) keeps every one, and get_state_named keeps \
         a checkpoint until it is deleted"
    } else {
        ""
    }
}
