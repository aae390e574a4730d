//! Draws by a group key (issue 30): the live items grouped by the values of some
//! fields (`env_id`, or `env_id` and `pid`). Rows stratified as UnstableBaselines'
//! `stratified_env` / `stratified_env_role` strategies draw (up to `n / groups` from
//! each group, then the rest uniformly from what is left, every item at most once), or
//! whole groups as DI-engine's `sample(groupby=, unroll_len=)` draws them.
//!
//! The index from key to items is kept in memory by each handle, built from the rows
//! when first asked and extended from the tail on later draws: each item enters once.
//! Items the head passed are dropped from the front of their group's list; removed
//! ones are dropped when a draw meets them. Nothing of it is persisted: the rows hold
//! every key.

use std::collections::{BTreeMap, HashSet};

use rand::RngExt;
use rand::seq::index::sample;

use crate::error::{Error, Result};
use crate::schema::Schema;

/// Where a key field lives in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyField {
    /// A fixed field: its position in the schema.
    Fixed(usize),
    /// A variable-length field: its position among the variable-length fields.
    Var(usize),
}

/// How many items of the live range one group holds: what `replaystore info --by`
/// prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupCount {
    /// The key's value of each field, as text (numbers, text as it is, bytes in hex,
    /// arrays in brackets).
    pub key: Vec<String>,
    /// Items of the group not removed.
    pub live: u64,
    /// Items of the group removed (item states) but not yet passed by the ring.
    pub removed: u64,
}

/// Each field's value in `key` (length-prefixed bytes, as `GroupIndex` keeps them), as
/// text for the fields `fields` of `schema`.
pub(crate) fn render_key(schema: &Schema, fields: &[KeyField], key: &[u8]) -> Vec<String> {
    let mut at = 0usize;
    let mut out = Vec::new();
    for &f in fields {
        let len = key
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes) as usize;
        let bytes = key.get(at + 8..at + 8 + len).unwrap_or(&[]);
        at += 8 + len;
        let (dtype, text) = match f {
            KeyField::Fixed(p) => (schema.fields().get(p).map(|x| x.dtype()), false),
            KeyField::Var(v) => match schema.var_fields().get(v).map(|x| x.kind()) {
                Some(crate::schema::VarKind::Str) => (None, true),
                Some(crate::schema::VarKind::Ragged(d)) => (Some(d), false),
                _ => (None, false),
            },
        };
        out.push(match (dtype, text) {
            (_, true) => String::from_utf8_lossy(bytes).into_owned(),
            (Some(d), _) => {
                let items: Vec<String> = bytes
                    .chunks(d.size().max(1))
                    .map(|e| d.decode_f64(e).to_string())
                    .collect();
                match items.len() {
                    1 => items.concat(),
                    _ => format!("[{}]", items.join(", ")),
                }
            }
            (None, false) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        });
    }
    out
}

/// The live items by group key, as one handle last extended it.
#[derive(Debug, Default)]
pub(crate) struct GroupIndex {
    /// The fields of the key, by name, in order.
    names: Vec<String>,
    pub(crate) fields: Vec<KeyField>,
    /// Items below this index were read into the index (or were gone).
    upto: u64,
    /// Key (each field's value, length-prefixed) to the items carrying it, ascending.
    groups: BTreeMap<Vec<u8>, Vec<u64>>,
}

impl GroupIndex {
    /// An empty index of the key `names` (fields of `schema`).
    pub(crate) fn new(schema: &Schema, names: &[&str]) -> Result<GroupIndex> {
        let fields = names
            .iter()
            .map(|&name| {
                if let Some(p) = schema.position(name) {
                    return Ok(KeyField::Fixed(p));
                }
                let var = schema.var_fields().iter().position(|f| f.name() == name);
                var.map(KeyField::Var).ok_or_else(|| Error::UnknownField {
                    field: name.to_owned(),
                    known: schema.names(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if fields.is_empty() {
            return Err(Error::InvalidSample(
                "a stratified draw names at least one field".into(),
            ));
        }
        Ok(GroupIndex {
            names: names.iter().map(|&n| n.to_owned()).collect(),
            fields,
            upto: 0,
            groups: BTreeMap::new(),
        })
    }

    /// Whether it indexes the key `names`.
    pub(crate) fn is_of(&self, names: &[&str]) -> bool {
        self.names
            .iter()
            .map(String::as_str)
            .eq(names.iter().copied())
    }

    /// Adds the items of `head..tail` not indexed yet, each under the key `key_of`
    /// reads for it. An item whose key cannot be read (a writer elsewhere passed it
    /// mid-read) is left out: the head is past it by the time a draw would look.
    pub(crate) fn extend(&mut self, head: u64, tail: u64, key_of: impl Fn(u64) -> Option<Vec<u8>>) {
        for index in self.upto.max(head)..tail {
            if let Some(key) = key_of(index) {
                self.groups.entry(key).or_default().push(index);
            }
        }
        self.upto = tail;
    }

    /// Appends `other`'s items to this index's groups: the lanes' indices, lane after
    /// lane (a later lane's indices are above an earlier one's, so lists stay
    /// ascending).
    pub(crate) fn merge(&mut self, other: &GroupIndex) {
        for (key, items) in &other.groups {
            self.groups.entry(key.clone()).or_default().extend(items);
        }
    }

    /// Drops the items the head passed, and the groups left empty.
    pub(crate) fn forget_before(&mut self, head: u64) {
        self.groups.retain(|_, items| {
            let gone = items.partition_point(|&i| i < head);
            items.drain(..gone);
            !items.is_empty()
        });
    }
}

/// `n` distinct items of `index`'s groups, none `removed`: `min(n / groups, size)`
/// (at least 1) from each group, then the rest uniformly among the items not picked,
/// drawn over the live range `head..tail` when the index covers one range (`None` for
/// the lanes' merged index, whose items lie in several). With more groups than `n`,
/// `n` groups are chosen at random and one item from each.
pub(crate) fn pick_from_groups(
    index: &mut GroupIndex,
    n: usize,
    live: Option<(u64, u64)>,
    removed: &dyn Fn(u64) -> bool,
    rng: &mut rand_chacha::ChaCha8Rng,
    out: &mut Vec<u64>,
) -> Result<()> {
    out.clear();
    if n == 0 {
        return Err(Error::InvalidSample("n must be at least 1".into()));
    }
    // Removed items are dropped from their groups when a group is read in full; a
    // group's list is compacted only when more than half of what a draw met was dead.
    let compact = |items: &mut Vec<u64>| items.retain(|&i| !removed(i));
    let keys: Vec<Vec<u8>> = index.groups.keys().cloned().collect();
    if keys.is_empty() {
        return Err(Error::Empty);
    }
    let per_group = (n / keys.len()).max(1);
    // More groups than draws: n of them, at random, one item each.
    let chosen: Vec<usize> = match keys.len() > n {
        true => sample(rng, keys.len(), n).into_vec(),
        false => (0..keys.len()).collect(),
    };
    let mut taken = HashSet::new();
    for k in chosen {
        let Some(items) = keys.get(k).and_then(|key| index.groups.get_mut(key)) else {
            continue;
        };
        let mut got = Vec::new();
        let mut misses = 0;
        while got.len() < per_group.min(items.len()) && misses <= 2 * per_group + 16 {
            let i = items
                .get(rng.random_range(0..items.len()))
                .copied()
                .unwrap_or(0);
            if removed(i) || got.contains(&i) {
                misses += 1;
            } else {
                got.push(i);
            }
        }
        if got.len() < per_group.min(items.len()) {
            // Many dead entries, or a group no larger than its share: read it in full.
            compact(items);
            got.clear();
            let want = per_group.min(items.len());
            got.extend(
                sample(rng, items.len(), want)
                    .iter()
                    .filter_map(|p| items.get(p)),
            );
        }
        taken.extend(got.iter().copied());
        out.extend(got);
    }
    index.groups.retain(|_, items| !items.is_empty());
    let rest = n.saturating_sub(out.len());
    if rest == 0 {
        return Ok(());
    }
    // The rest uniformly from every live item not taken yet: drawn over the live range
    // while most of it is live and not taken (O(1) expected each); otherwise from the
    // groups' lists, compacted, as one pool.
    let mut misses = 0;
    while let Some((head, tail)) = live.filter(|(h, t)| t > h)
        && out.len() < n
        && misses <= 4 * rest + 64
    {
        let i = head + rng.random_range(0..tail - head);
        if removed(i) || !taken.insert(i) {
            misses += 1;
        } else {
            out.push(i);
        }
    }
    if out.len() == n {
        return Ok(());
    }
    let rest = n - out.len();
    let mut pool: Vec<u64> = Vec::new();
    for items in index.groups.values_mut() {
        compact(items);
        pool.extend(items.iter().filter(|i| !taken.contains(i)));
    }
    index.groups.retain(|_, items| !items.is_empty());
    if pool.len() < rest {
        return Err(Error::InvalidSample(format!(
            "{n} distinct items stratified by group, but only {} are live",
            out.len() + pool.len()
        )));
    }
    out.extend(
        sample(rng, pool.len(), rest)
            .iter()
            .filter_map(|p| pool.get(p)),
    );
    Ok(())
}

/// `n` groups of `index`, uniformly (distinct unless `replace`), each as its items not
/// `removed` in the order they were added, or with `unroll > 0` a window of that many
/// consecutive ones starting uniformly at random: into `out`, with one `offsets` entry
/// per group (its end). Only groups with at least `max(unroll, 1)` items are drawn.
/// Every group's list is compacted first: O(indexed items).
pub(crate) fn pick_groups(
    index: &mut GroupIndex,
    (n, replace, unroll): (usize, bool, u64),
    removed: &dyn Fn(u64) -> bool,
    rng: &mut rand_chacha::ChaCha8Rng,
    out: &mut Vec<u64>,
    offsets: &mut Vec<u64>,
) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidSample("n must be at least 1".into()));
    }
    for items in index.groups.values_mut() {
        items.retain(|&i| !removed(i));
    }
    index.groups.retain(|_, items| !items.is_empty());
    if index.groups.is_empty() {
        return Err(Error::Empty);
    }
    let need = usize::try_from(unroll.max(1)).unwrap_or(usize::MAX);
    let groups: Vec<&Vec<u64>> = index.groups.values().filter(|g| g.len() >= need).collect();
    if groups.is_empty() || (!replace && n > groups.len()) {
        return Err(Error::InvalidSample(format!(
            "{n} groups{} of at least {need} live items, but {} of the {} groups have \
             that many",
            if replace { "" } else { " without replacement" },
            groups.len(),
            index.groups.len()
        )));
    }
    let picks: Vec<usize> = match replace {
        true => (0..n).map(|_| rng.random_range(0..groups.len())).collect(),
        false => sample(rng, groups.len(), n).into_vec(),
    };
    for k in picks {
        let items = groups.get(k).map_or(&[][..], |g| g.as_slice());
        let rows = match unroll {
            0 => items,
            _ => {
                let start = rng.random_range(0..=items.len() - need);
                items.get(start..start + need).unwrap_or(&[])
            }
        };
        out.extend_from_slice(rows);
        offsets.push(out.len() as u64);
    }
    Ok(())
}
