//! `export` (a buffer's items to NumPy's `.npz`) and `import` (an `.npz` to a new buffer).
//!
//! Both stream: export reads the items once, in chunks, and writes each field's chunk at
//! the offset its array has in the archive (the layout is fixed before the first byte,
//! since every size is known); import reads each array's rows in chunks by offset. Neither
//! holds more than a chunk in memory, whatever the buffer's size. Each writes under a
//! temporary name and renames when complete, so a failure or a kill never leaves a
//! partial `.npz` or buffer under the name asked for.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

use crate::fail::Status;
use flate2::read::DeflateDecoder;
use std::path::{Path, PathBuf};

use replaystore::{
    Column, Config, DEFAULT_CHUNK_BYTES, DEFAULT_HEAP_BYTES_PER_ITEM, DType, Error, ReplayBuffer,
    Schema,
};

#[cfg(feature = "parquet")]
use crate::columnar::{ParquetIn, ParquetOut};
use crate::fail::Failure;
use crate::jsonl::JsonlIn;
use crate::npz::{self, Entry};
use crate::progress;
use crate::show::{Format, Printer};
use crate::source::{Selection, Source, Span, select_fields, values_of};

/// Bytes of item data per chunk (all fields together).
const CHUNK_BYTES: usize = 8 << 20;

/// What `export` was asked for.
pub struct ExportArgs<'a> {
    /// The buffer.
    pub dir: &'a Path,
    /// The archive to write.
    pub out: &'a Path,
    /// A snapshot of the buffer instead of its live items.
    pub snapshot: Option<&'a str>,
    /// One lane of a lane set (all lanes, one after another, when `None`).
    pub lane: Option<u32>,
    /// Which items.
    pub span: Span,
    /// Keep removed items, with why each was removed (else they are left out).
    pub include_removed: bool,
    /// Which fields (`a,b`), all when `None`.
    pub fields: Option<&'a str>,
    /// The file's format (told by its extension when `None`).
    pub format: Option<FileKind>,
    /// No progress bar.
    pub quiet: bool,
}

/// One array of the archive being written.
struct Array {
    entry: Entry,
    /// The `.npy` header.
    header: Vec<u8>,
    /// Where the array's item data starts in the archive.
    data_at: u64,
    /// Bytes per item.
    item_bytes: usize,
    /// Index of the field in the schema; `None` for the `removed` codes.
    field: Option<usize>,
    crc: crc32fast::Hasher,
}

/// The file formats `export` writes and `import` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FileKind {
    /// NumPy's `.npz`: one array per fixed field.
    Npz,
    /// Apache Parquet: every field, variable-length ones as strings, binary and lists.
    Parquet,
    /// JSON lines: one object per item, every field.
    Jsonl,
}

impl FileKind {
    /// The kind a file's extension names: `.parquet` / `.pq`, `.jsonl` / `.ndjson`,
    /// anything else `.npz`.
    pub fn of(path: &Path) -> FileKind {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("parquet" | "pq") => FileKind::Parquet,
            Some("jsonl" | "ndjson") => FileKind::Jsonl,
            _ => FileKind::Npz,
        }
    }
}

/// What an export wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    /// Items written.
    pub items: u64,
    /// Fields written per item (a `removed` column not counted).
    pub fields: usize,
    /// Removed items left out (`include_removed` keeps them).
    pub skipped_removed: u64,
}

impl Exported {
    /// What the command says of it, a line each: the items written and, if any were,
    /// the removed ones left out.
    pub fn report(&self, out: &Path) -> Vec<String> {
        let mut lines = vec![format!(
            "exported {} items x {} fields to {}",
            self.items,
            self.fields,
            out.display()
        )];
        lines.extend(crate::source::skipped_note(self.skipped_removed));
        lines
    }
}

/// Writes the chosen items of `args.dir` to `args.out`: one `.npy` per field, or a
/// Parquet or JSON-lines file.
pub fn export(args: &ExportArgs<'_>) -> Result<Exported, Failure> {
    refuse_special_output(args.out)?;
    let mut source = Source::open(args.dir, args.snapshot, args.lane)?;
    let plan = source.plan(&args.span, args.include_removed)?;
    let n = plan.items;
    let schema = source.schema().clone();
    let selection = select_fields(&schema, args.fields)?;
    let kind = args.format.unwrap_or_else(|| FileKind::of(args.out));
    if let (FileKind::Npz, Some(&v)) = (kind, selection.var.first()) {
        let name = schema.var_fields().get(v).map_or("?", |f| f.name());
        return Err(Failure::Usage(format!(
            "field {name:?} is variable-length: .npz holds arrays of fixed fields; export to \
             a .parquet or .jsonl file for every field, or name the fixed fields with --fields"
        )));
    }
    let tmp = temp_name(args.out)?;
    let file = File::create_new(&tmp).map_err(|e| Failure::file("create", &tmp, e))?;
    let mut job = Job {
        path: &tmp,
        source: &mut source,
        plan: &plan,
        schema: &schema,
        chosen: &selection,
        n,
        quiet: args.quiet,
    };
    let written = match kind {
        FileKind::Npz => job.write_npz(file),
        FileKind::Parquet => job.write_parquet(file),
        FileKind::Jsonl => job.write_jsonl(file),
    };
    let result = written.and_then(|file| {
        file.sync_all()
            .map_err(|e| Failure::file("sync", &tmp, e))?;
        std::fs::rename(&tmp, args.out).map_err(|e| Failure::file("rename", args.out, e))
    });
    if let Err(e) = result {
        // Best effort: the temporary file is ours and partial.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(Exported {
        items: n,
        fields: selection.fixed.len() + selection.var.len(),
        skipped_removed: plan.skipped,
    })
}

/// Rows per chunk read for export: `CHUNK_BYTES` of fixed fields, at most 1024 items
/// when there are variable-length values (their size is unknown until read).
fn export_chunk(schema: &Schema, chosen: &Selection) -> u64 {
    let row_bytes: usize = chosen
        .fixed
        .iter()
        .filter_map(|&f| schema.fields().get(f))
        .map(|f| f.bytes())
        .sum();
    let most = if chosen.var.is_empty() {
        1 << 16
    } else {
        1 << 10
    };
    (CHUNK_BYTES / row_bytes.max(1)).clamp(1, most) as u64
}

/// One export: the items it reads and the file it writes (under its temporary name).
struct Job<'a> {
    /// The file being written.
    path: &'a Path,
    source: &'a mut Source,
    /// What to read (`Source::plan`).
    plan: &'a crate::source::Plan,
    schema: &'a Schema,
    chosen: &'a Selection,
    /// Items in all.
    n: u64,
    /// No progress bar.
    quiet: bool,
}

impl Job<'_> {
    /// Writes a Parquet file of the chosen fields, a chunk of items at a time.
    #[cfg(feature = "parquet")]
    fn write_parquet(&mut self, file: File) -> Result<File, Failure> {
        let (path, schema, chosen) = (self.path, self.schema, self.chosen);
        let bar = progress::bar(self.n, "export", self.quiet);
        let chunk = export_chunk(schema, chosen);
        let mut out = ParquetOut::new(file, schema, chosen, self.plan.include_removed)?;
        self.source
            .read_chunks(self.plan, chunk, "export", |indices, batch, removed| {
                out.write(schema, chosen, batch, removed, path)?;
                bar.inc(indices.len() as u64);
                Ok(())
            })?;
        let file = out.finish(path)?;
        bar.finish_and_clear();
        Ok(file)
    }

    /// A build without the `parquet` feature writes none (`export` then removes the
    /// empty temporary file, as after any failure).
    #[cfg(not(feature = "parquet"))]
    fn write_parquet(&mut self, _file: File) -> Result<File, Failure> {
        Err(parquet_left_out())
    }

    /// Writes a JSON-lines file of the chosen fields, a chunk of items at a time.
    fn write_jsonl(&mut self, file: File) -> Result<File, Failure> {
        let (path, schema, chosen) = (self.path, self.schema, self.chosen);
        let bar = progress::bar(self.n, "export", self.quiet);
        let chunk = export_chunk(schema, chosen);
        let var = chosen.var_fields(schema);
        let out = std::io::BufWriter::new(file);
        let mut printer = Printer::new(out, Format::Jsonl, chosen.fields(schema), false)
            .with_values(var.clone(), true)
            .without_index();
        if self.plan.include_removed {
            printer = printer.with_removed();
        }
        self.source
            .read_chunks(self.plan, chunk, "export", |indices, batch, removed| {
                let vals = values_of(batch, &var)?;
                printer.rows(indices, None, &chosen.columns(batch), &vals, removed)?;
                bar.inc(indices.len() as u64);
                Ok(())
            })?;
        let file = printer
            .into_inner()
            .and_then(|w| w.into_inner().map_err(std::io::IntoInnerError::into_error))
            .map_err(|e| Failure::file("write", path, e))?;
        bar.finish_and_clear();
        Ok(file)
    }

    /// Writes an `.npz` of the chosen fixed fields, each array's place fixed before the
    /// first byte (every size is known).
    fn write_npz(&mut self, file: File) -> Result<File, Failure> {
        let n = self.n;
        let mut arrays = Vec::with_capacity(self.chosen.fixed.len());
        let mut offset = 0u64;
        for &f in &self.chosen.fixed {
            let field = self
                .schema
                .fields()
                .get(f)
                .ok_or_else(|| Failure::Usage(format!("no field {f}")))?;
            let mut shape = vec![n];
            shape.extend(field.shape().iter().map(|&d| d as u64));
            let header = npz::npy_header(field.dtype(), &shape);
            let size = header.len() as u64 + n * field.bytes() as u64;
            let name = format!("{}.npy", field.name());
            let data_at = offset + npz::Entry::local_len(&name, size, offset) as u64;
            let mut crc = crc32fast::Hasher::new();
            crc.update(&header);
            arrays.push(Array {
                entry: Entry::stored(&name, size, offset),
                data_at: data_at + header.len() as u64,
                header,
                item_bytes: field.bytes(),
                field: Some(f),
                crc,
            });
            offset = data_at + size;
        }
        if self.plan.include_removed {
            // Why each item was removed, as a code: 0 live, else the cause's number in
            // the item states (docs/FORMAT.md): 1 explicit, 2 sampled, 3 used_up, 4
            // stale, 5 consumed, 6 downsampled, 7 reservoir.
            let header = npz::npy_header(DType::U8, &[n]);
            let size = header.len() as u64 + n;
            let name = "removed.npy";
            let data_at = offset + npz::Entry::local_len(name, size, offset) as u64;
            let mut crc = crc32fast::Hasher::new();
            crc.update(&header);
            arrays.push(Array {
                entry: Entry::stored(name, size, offset),
                data_at: data_at + header.len() as u64,
                header,
                item_bytes: 1,
                field: None,
                crc,
            });
            offset = data_at + size;
        }
        self.write_archive(&file, &mut arrays, offset)?;
        Ok(file)
    }

    /// Writes the arrays' headers, every chunk of items at its arrays' offsets, then
    /// the local headers (with the CRCs) and the central directory at `directory_at`.
    fn write_archive(
        &mut self,
        file: &File,
        arrays: &mut [Array],
        directory_at: u64,
    ) -> Result<(), Failure> {
        let path = self.path;
        let write = |at: u64, bytes: &[u8]| {
            file.write_all_at(bytes, at)
                .map_err(|e| Failure::file("write", path, e))
        };
        for a in arrays.iter() {
            write(a.data_at - a.header.len() as u64, &a.header)?;
        }
        let row_bytes: usize = self.schema.fields().iter().map(|f| f.bytes()).sum();
        let chunk = (CHUNK_BYTES / row_bytes.max(1)).clamp(1, 1 << 16) as u64;
        let bar = progress::bar(self.n, "export", self.quiet);
        let mut row = 0u64;
        let mut codes = Vec::new();
        self.source
            .read_chunks(self.plan, chunk, "export", |indices, batch, removed| {
                codes.clear();
                codes.extend(removed.unwrap_or(&[]).iter().map(|&name| cause_code(name)));
                for a in arrays.iter_mut() {
                    let bytes = match a.field {
                        Some(f) => batch.fields().get(f).map_or(&[][..], |f| f.bytes()),
                        None => &codes[..],
                    };
                    a.crc.update(bytes);
                    write(a.data_at + row * a.item_bytes as u64, bytes)?;
                }
                row += indices.len() as u64;
                bar.inc(indices.len() as u64);
                Ok(())
            })?;
        bar.finish_and_clear();
        let mut entries = Vec::with_capacity(arrays.len());
        for a in arrays.iter_mut() {
            a.entry.crc = a.crc.clone().finalize();
            write(a.entry.header_offset, &a.entry.local_header())?;
            entries.push(a.entry.clone());
        }
        write(directory_at, &npz::directory(&entries, directory_at))
    }
}

/// The number of the cause named `name` in the item states (0: live, `""`).
fn cause_code(name: &str) -> u8 {
    replaystore::Cause::ALL
        .iter()
        .position(|c| c.name() == name)
        .map_or(0, |p| p as u8 + 1)
}

/// A sibling of `path` to write under before renaming into place.
/// Export writes a new file and renames it over `out`: an existing FIFO, device, socket,
/// link or folder there would be replaced, not written through, so it is refused
/// before any work.
fn refuse_special_output(out: &Path) -> Result<(), Failure> {
    let Ok(meta) = std::fs::symlink_metadata(out) else {
        return Ok(());
    };
    let t = meta.file_type();
    if t.is_file() {
        return Ok(());
    }
    use std::os::unix::fs::FileTypeExt;
    let what = if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a device"
    };
    Err(Failure::Usage(format!(
        "{}: it is {what}, not a regular file; export writes a new file and renames it into \
         place, which would replace it: choose another path or remove it first",
        out.display()
    )))
}

/// `.NAME.tmp-PID` beside `path`: where an export or import writes before its rename.
/// Such names left by a killed run (its process gone) are removed first, so a killed
/// import leaves no half-made buffer behind for longer than the next run.
fn temp_name(path: &Path) -> Result<PathBuf, Failure> {
    let name = path
        .file_name()
        .ok_or_else(|| Failure::Usage(format!("{}: not a file name", path.display())))?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".tmp-");
    clear_stale_temps(path, &prefix);
    let mut tmp = prefix;
    tmp.push(std::process::id().to_string());
    Ok(path.with_file_name(tmp))
}

/// Removes `PREFIX<pid>` entries beside `path` whose process no longer runs. Best
/// effort: one that cannot be removed stays, as before. A live process's is never
/// touched (another import running now), nor is any name that does not end in a pid.
fn clear_stale_temps(path: &Path, prefix: &std::ffi::OsStr) {
    use std::os::unix::ffi::OsStrExt;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .as_bytes()
            .strip_prefix(prefix.as_bytes())
            .and_then(|p| std::str::from_utf8(p).ok())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let stale = entry.path();
        // Never through a link: a link in its place is removed as the link.
        let _ = match std::fs::symlink_metadata(&stale) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&stale),
            Ok(_) => std::fs::remove_file(&stale),
            Err(e) => Err(e),
        };
    }
}

/// What `import` was asked for.
pub struct ImportArgs<'a> {
    /// The `.npz`, Parquet or JSON-lines file.
    pub input: &'a Path,
    /// Its format (told by its extension when `None`).
    pub format: Option<FileKind>,
    /// The buffer to create.
    pub dir: &'a Path,
    /// Items the new buffer holds (default: the arrays' length).
    pub capacity: Option<u64>,
    /// Keep priorities with this alpha (new items get priority 1).
    pub prioritized: Option<f64>,
    /// No progress bar.
    pub quiet: bool,
}

/// One array of the archive being read.
struct Input {
    name: String,
    dtype: DType,
    item_shape: Vec<usize>,
    item_bytes: usize,
    /// Where its `.npy` starts in the archive.
    npy_at: u64,
    entry: Entry,
    /// Its bytes after the header, in order.
    stream: Stream,
    crc: crc32fast::Hasher,
}

/// An archive member's bytes, read in order from its start: by offset when stored, or
/// through an inflater over its own file handle when deflated (`np.savez_compressed`).
enum Stream {
    Stored { file: File, at: u64, end: u64 },
    Deflated(Box<DeflateDecoder<std::io::Take<BufReader<File>>>>),
}

impl Stream {
    fn open(path: &Path, entry: &Entry, start: u64) -> Result<Stream, Failure> {
        let mut file = File::open(path).map_err(|e| Failure::file("open", path, e))?;
        match entry.method {
            npz::STORED => Ok(Stream::Stored {
                file,
                at: start,
                end: start + entry.size,
            }),
            npz::DEFLATED => {
                file.seek(SeekFrom::Start(start))
                    .map_err(|e| Failure::file("seek", path, e))?;
                let raw = BufReader::new(file).take(entry.compressed);
                Ok(Stream::Deflated(Box::new(DeflateDecoder::new(raw))))
            }
            m => Err(Failure::input(
                path,
                format!(
                    "{}: compression method {m} is not supported (stored and deflated are)",
                    entry.name
                ),
            )),
        }
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        match self {
            Stream::Stored { file, at, end } => {
                if *at + buf.len() as u64 > *end {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                file.read_exact_at(buf, *at)?;
                *at += buf.len() as u64;
                Ok(())
            }
            Stream::Deflated(d) => d.read_exact(buf),
        }
    }
}

/// Reads the archive's directory and every array's header, checking that they make
/// one schema of arrays with equal lengths.
fn read_inputs(file: &File, path: &Path) -> Result<(Vec<Input>, u64), Failure> {
    let bad = |what: String| Failure::input(path, what);
    let read = |at: u64, len: u64| -> Result<Vec<u8>, Failure> {
        let mut b =
            vec![0u8; usize::try_from(len).map_err(|_| bad(format!("{len} bytes at {at}")))?];
        file.read_exact_at(&mut b, at)
            .map_err(|e| Failure::file("read", path, e))?;
        Ok(b)
    };
    let len = file
        .metadata()
        .map_err(|e| Failure::file("stat", path, e))?
        .len();
    let tail_at = len.saturating_sub(npz::TAIL_SEARCH);
    let tail = read(tail_at, len - tail_at)?;
    let span = npz::find_directory(&tail, tail_at).map_err(bad)?;
    if span
        .offset
        .checked_add(span.size)
        .is_none_or(|end| end > len)
    {
        return Err(bad(format!(
            "the central directory ({} bytes at offset {}) runs past the end ({len} bytes)",
            span.size, span.offset
        )));
    }
    let entries = npz::parse_directory(&read(span.offset, span.size)?, span.count).map_err(bad)?;
    if entries.is_empty() {
        return Err(bad("the archive holds no arrays".into()));
    }
    let mut inputs: Vec<Input> = Vec::with_capacity(entries.len());
    let mut rows: Option<(u64, String)> = None;
    for entry in entries {
        let name = entry
            .name
            .strip_suffix(".npy")
            .ok_or_else(|| bad(format!("member {:?} is not an .npy array", entry.name)))?
            .to_string();
        let local = read(entry.header_offset, npz::LOCAL_LEN as u64)?;
        let npy_at = npz::data_start(&local, entry.header_offset).map_err(bad)?;
        if npy_at.checked_add(entry.compressed).is_none_or(|e| e > len) {
            return Err(bad(format!(
                "{}: {} bytes at offset {npy_at} run past the end ({len} bytes)",
                entry.name, entry.compressed
            )));
        }
        let member = |e: String| bad(format!("{}: {e}", entry.name));
        let mut stream = Stream::open(path, &entry, npy_at)?;
        let mut head = vec![0u8; 10];
        let more = |stream: &mut Stream, head: &mut Vec<u8>, n: usize| {
            let at = head.len();
            head.resize(at + n, 0);
            stream
                .read_exact(head.get_mut(at..).unwrap_or_default())
                .map_err(|e| member(format!("reading its header: {e}")))
        };
        stream
            .read_exact(&mut head)
            .map_err(|e| member(format!("reading its header: {e}")))?;
        let prefix = npz::npy_prefix_len(&head).map_err(member)?;
        let have = head.len();
        more(&mut stream, &mut head, prefix - have)?;
        let header_len = npz::npy_dict_len(&head).map_err(member)?;
        // NumPy itself refuses headers over 10,000 bytes (max_header_size): a length
        // near 4 GiB in 126 bytes of file must not become a 4 GiB allocation.
        if header_len > npz::MAX_HEADER_LEN {
            return Err(member(format!(
                "its header claims {header_len} bytes; NumPy writes at most {} (and reads \
                 at most 10,000 by default)",
                npz::MAX_HEADER_LEN
            )));
        }
        more(&mut stream, &mut head, header_len)?;
        let h = npz::parse_npy_header(&head).map_err(member)?;
        let dtype = DType::from_numpy_str(&h.descr).map_err(member)?;
        let Some((&n, item)) = h.shape.split_first() else {
            return Err(member(
                "a 0-d array; every array needs the item dimension first".into(),
            ));
        };
        if h.fortran_order && item.iter().any(|&d| d > 1) {
            return Err(member(
                "Fortran order; save np.ascontiguousarray(arr) instead".into(),
            ));
        }
        let item_shape: Vec<usize> = item.iter().map(|&d| d as usize).collect();
        let item_bytes = item_shape.iter().product::<usize>() * dtype.size();
        let expected = (h.data_offset as u64).saturating_add(n.saturating_mul(item_bytes as u64));
        if entry.size != expected {
            return Err(member(format!(
                "shape {:?} of {} needs {expected} bytes with its header, the member has {}",
                h.shape,
                dtype.name(),
                entry.size
            )));
        }
        match &rows {
            Some((m, first)) if *m != n => {
                return Err(bad(format!(
                    "arrays of unequal length: {first} has {m} items, {} has {n}",
                    entry.name
                )));
            }
            Some(_) => {}
            None => rows = Some((n, entry.name.clone())),
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        inputs.push(Input {
            name,
            dtype,
            item_shape,
            item_bytes,
            npy_at,
            entry,
            stream,
            crc,
        });
    }
    Ok((inputs, rows.map_or(0, |r| r.0)))
}

/// Creates a buffer in `args.dir` from `args.input`: the arrays of an `.npz` (the
/// schema from their dtypes and shapes, in archive order), or the columns of a Parquet
/// or JSON-lines file (see `columnar` and `jsonl` for how each maps to fields).
pub fn import(args: &ImportArgs<'_>) -> Result<Status, Failure> {
    let path = args.input;
    match args.format.unwrap_or_else(|| FileKind::of(path)) {
        FileKind::Npz => {
            let file = File::open(path).map_err(|e| Failure::file("open", path, e))?;
            let (mut inputs, n) = read_inputs(&file, path)?;
            let mut builder = Schema::builder();
            for i in &inputs {
                builder = builder.field(&i.name, i.dtype, &i.item_shape);
            }
            create_from(args, builder.build()?, n, (0, 0), |buf, done| {
                fill_npz(path, buf, &mut inputs, n, done)
            })
        }
        FileKind::Parquet => import_parquet(args),
        FileKind::Jsonl => {
            let table = JsonlIn::open(path)?;
            create_from(
                args,
                table.schema()?,
                table.rows,
                (table.value_bytes, table.calls()),
                |buf, done| table.fill(buf, done),
            )
        }
    }
}

/// Creates a buffer from the columns of a Parquet file (`columnar` maps them to fields).
#[cfg(feature = "parquet")]
fn import_parquet(args: &ImportArgs<'_>) -> Result<Status, Failure> {
    let table = ParquetIn::open(args.input)?;
    let values = table.value_bytes()?;
    create_from(args, table.schema()?, table.rows, values, |buf, done| {
        table.fill(buf, done)
    })
}

/// A build without the `parquet` feature reads none.
#[cfg(not(feature = "parquet"))]
fn import_parquet(_args: &ImportArgs<'_>) -> Result<Status, Failure> {
    Err(parquet_left_out())
}

/// How a build without Parquet refuses a Parquet file: what to use instead, and how
/// to get a build that has it, from the shell and from pip.
pub const PARQUET_LEFT_OUT: &str = "this build of replaystore has no Parquet (the Python \
     package built from source leaves it out to build in minutes): use a .jsonl file (every \
     field) or .npz (fixed fields), install the replaystore wheel, or rebuild with \
     `MATURIN_PEP517_ARGS=\"--features parquet\" pip install ./python`; `cargo build --release` \
     of the command has it";

/// The refusal of a Parquet file by a build without it.
#[cfg(not(feature = "parquet"))]
fn parquet_left_out() -> Failure {
    Failure::Usage(PARQUET_LEFT_OUT.to_owned())
}

/// Chunk-ring bytes for `n` items whose values take `value_bytes`, added in `calls`
/// calls, in a buffer of `capacity`: room for all of them plus the chunk tail each call
/// may leave unfilled and, for the room beyond `n`, what items of the same mean size added one
/// call each need (whole chunks), at least the engine's default per item.
fn heap_for((value_bytes, calls): (u64, u64), n: u64, capacity: u64) -> u64 {
    // Chunk rows: the payload the values fill, and the row's 16-byte header.
    let (payload, stride) = (DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK_BYTES + 16);
    let per_item = value_bytes.div_ceil(n.max(1));
    let per_call = (per_item.div_ceil(payload) + 1) * stride;
    let room = capacity.saturating_sub(n) * per_call.max(DEFAULT_HEAP_BYTES_PER_ITEM);
    (value_bytes.div_ceil(payload) + calls + 1) * stride + room
}

/// Makes the buffer under a temporary name, has `fill` add the items (telling how many
/// after each step), checks that none was lost, closes it and renames it into place.
/// `values`: the bytes of the items' variable-length values and the calls that add them.
fn create_from(
    args: &ImportArgs<'_>,
    schema: Schema,
    n: u64,
    values: (u64, u64),
    fill: impl FnOnce(&mut ReplayBuffer, &mut dyn FnMut(u64)) -> Result<(), Failure>,
) -> Result<Status, Failure> {
    let capacity = match args.capacity {
        Some(c) => c,
        None if n > 0 => n,
        None => {
            return Err(Failure::Usage(
                "the input holds no items: give --capacity for the empty buffer".into(),
            ));
        }
    };
    let fields = schema.fields().len() + schema.var_fields().len();
    let has_var = schema.has_var();
    let mut config = Config::new(schema, capacity);
    if has_var {
        config = config.heap_bytes(heap_for(values, n, capacity));
    }
    if let Some(alpha) = args.prioritized {
        config = config.prioritized(alpha, 1e-6);
    }
    if std::fs::read_dir(args.dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::AlreadyExists {
            dir: args.dir.to_path_buf(),
            what: "the folder is not empty".into(),
        }
        .into());
    }
    let tmp = temp_name(args.dir)?;
    let made = (|| {
        let mut buf = ReplayBuffer::create(&tmp, config)?;
        let bar = progress::bar(n, "import", args.quiet);
        fill(&mut buf, &mut |k| bar.inc(k))?;
        bar.finish_and_clear();
        // Every item read must be live (the newest `capacity` of them): a chunk ring
        // too small would have evicted some for space.
        let want = n.min(capacity);
        if buf.len() != want {
            return Err(Failure::input(
                args.input,
                format!(
                    "the new buffer kept {} of the {want} items it should",
                    buf.len()
                ),
            ));
        }
        buf.close()?;
        if args.dir.is_dir() {
            // An empty folder the user made: rename cannot replace it on every system.
            std::fs::remove_dir(args.dir).map_err(|e| Failure::file("replace", args.dir, e))?;
        }
        std::fs::rename(&tmp, args.dir).map_err(|e| Failure::file("rename", args.dir, e))
    })();
    if let Err(e) = made {
        // Best effort: the half-made buffer is ours.
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    eprintln!(
        "imported {n} items x {fields} fields into {} (capacity {capacity})",
        args.dir.display()
    );
    Ok(Status::SUCCESS)
}

/// Adds the arrays' rows, a chunk at a time, checking each member's CRC-32 at its end.
fn fill_npz(
    path: &Path,
    buf: &mut ReplayBuffer,
    inputs: &mut [Input],
    n: u64,
    done: &mut dyn FnMut(u64),
) -> Result<(), Failure> {
    let row_bytes: usize = inputs.iter().map(|i| i.item_bytes).sum();
    let chunk = (CHUNK_BYTES / row_bytes.max(1)).clamp(1, 1 << 16) as u64;
    let mut bufs: Vec<Vec<u8>> = inputs
        .iter()
        .map(|i| vec![0u8; chunk as usize * i.item_bytes])
        .collect();
    let mut at = 0;
    while at < n {
        let rows = (n - at).min(chunk);
        for (i, b) in inputs.iter_mut().zip(bufs.iter_mut()) {
            let len = rows as usize * i.item_bytes;
            let dst = b.get_mut(..len).unwrap_or_default();
            i.stream.read_exact(dst).map_err(|e| {
                Failure::input(path, format!("{}: reading item {at}: {e}", i.entry.name))
            })?;
            i.crc.update(dst);
        }
        let cols: Vec<Column<'_>> = inputs
            .iter()
            .zip(&bufs)
            .map(|(i, b)| {
                let mut shape = vec![rows as usize];
                shape.extend(&i.item_shape);
                Column::from_bytes(
                    &i.name,
                    i.dtype,
                    &shape,
                    b.get(..rows as usize * i.item_bytes).unwrap_or_default(),
                )
            })
            .collect();
        buf.add_batch(&cols)?;
        at += rows;
        done(rows);
    }
    for i in inputs.iter() {
        let got = i.crc.clone().finalize();
        if got != i.entry.crc {
            return Err(Failure::input(
                path,
                format!(
                    "{}: CRC-32 mismatch at offset {}: the archive says {:#010x}, the bytes give {got:#010x}",
                    i.entry.name, i.npy_at, i.entry.crc
                ),
            ));
        }
    }
    Ok(())
}
