//! `info` and `snapshots`: what a buffer's files say, for people and for scripts.

use crate::fail::Status;
pub(crate) use crate::show::human;
use std::path::Path;

use replaystore::internal::PriorityInfo;
use replaystore::internal::format::group::GroupDoc;
use replaystore::internal::format::lanes::{LanesFile, first_index};
use replaystore::internal::format::segment::hex;
use replaystore::internal::storage;
use replaystore::io::OsIo;
use replaystore::{Info, ReplayBuffer, ValueStats, inspect, snapshots};
use serde_json::json;

use crate::fail::Failure;

fn info_json(info: &Info) -> serde_json::Value {
    let mut v = info_json_fields(info);
    let c = &info.commit;
    // Bytes only the snapshots hold (segments the writer copied since they were taken).
    let snapshot_bytes: u64 =
        snapshots(&info.dir).map_or(0, |l| l.iter().map(|s| s.bytes_owned).sum());
    if let Some(map) = v.as_object_mut() {
        map.insert("committed".into(), json!({"head": c.head, "tail": c.tail}));
        map.insert("snapshot_bytes".into(), json!(snapshot_bytes));
    }
    v
}

fn info_json_fields(info: &Info) -> serde_json::Value {
    let fields = schema_json(info);
    let c = &info.commit;
    json!({
        "dir": info.dir,
        "uuid": info.uuid,
        "format_version": info.format_version,
        "schema": fields,
        "capacity": info.capacity,
        "len": info.len(),
        "head": info.live.start,
        "tail": info.live.end,
        "added": info.live.end,
        "evicted": info.live.start - c.cleared,
        "cleared": c.cleared,
        "sampled": info.sampled(),
        "sampled_by_readers_since_commit": info.reader_draws,
        "generation": c.generation,
        "clean": c.is_clean(),
        "segment_slots": info.segment_slots,
        "segment_count": info.segment_count,
        "row_stride": info.row_stride,
        "data_bytes": info.data_bytes,
        "bytes_on_disk": info.bytes_on_disk,
        "bytes_at_most": info.bytes_at_most,
        "whole_episodes": info.whole_episodes,
        "values": info.values.as_ref().map(values_json),
        "fragments": info.fragments,
        "items": info.items.as_ref().map(|i| json!({
            "max_use": i.max_use,
            "policy": i.policy,
            "max_size": i.max_size,
            "live": i.live,
            "removed": i.removed,
            "removals": removals_json(&i.removals),
            "uses": i.uses,
            "never_drawn": i.never_drawn,
            "max_uses": i.max_uses,
            "moved": i.moved,
        })),
        "episodes": info.episodes.as_ref().map(|e| json!({
            "count": e.count,
            "ended": e.ended,
            "steps_min": e.steps.map(|s| s.0),
            "steps_mean": e.steps.map(|s| s.1),
            "steps_max": e.steps.map(|s| s.2),
            "mean_return": e.mean_return,
            "problem": e.problem,
        })),
        "priorities": info.priorities.as_ref().map(|p| json!({
            "alpha": p.alpha,
            "eps": p.eps,
            "arity": p.arity,
            "total": p.total,
            "min": p.min_max.map(|m| m.0),
            "max": p.min_max.map(|m| m.1),
            "zero": p.zero,
            "max_seen": p.max_seen,
            "updates": p.updates,
            "stale_updates": p.stale_updates,
            "histogram": p.histogram.iter()
                .map(|&(lo, hi, n)| json!({"low": lo, "high": hi, "count": n}))
                .collect::<Vec<_>>(),
        })),
    })
}

/// Per-field length statistics of the variable-length values, and the chunk ring's use.
fn values_json(v: &ValueStats) -> serde_json::Value {
    json!({
        "fields": v.fields.iter().map(|f| json!({
            "name": f.field,
            "unit": f.unit,
            "min": f.lengths.map(|l| l.0),
            "median": f.lengths.map(|l| l.1),
            "p99": f.lengths.map(|l| l.2),
            "max": f.lengths.map(|l| l.3),
            "bytes": f.bytes,
        })).collect::<Vec<_>>(),
        "chunk_bytes_used": v.chunk_bytes_used,
        "chunk_bytes_capacity": v.chunk_bytes_capacity,
        "chunk_bytes_on_disk": v.chunk_bytes_on_disk,
        "evict_for_room": v.evict_for_room,
        "problem": v.problem,
    })
}

/// `values` lines: each field's lengths, then what the chunk ring holds.
fn print_values(v: &ValueStats) {
    if let Some(p) = &v.problem {
        say!("values     unreadable: {p}");
        return;
    }
    let total: u64 = v.fields.iter().map(|f| f.bytes).sum();
    say!(
        "values     {} in live values; chunk ring {} used of {} (its limit), {} on disk; \
         when full before capacity an add {}",
        human(total),
        human(v.chunk_bytes_used),
        human(v.chunk_bytes_capacity),
        human(v.chunk_bytes_on_disk),
        match v.evict_for_room {
            true => "evicts the oldest items",
            false => "is refused",
        }
    );
    for f in &v.fields {
        match f.lengths {
            Some((lo, mid, p99, hi)) => say!(
                "  {:<16} {} min {lo}  median {mid}  p99 {p99}  max {hi}  ({})",
                f.field,
                f.unit,
                human(f.bytes)
            ),
            None => say!("  {:<16} no live values", f.field),
        }
    }
}

/// Width of the longest histogram bar.
const BAR: u64 = 40;

/// Removals by cause, as JSON (every cause, zeros included, so scripts can rely on
/// the keys).
fn removals_json(r: &replaystore::Removals) -> serde_json::Value {
    let map = replaystore::Cause::ALL
        .iter()
        .map(|&c| (c.name().to_owned(), json!(r.of(c))))
        .collect::<serde_json::Map<_, _>>();
    serde_json::Value::Object(map)
}

/// The item states' lines: the live range split into live and removed, the uses of
/// the live items, and the removals since create by cause (only causes that happened).
fn print_items(i: &replaystore::ItemStats) {
    let bound = |v: u64| match v {
        0 => "none".to_owned(),
        v => v.to_string(),
    };
    let policy = match i.policy {
        "fifo" => "FIFO".to_owned(),
        p => format!("{p} {}", i.max_size),
    };
    say!(
        "items      {} live, {} removed but not yet passed by the ring; max_use {}; policy {}",
        i.live,
        i.removed,
        bound(i.max_use),
        policy
    );
    say!(
        "uses       {} draws of live items; {} never drawn; most {}",
        i.uses,
        i.never_drawn,
        i.max_uses
    );
    let causes: Vec<String> = replaystore::Cause::ALL
        .iter()
        .filter(|&&c| i.removals.of(c) > 0)
        .map(|&c| format!("{} {}", c.name(), i.removals.of(c)))
        .collect();
    say!(
        "removed    {} since create{}",
        i.removals.total(),
        if causes.is_empty() {
            String::new()
        } else {
            format!(" ({})", causes.join(", "))
        }
    );
    if i.moved > 0 {
        say!(
            "moved      {} kept items to the tail since create (so the ring ends none)",
            i.moved
        );
    }
}

fn print_priorities(p: &PriorityInfo) {
    say!(
        "priorities alpha {}  eps {}  {}-ary sum-tree, total {:.6e}",
        p.alpha,
        p.eps,
        p.arity,
        p.total
    );
    match p.min_max {
        Some((lo, hi)) => say!(
            "           priority+eps of live items: min {lo:.4e}  max {hi:.4e}{}",
            if p.zero > 0 {
                format!("  ({} at 0)", p.zero)
            } else {
                String::new()
            }
        ),
        None if p.zero > 0 => say!("           all {} live items have priority 0", p.zero),
        None => say!("           no live items"),
    }
    say!(
        "           new items get {:.4e}; {} updates applied, {} stale skipped",
        p.max_seen,
        p.updates,
        p.stale_updates
    );
    let most = p.histogram.iter().map(|b| b.2).max().unwrap_or(0).max(1);
    for &(lo, hi, n) in &p.histogram {
        let bar = "#".repeat(((n * BAR).div_ceil(most)) as usize);
        say!("  {lo:>10.3e} .. {hi:<10.3e} {n:>10} {bar}");
    }
}

/// `replaystore info`: a buffer, or a lane set lane by lane.
pub fn info(dir: &Path, as_json: bool, by: &[String]) -> Result<Status, Failure> {
    if let Some(lanes) = storage::read_lanes(&OsIo, dir)? {
        return lanes_info(dir, &lanes, as_json);
    }
    if let Some(group) = storage::read_group(&OsIo, dir)? {
        return group_info(dir, &group, as_json);
    }
    let info = inspect(dir)?;
    let groups = match by.is_empty() {
        true => None,
        false => {
            let names: Vec<&str> = by.iter().map(String::as_str).collect();
            Some(replaystore::Reader::open(dir)?.group_counts(&names)?)
        }
    };
    if as_json {
        let mut v = info_json(&info);
        if let (Some(g), Some(map)) = (&groups, v.as_object_mut()) {
            let rows: Vec<serde_json::Value> = g
                .iter()
                .map(|c| json!({"key": c.key, "live": c.live, "removed": c.removed}))
                .collect();
            map.insert("groups".into(), json!({"by": by, "groups": rows}));
        }
        say!("{v:#}");
        return Ok(Status::SUCCESS);
    }
    let c = &info.commit;
    say!("buffer     {}", info.dir.display());
    say!(
        "uuid       {}  (format version {})",
        info.uuid,
        info.format_version
    );
    print_schema(&info);
    let pct = 100.0 * info.len() as f64 / info.capacity as f64;
    say!(
        "fill       {} / {} items ({pct:.1}%)",
        info.len(),
        info.capacity
    );
    let live = &info.live;
    match live.end == c.tail && live.start == c.head {
        true => say!("indices    {}..{}", live.start, live.end),
        false => say!(
            "indices    {}..{} ({} added since the last commit at {}..{}: a writer runs, \
             or was killed)",
            live.start,
            live.end,
            live.end - c.tail,
            c.head,
            c.tail
        ),
    }
    let sampled = info.sampled();
    let mut notes = Vec::new();
    if live.end > 0 {
        notes.push(format!(
            "{:.2} per item added",
            sampled as f64 / live.end as f64
        ));
    }
    if info.reader_draws > 0 {
        notes.push(format!("{} by readers since the commit", info.reader_draws));
    }
    let notes = match notes.is_empty() {
        true => String::new(),
        false => format!(" ({})", notes.join(", ")),
    };
    say!(
        "counters   added {}  evicted {}  cleared {}  sampled {sampled}{notes}",
        live.end,
        live.start - c.cleared,
        c.cleared,
    );
    say!(
        "commit     generation {}, {}",
        c.generation,
        if c.is_clean() {
            "closed cleanly"
        } else {
            "writer open or not closed cleanly (open recovers)"
        }
    );
    say!(
        "files      MANIFEST + {} segments of {} slots x {} bytes{}{}",
        info.segment_count,
        info.segment_slots,
        info.row_stride,
        info.heap.map_or(String::new(), |h| format!(
            " + {} chunk segments of {} chunks x {} bytes",
            h.segment_count, h.segment_slots, h.stride
        )),
        match (info.priorities.is_some(), info.items.is_some()) {
            (true, true) => " + priorities.tree + items.state",
            (true, false) => " + priorities.tree",
            (false, true) => " + items.state",
            (false, false) => "",
        }
    );
    say!(
        "disk       {} on disk (at most {} when every segment is written), {} of live item data",
        human(info.bytes_on_disk),
        human(info.bytes_at_most),
        human(info.data_bytes)
    );
    if let Some(v) = &info.values {
        print_values(v);
    }
    if info.fragments {
        say!("units      fragments (each add / add_batch call is drawn whole)");
    }
    if let Some(i) = &info.items {
        print_items(i);
    }
    if let Some(g) = &groups {
        say!(
            "groups     by {} ({} groups, as the writer left them now)",
            by.join(", "),
            g.len()
        );
        for c in g {
            say!(
                "  {:<40} {:>10} live {:>10} removed",
                c.key.join(" / "),
                c.live,
                c.removed
            );
        }
    }
    if let Some(e) = &info.episodes {
        match (&e.problem, e.steps) {
            (Some(p), _) => say!("episodes   unreadable: {p}"),
            (None, Some((lo, mean, hi))) => say!(
                "episodes   {} ({} ended, {} open); steps min {lo} mean {mean:.1} max {hi}{}",
                e.count,
                e.ended,
                e.count - e.ended,
                e.mean_return
                    .map_or(String::new(), |r| format!("; mean return {r:.3}"))
            ),
            (None, None) => say!("episodes   none yet"),
        }
        if info.whole_episodes {
            say!("eviction   whole episodes (the oldest episode goes at once)");
        }
    }
    let snaps = snapshots(dir)?;
    say!(
        "snapshots  {}{}",
        snaps.len(),
        if snaps.is_empty() {
            String::new()
        } else {
            format!(
                " ({}); they alone hold {} on disk (`replaystore snapshots` for each)",
                snaps
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                human(snaps.iter().map(|s| s.bytes_owned).sum())
            )
        }
    );
    if let Some(p) = &info.priorities {
        print_priorities(p);
    }
    Ok(Status::SUCCESS)
}

/// A lane set: the schema once, then each lane's fill, counters and priorities.
fn lanes_info(dir: &Path, file: &LanesFile, as_json: bool) -> Result<Status, Failure> {
    let infos = (0..file.lanes)
        .map(|k| inspect(storage::lane_dir(dir, k)))
        .collect::<Result<Vec<Info>, _>>()?;
    let len: u64 = infos.iter().map(Info::len).sum();
    let capacity: u64 = infos.iter().map(|i| i.capacity).sum();
    let on_disk: u64 = infos.iter().map(|i| i.bytes_on_disk).sum();
    let at_most: u64 = infos.iter().map(|i| i.bytes_at_most).sum();
    let data: u64 = infos.iter().map(|i| i.data_bytes).sum();
    if as_json {
        let lanes: Vec<_> = infos
            .iter()
            .zip(0u32..)
            .map(|(i, k)| {
                let mut v = info_json(i);
                if let Some(o) = v.as_object_mut() {
                    o.insert("lane".into(), k.into());
                    o.insert("first_index".into(), first_index(k).into());
                }
                v
            })
            .collect();
        let fields = infos.first().map(schema_json).unwrap_or_default();
        say!(
            "{:#}",
            json!({
                "dir": dir,
                "uuid": hex(&file.uuid),
                "lanes": file.lanes,
                "lane_capacity": file.lane_capacity,
                "schema": fields,
                "capacity": capacity,
                "len": len,
                "bytes_on_disk": on_disk,
                "bytes_at_most": at_most,
                "data_bytes": data,
                "lane": lanes,
            })
        );
        return Ok(Status::SUCCESS);
    }
    say!("lane set   {}", dir.display());
    say!(
        "uuid       {}  ({} lanes of {} items; lane K's indices start at K << 56)",
        hex(&file.uuid),
        file.lanes,
        file.lane_capacity
    );
    if let Some(first) = infos.first() {
        print_schema(first);
    }
    say!(
        "fill       {len} / {capacity} items ({:.1}%)",
        100.0 * len as f64 / capacity.max(1) as f64
    );
    say!(
        "  {:>4}  {:>21}  {:>12}  {:>12}  {:<7}  priorities / episodes",
        "lane",
        "positions",
        "items",
        "added",
        "closed"
    );
    for (i, k) in infos.iter().zip(0u32..) {
        let base = first_index(k);
        let c = &i.commit;
        let extra = match (&i.priorities, &i.episodes) {
            (Some(p), _) => format!("total {:.4e}, max {:.4e}", p.total, p.max_seen),
            (None, Some(e)) => format!("{} episodes, {} ended", e.count, e.ended),
            (None, None) => String::new(),
        };
        say!(
            "  {k:>4}  {:>21}  {:>12}  {:>12}  {:<7}  {extra}",
            format!("{}..{}", c.head - base, c.tail - base),
            i.len(),
            c.tail - base,
            if c.is_clean() { "yes" } else { "no" },
        );
    }
    say!(
        "disk       {} on disk (at most {} when every segment is written), {} of live item data",
        human(on_disk),
        human(at_most),
        human(data)
    );
    Ok(Status::SUCCESS)
}

/// A buffer group: each member by name, with its own schema, fill and counters.
fn group_info(dir: &Path, doc: &GroupDoc, as_json: bool) -> Result<Status, Failure> {
    let mut members: Vec<_> = doc.members.iter().collect();
    members.sort_by_key(|m| m.lane);
    let infos = members
        .iter()
        .map(|m| inspect(storage::lane_dir(dir, m.lane)))
        .collect::<Result<Vec<Info>, _>>()?;
    if as_json {
        let list: Vec<_> = members
            .iter()
            .zip(&infos)
            .map(|(m, i)| {
                let mut v = info_json(i);
                if let Some(o) = v.as_object_mut() {
                    o.insert("member".into(), m.name.clone().into());
                    o.insert("lane".into(), m.lane.into());
                    o.insert("first_index".into(), first_index(m.lane).into());
                }
                v
            })
            .collect();
        say!(
            "{:#}",
            json!({
                "dir": dir,
                "uuid": hex(&doc.uuid),
                "template": doc.template.is_some(),
                "members": list,
                "snapshots_before_members": doc.empty_snapshots,
            })
        );
        return Ok(Status::SUCCESS);
    }
    say!("group      {}", dir.display());
    say!(
        "uuid       {}  ({} members; {}; member K's indices start at K << 56)",
        hex(&doc.uuid),
        members.len(),
        if doc.template.is_some() {
            "a new member's first add creates it with the group's template"
        } else {
            "members are created with a config of their own"
        }
    );
    for (m, i) in members.iter().zip(&infos) {
        let fields: Vec<String> = (i.schema.fields().iter())
            .map(|f| format!("{} {}{:?}", f.name(), f.dtype().name(), f.shape()))
            .chain(
                i.schema
                    .var_fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.kind().name())),
            )
            .collect();
        say!(
            "  {:<16} lane {:<3} {:>10} / {:<10} items  {}",
            m.name,
            m.lane,
            i.len(),
            i.capacity,
            fields.join(", ")
        );
    }
    Ok(Status::SUCCESS)
}

fn schema_json(info: &Info) -> serde_json::Value {
    let fixed = info
        .schema
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "dtype": f.dtype().name(), "shape": f.shape()}));
    // Variable-length fields: their kind, `null` for the varying dimension, and their
    // maximum length where the schema declares one.
    let var = info.schema.var_fields().iter().map(|f| {
        json!({
            "name": f.name(),
            "dtype": f.kind().name(),
            "shape": [serde_json::Value::Null],
            "max_len": f.max_len(),
        })
    });
    fixed.chain(var).collect()
}

fn print_schema(info: &Info) {
    say!("schema");
    for f in info.schema.fields() {
        say!("  {:<16} {:<5} {:?}", f.name(), f.dtype().name(), f.shape());
    }
    for f in info.schema.var_fields() {
        let max = f
            .max_len()
            .map_or(String::new(), |m| format!(" (at most {m})"));
        say!(
            "  {:<16} {:<5} variable length{max}",
            f.name(),
            f.kind().name()
        );
    }
}

/// `replaystore snapshots`: list, delete one, or keep the newest K.
pub fn run_snapshots(
    dir: &Path,
    delete: Option<&str>,
    keep_last: Option<usize>,
    as_json: bool,
) -> Result<Status, Failure> {
    // Listing needs no lock; deleting is the writer's job, so it opens as the writer.
    let mut deleted = Vec::new();
    let set = members_of(dir)?;
    if let Some(Members { kind, .. }) = &set
        && (delete.is_some() || keep_last.is_some())
    {
        // A group's or lane set's checkpoint is one snapshot in every member, deleted
        // from all of them by the set's writer.
        let names = match kind {
            SetKind::Group => {
                let mut g = replaystore::BufferGroup::open(dir)?;
                prune(
                    &mut g,
                    delete,
                    keep_last,
                    |g, n| g.delete_snapshot(n),
                    |g, k| g.keep_last(k),
                )?
            }
            SetKind::Lanes => {
                let mut l = replaystore::Lanes::open(dir)?;
                prune(
                    &mut l,
                    delete,
                    keep_last,
                    |l, n| l.delete_snapshot(n),
                    |l, k| l.keep_last(k),
                )?
            }
        };
        deleted.extend(names);
    } else if set.is_some() {
        // Listed below, member by member.
    } else if delete.is_some() || keep_last.is_some() {
        let mut buf = ReplayBuffer::open(dir)?;
        if let Some(name) = delete {
            buf.delete_snapshot(name)?;
            deleted.push(name.to_owned());
        }
        if let Some(k) = keep_last {
            deleted.extend(buf.keep_last(k)?);
        }
        buf.close()?;
    } else {
        // Fails as "not a buffer" rather than listing nothing.
        inspect(dir)?;
    }
    let list = set_snapshots(dir)?;
    if as_json {
        let items: Vec<_> = list
            .iter()
            .map(|(s, len)| {
                json!({
                    "name": s.name,
                    "generation": s.commit.map(|c| c.generation),
                    "head": s.commit.map(|c| c.head),
                    "tail": s.commit.map(|c| c.tail),
                    "len": len,
                    "bytes_shared": s.bytes_shared,
                    "bytes_owned": s.bytes_owned,
                    "created_unix": s.created
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_secs()),
                    "problem": s.problem,
                })
            })
            .collect();
        say!("{:#}", json!({"snapshots": items, "deleted": deleted}));
        return Ok(Status::SUCCESS);
    }
    for name in &deleted {
        say!("deleted {name}");
    }
    if list.is_empty() {
        say!("no snapshots in {}", dir.display());
        return Ok(Status::SUCCESS);
    }
    say!(
        "{:<24} {:>10} {:>12} {:>12} {:>12}  status",
        "name",
        "generation",
        "items",
        "shared",
        "owned"
    );
    for (s, len) in &list {
        say!(
            "{:<24} {:>10} {:>12} {:>12} {:>12}  {}",
            s.name,
            s.commit.map_or("-".into(), |c| c.generation.to_string()),
            len,
            human(s.bytes_shared),
            human(s.bytes_owned),
            s.problem.as_deref().unwrap_or("ok")
        );
    }
    Ok(Status::SUCCESS)
}

/// Deletes snapshot `delete` and all but the `keep_last` newest from a group or lane
/// set `set` (through its own calls); returns the names deleted.
fn prune<S>(
    set: &mut S,
    delete: Option<&str>,
    keep_last: Option<usize>,
    delete_one: impl Fn(&mut S, &str) -> replaystore::Result<()>,
    keep: impl Fn(&mut S, usize) -> replaystore::Result<Vec<String>>,
) -> Result<Vec<String>, Failure> {
    let mut names = Vec::new();
    if let Some(name) = delete {
        delete_one(set, name)?;
        names.push(name.to_owned());
    }
    if let Some(k) = keep_last {
        names.extend(keep(set, k)?);
    }
    Ok(names)
}

/// Whether a folder of several rings is a group or a lane set.
enum SetKind {
    Group,
    Lanes,
}

/// A group or a lane set: what it is, its member (lane) folders in lane order, and the
/// checkpoints a group took while it had no member.
struct Members {
    kind: SetKind,
    dirs: Vec<std::path::PathBuf>,
    empty: Vec<String>,
}

/// The members of the group or lane set in `dir`; `None` for a buffer.
fn members_of(dir: &Path) -> Result<Option<Members>, Failure> {
    if let Some(doc) = storage::read_group(&OsIo, dir)? {
        let mut lanes: Vec<u32> = doc.members.iter().map(|m| m.lane).collect();
        lanes.sort_unstable();
        let dirs = lanes
            .into_iter()
            .map(|k| storage::lane_dir(dir, k))
            .collect();
        let empty = doc.empty_snapshots;
        return Ok(Some(Members {
            kind: SetKind::Group,
            dirs,
            empty,
        }));
    }
    if let Some(l) = storage::read_lanes(&OsIo, dir)? {
        let dirs = (0..l.lanes).map(|k| storage::lane_dir(dir, k)).collect();
        return Ok(Some(Members {
            kind: SetKind::Lanes,
            dirs,
            empty: Vec::new(),
        }));
    }
    Ok(None)
}

/// The checkpoints of the group or lane set in `dir`: the snapshots every member holds,
/// in the first member's order, each with its bytes and (beside it) its items summed
/// over the members, and the first problem any member's copy has. Generations, heads
/// and tails are each member's own: the first member's are shown.
fn set_snapshots(dir: &Path) -> Result<Vec<(replaystore::SnapshotInfo, u64)>, Failure> {
    let Some(Members { dirs, empty, .. }) = members_of(dir)? else {
        return Ok(snapshots(dir)?
            .into_iter()
            .map(|s| {
                let n = s.len();
                (s, n)
            })
            .collect());
    };
    let Some((first, rest)) = dirs.split_first() else {
        return Ok(empty
            .into_iter()
            .map(|name| replaystore::SnapshotInfo {
                path: dir.to_path_buf(),
                name,
                commit: None,
                bytes_shared: 0,
                bytes_owned: 0,
                created: None,
                problem: None,
            })
            .map(|s| (s, 0))
            .collect());
    };
    let others: Vec<Vec<replaystore::SnapshotInfo>> =
        rest.iter().map(snapshots).collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for mut s in snapshots(first)? {
        let copies: Vec<&replaystore::SnapshotInfo> = others
            .iter()
            .filter_map(|l| l.iter().find(|o| o.name == s.name))
            .collect();
        if copies.len() != others.len() {
            continue; // not held by every member: not the set's checkpoint
        }
        let mut len = s.len();
        for c in &copies {
            s.bytes_shared += c.bytes_shared;
            s.bytes_owned += c.bytes_owned;
            len += c.len();
            s.problem = s.problem.take().or_else(|| c.problem.clone());
        }
        s.path = dir.to_path_buf();
        out.push((s, len));
    }
    Ok(out)
}
