//! A file-operation seam that knows, at every sync, what a power cut would leave on disk.
//!
//! It passes every operation to the real file system (so the engine runs as it always
//! does) and keeps a model beside it:
//! - the **durable bytes** of each file (by inode): what its last `fdatasync`, msync
//!   range or durable copy wrote. Bytes stored since (through `write_at` or a mapping)
//!   are in the page cache only, and the kernel may have written back any subset of
//!   those 4 KiB pages, in any order, before the cut;
//! - the **durable names**: create, link, rename and remove reach the disk in the order
//!   they were made (ext4's journal commits them in order), and all of them up to a
//!   directory fsync are durable after it. After a cut, any prefix of the later ones may
//!   have made it too. (An fdatasync of a file commits ext4's journal as well; the model
//!   does not count on it, so code that forgot a directory fsync fails here.)
//!
//! Before each sync operation (msync, fdatasync, directory fsync, durable copy) it
//! captures crash images: every durable name with its inode's durable bytes, plus a
//! chosen subset of the dirty pages and of the pending name operations, optionally with
//! one torn 512-byte sector. The test checks each image once the operation in flight
//! has returned, against what had been acknowledged by then.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "a test harness fails loudly"
)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use memmap2::MmapRaw;
use replaystore::io::{Access, Io, OsIo};

const PAGE: usize = 4096;
const SECTOR: usize = 512;

type Ino = u64;

/// A name operation not yet known durable.
#[derive(Clone, Debug)]
enum Name {
    Put(PathBuf, Ino),
    Del(PathBuf),
    Mkdir(PathBuf),
    Rmdir(PathBuf),
    Rename(PathBuf, PathBuf),
}

/// The files a namespace shows.
#[derive(Clone, Debug, Default)]
struct Names {
    files: BTreeMap<PathBuf, Ino>,
    dirs: BTreeSet<PathBuf>,
}

impl Names {
    fn apply(&mut self, op: &Name) {
        match op {
            Name::Put(p, ino) => {
                self.files.insert(p.clone(), *ino);
            }
            Name::Del(p) => {
                self.files.remove(p);
            }
            Name::Mkdir(p) => {
                self.dirs.insert(p.clone());
            }
            Name::Rmdir(p) => {
                self.dirs.remove(p);
            }
            Name::Rename(from, to) => {
                if let Some(ino) = self.files.remove(from) {
                    self.files.insert(to.clone(), ino);
                    return;
                }
                // A directory: everything under it moves (a replaced empty target goes).
                self.dirs.remove(to);
                let moved: Vec<PathBuf> = (self.dirs.iter())
                    .filter(|d| d.starts_with(from))
                    .cloned()
                    .collect();
                for d in moved {
                    self.dirs.remove(&d);
                    self.dirs.insert(to.join(d.strip_prefix(from).unwrap()));
                }
                let moved: Vec<(PathBuf, Ino)> = (self.files.iter())
                    .filter(|(p, _)| p.starts_with(from))
                    .map(|(p, i)| (p.clone(), *i))
                    .collect();
                for (p, ino) in moved {
                    self.files.remove(&p);
                    self.files
                        .insert(to.join(p.strip_prefix(from).unwrap()), ino);
                }
            }
        }
    }
}

/// One crash image: paths relative to the simulated root.
#[derive(Clone, Debug)]
pub struct Image {
    /// The operation of the driver in flight when the image was taken.
    pub phase: usize,
    /// Which sync it was taken before, and how the pages were chosen.
    pub what: String,
    pub dirs: Vec<PathBuf>,
    pub files: Vec<(PathBuf, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct Sim {
    root: PathBuf,
    durable: Names,
    pending: Vec<Name>,
    /// Durable bytes by inode (missing: nothing durable yet).
    bytes: HashMap<Ino, Vec<u8>>,
    /// A read handle on every inode seen, so its bytes can be read after a rename.
    handles: HashMap<Ino, File>,
    /// Mapping start address to inode.
    maps: HashMap<usize, Ino>,
    phase: usize,
    seed: u64,
    /// Random images per capture point, besides the exhaustive or fixed ones.
    random: usize,
    /// The most images a capture point may take to enumerate every combination.
    exhaustive: usize,
    /// Capture points enumerated exhaustively.
    exhaustive_points: u64,
    /// Images taken in all.
    taken: u64,
    images: Vec<Image>,
    /// Capture points seen.
    points: u64,
}

/// The seam. See the module documentation.
#[derive(Debug)]
pub struct SimIo {
    inner: OsIo,
    sim: Mutex<Sim>,
}

fn ino_of(file: &File) -> Ino {
    file.metadata().unwrap().ino()
}

fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

impl SimIo {
    /// A simulation of everything under `root` (which must not exist yet), taking at
    /// each sync every image there is where they number at most `exhaustive`, else the
    /// all-written and durable-only ones, and `random` random images besides.
    pub fn new(root: &Path, seed: u64, exhaustive: usize, random: usize) -> SimIo {
        SimIo {
            inner: OsIo,
            sim: Mutex::new(Sim {
                root: root.to_path_buf(),
                seed: seed | 1,
                random,
                exhaustive,
                ..Sim::default()
            }),
        }
    }

    /// Tags the images taken from now on with the driver's operation number.
    pub fn set_phase(&self, phase: usize) {
        self.sim.lock().unwrap().phase = phase;
    }

    /// The images taken so far (and forgets them).
    pub fn take_images(&self) -> Vec<Image> {
        std::mem::take(&mut self.sim.lock().unwrap().images)
    }

    /// Capture points seen so far.
    pub fn points(&self) -> u64 {
        self.sim.lock().unwrap().points
    }

    /// Capture points whose every image was taken.
    pub fn exhaustive_points(&self) -> u64 {
        self.sim.lock().unwrap().exhaustive_points
    }

    /// Images taken so far.
    pub fn taken(&self) -> u64 {
        self.sim.lock().unwrap().taken
    }

    /// Takes images now, as if the power were cut at this moment.
    pub fn capture(&self, what: &str) {
        self.sim.lock().unwrap().capture(what);
    }

    fn inside(&self, p: &Path) -> Option<PathBuf> {
        let s = self.sim.lock().unwrap();
        p.strip_prefix(&s.root).ok().map(Path::to_path_buf)
    }

    fn name(&self, op: Name) {
        self.sim.lock().unwrap().pending.push(op);
    }

    /// Notes the inode `file` (open as `path`) and keeps a read handle on it: a fresh
    /// open, not a dup, which would share the engine's flock.
    fn seen(&self, file: &File, path: &Path) -> Ino {
        let ino = ino_of(file);
        let mut s = self.sim.lock().unwrap();
        if let std::collections::hash_map::Entry::Vacant(e) = s.handles.entry(ino) {
            e.insert(File::open(path).unwrap());
        }
        ino
    }

    /// The inode of a file seen before (every file is opened by path first).
    fn known(&self, file: &File) -> Ino {
        let ino = ino_of(file);
        assert!(
            self.sim.lock().unwrap().handles.contains_key(&ino),
            "a file the seam never opened"
        );
        ino
    }
}

impl Sim {
    fn current(&self, ino: Ino) -> Vec<u8> {
        let Some(f) = self.handles.get(&ino) else {
            return Vec::new();
        };
        let len = f.metadata().unwrap().len() as usize;
        let mut out = vec![0u8; len];
        f.read_exact_at(&mut out, 0).unwrap();
        out
    }

    fn make_durable(&mut self, ino: Ino, from: usize, to: usize) {
        let now = self.current(ino);
        let old = self.bytes.entry(ino).or_default();
        if old.len() < now.len() {
            old.resize(now.len(), 0);
        }
        let (from, to) = (from / PAGE * PAGE, to.div_ceil(PAGE) * PAGE);
        let to = to.min(now.len());
        if from < to {
            old[from..to].copy_from_slice(&now[from..to]);
        }
    }

    fn commit_names(&mut self) {
        for op in std::mem::take(&mut self.pending) {
            self.durable.apply(&op);
        }
    }

    /// Images of a power cut now. Where every combination of a prefix of the pending
    /// name operations and a subset of the dirty pages comes to at most `exhaustive`
    /// images, all of them (the small workloads' usual case); otherwise the two fixed
    /// ones (everything pending written, nothing of it). Then `random` random choices
    /// either way, every second one with a torn sector.
    fn capture(&mut self, what: &str) {
        self.points += 1;
        let prefixes = self.pending.len() + 1;
        let dirty: Vec<usize> = (0..prefixes).map(|k| self.dirty_pages(k)).collect();
        let combos = dirty.iter().try_fold(0usize, |sum, &d| {
            1usize
                .checked_shl(u32::try_from(d).ok()?)
                .and_then(|n| sum.checked_add(n))
        });
        if combos.is_some_and(|n| n <= self.exhaustive) {
            self.exhaustive_points += 1;
            for (prefix, &d) in dirty.iter().enumerate() {
                for mask in 0..1u64 << d {
                    let label = format!("{what}, names {prefix}, pages {mask:#b}");
                    let mut k = 0;
                    self.image(&label, prefix, false, || {
                        k += 1;
                        mask >> (k - 1) & 1 == 1
                    });
                }
            }
        } else {
            self.image(
                &format!("{what}, all written"),
                self.pending.len(),
                false,
                || true,
            );
            self.image(&format!("{what}, durable only"), 0, false, || false);
        }
        for v in 0..self.random {
            let prefix = (next(&mut self.seed) % prefixes as u64) as usize;
            let mut seed = next(&mut self.seed);
            self.image(&format!("{what}, random {v}"), prefix, v % 2 == 1, || {
                next(&mut seed).is_multiple_of(2)
            });
        }
    }

    /// The namespace after the durable names and the first `prefix` pending ones.
    fn names_after(&self, prefix: usize) -> Names {
        let mut names = self.durable.clone();
        for op in &self.pending[..prefix] {
            names.apply(op);
        }
        names
    }

    /// How many 4 KiB pages differ from their durable bytes, over the files named after
    /// `prefix` pending name operations (in the order `image` visits them).
    fn dirty_pages(&self, prefix: usize) -> usize {
        let mut n = 0;
        for &ino in self.names_after(prefix).files.values() {
            let now = self.current(ino);
            let mut img = self.bytes.get(&ino).cloned().unwrap_or_default();
            img.resize(now.len(), 0);
            n += (0..now.len())
                .step_by(PAGE)
                .filter(|&p| img[p..(p + PAGE).min(now.len())] != now[p..(p + PAGE).min(now.len())])
                .count();
        }
        n
    }

    /// One image: names up to `prefix`, each dirty page (in file and page order) written
    /// where `take` says so, and with `torn`, half of one sector of a written page old.
    fn image(&mut self, what: &str, prefix: usize, torn: bool, mut take: impl FnMut() -> bool) {
        let names = self.names_after(prefix);
        let mut files = Vec::new();
        for (path, &ino) in &names.files {
            let now = self.current(ino);
            let mut old = self.bytes.get(&ino).cloned().unwrap_or_default();
            old.resize(now.len(), 0);
            let mut img = old.clone();
            let mut written = Vec::new();
            for p in (0..now.len()).step_by(PAGE) {
                let end = (p + PAGE).min(now.len());
                if img[p..end] != now[p..end] && take() {
                    img[p..end].copy_from_slice(&now[p..end]);
                    written.push(p);
                }
            }
            if torn && !written.is_empty() {
                let p = written[(next(&mut self.seed) % written.len() as u64) as usize];
                let sectors = (now.len() - p).min(PAGE) / SECTOR;
                if sectors > 0 {
                    let s = p + (next(&mut self.seed) % sectors as u64) as usize * SECTOR;
                    let half = s + SECTOR / 2..s + SECTOR;
                    img[half.clone()].copy_from_slice(&old[half]);
                }
            }
            files.push((path.clone(), img));
        }
        self.images.push(Image {
            phase: self.phase,
            what: what.to_owned(),
            dirs: names.dirs.iter().cloned().collect(),
            files,
        });
        self.taken += 1;
    }
}

impl Io for SimIo {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        let f = self.inner.create_new(path)?;
        if let Some(rel) = self.inside(path) {
            let ino = self.seen(&f, path);
            let mut s = self.sim.lock().unwrap();
            s.bytes.remove(&ino);
            s.pending.push(Name::Put(rel, ino));
        }
        Ok(f)
    }
    fn open_rw(&self, path: &Path) -> io::Result<File> {
        let f = self.inner.open_rw(path)?;
        if self.inside(path).is_some() {
            self.seen(&f, path);
        }
        Ok(f)
    }
    fn open_ro(&self, path: &Path) -> io::Result<File> {
        let f = self.inner.open_ro(path)?;
        if self.inside(path).is_some() {
            self.seen(&f, path);
        }
        Ok(f)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn read_at(&self, file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(file, offset, buf)
    }
    fn allocate(&self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        self.inner.allocate(file, offset, len)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        self.inner.set_len(file, len)
    }
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_at(file, offset, bytes)
    }
    fn write_behind(&self, path: &Path, offset: u64, len: u64, wait: bool) -> io::Result<()> {
        // No promise is made, but the writer has just sealed rows no commit covers yet:
        // a moment worth a crash image (any dirty page may have reached the disk).
        self.sim.lock().unwrap().capture("at a write-behind");
        self.inner.write_behind(path, offset, len, wait)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        let ino = self.known(file);
        let mut s = self.sim.lock().unwrap();
        s.capture("before an fdatasync");
        let len = s.current(ino).len();
        s.make_durable(ino, 0, len);
        drop(s);
        self.inner.sync_data(file)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.sim.lock().unwrap();
        s.capture(&format!("before the fsync of {}", dir.display()));
        s.commit_names();
        drop(s);
        self.inner.sync_dir(dir)
    }
    fn map(&self, file: &File, len: u64, access: Access) -> io::Result<MmapRaw> {
        let map = self.inner.map(file, len, access)?;
        let ino = ino_of(file);
        let mut s = self.sim.lock().unwrap();
        // A file of another folder (a snapshot being brought from another buffer is
        // checked in place, read-only) is not the model's; every other must be known.
        let outside = access == Access::Read && !s.handles.contains_key(&ino);
        if !outside {
            drop(s);
            let ino = self.known(file);
            s = self.sim.lock().unwrap();
            s.maps.insert(map.as_ptr() as usize, ino);
        }
        Ok(map)
    }
    fn flush_map(&self, map: &MmapRaw, offset: usize, len: usize) -> io::Result<()> {
        let mut s = self.sim.lock().unwrap();
        if let Some(&ino) = s.maps.get(&(map.as_ptr() as usize)) {
            s.capture("before an msync");
            s.make_durable(ino, offset, offset + len);
        }
        drop(s);
        self.inner.flush_map(map, offset, len)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let existed = dir.is_dir();
        self.inner.create_dir_all(dir)?;
        if let (Some(rel), false) = (self.inside(dir), existed) {
            // Parents inside the root made by this call count too.
            let mut made = Vec::new();
            let mut p = rel.as_path();
            loop {
                made.push(p.to_path_buf());
                match p.parent() {
                    Some(q) if !q.as_os_str().is_empty() => p = q,
                    _ => break,
                }
            }
            for d in made.into_iter().rev() {
                self.name(Name::Mkdir(d));
            }
        }
        Ok(())
    }
    fn try_lock_exclusive(&self, file: &File) -> io::Result<()> {
        self.inner.try_lock_exclusive(file)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)?;
        if let (Some(a), Some(b)) = (self.inside(from), self.inside(to)) {
            self.name(Name::Rename(a, b));
        }
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)?;
        if let Some(rel) = self.inside(path) {
            self.name(Name::Del(rel));
        }
        Ok(())
    }
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        self.inner.hard_link(original, link)?;
        if let Some(rel) = self.inside(link) {
            let ino = std::fs::metadata(link)?.ino();
            if self.inside(original).is_none() {
                // A file of another folder (a snapshot brought from another buffer),
                // durable there before it was linked here: its bytes are the durable ones.
                let ino = self.seen(&File::open(link)?, link);
                let mut s = self.sim.lock().unwrap();
                let len = s.current(ino).len();
                s.make_durable(ino, 0, len);
            }
            self.name(Name::Put(rel, ino));
        }
        Ok(())
    }
    fn copy_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.sim.lock().unwrap().capture("before a durable copy");
        // The copy is a new file whose bytes are durable when the call returns.
        self.inner.copy_file(from, to)?;
        if let Some(rel) = self.inside(to) {
            let f = File::open(to)?;
            let ino = self.seen(&f, to);
            let mut s = self.sim.lock().unwrap();
            s.bytes.remove(&ino);
            let len = s.current(ino).len();
            s.make_durable(ino, 0, len);
            s.pending.push(Name::Put(rel, ino));
        }
        Ok(())
    }
    fn fs_magic(&self, dir: &Path) -> io::Result<i64> {
        self.inner.fs_magic(dir)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.remove_dir(dir)?;
        if let Some(rel) = self.inside(dir) {
            self.name(Name::Rmdir(rel));
        }
        Ok(())
    }
}

/// Writes `image` under `dir` (which must not exist), with every commit of every
/// MANIFEST marked as made in another boot, as a power cut leaves it.
pub fn materialize(image: &Image, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for d in &image.dirs {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for (p, bytes) in &image.files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut bytes = bytes.clone();
        if p.file_name().is_some_and(|n| n == "MANIFEST") {
            another_boot(&mut bytes);
        }
        std::fs::write(path, bytes).unwrap();
    }
}

/// Rewrites the boot id of each commit slot whose checksum holds (a damaged slot stays
/// damaged).
fn another_boot(manifest: &mut [u8]) {
    const SLOTS: [usize; 2] = [4096, 8192];
    const BOOT_ID_OFF: usize = 72;
    const CRC_OFF: usize = 92;
    for slot in SLOTS {
        if manifest.len() < slot + CRC_OFF + 4 {
            continue;
        }
        let stored = u32::from_le_bytes(
            manifest[slot + CRC_OFF..slot + CRC_OFF + 4]
                .try_into()
                .unwrap(),
        );
        if replaystore::internal::format::crc32(&manifest[slot..slot + CRC_OFF]) != stored {
            continue;
        }
        manifest[slot + BOOT_ID_OFF..slot + BOOT_ID_OFF + 16].copy_from_slice(&[0xee; 16]);
        let crc = replaystore::internal::format::crc32(&manifest[slot..slot + CRC_OFF]);
        manifest[slot + CRC_OFF..slot + CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
    }
}
