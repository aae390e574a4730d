//! `verify`'s share for the priorities file: its header, every parent against its
//! children, every leaf, and (once settled) the leaves of slots holding no item.

use super::TreeCopy;
use crate::error::Finding;
use crate::parts::hooks::{Checking, Found};
use crate::storage::{self};

/// Findings past this many in the priorities file are summarized, not listed.
const TREE_FINDINGS: usize = 20;

/// Checks the priorities file: header, every parent against its children (sum and min,
/// within `sumtree::CHECK_TOLERANCE` relative), every leaf finite and >= 0, and after a
/// clean close that slots holding no live item have leaf 0.
/// Without `at.items`, the header only (magic, version, layout, checksum).
pub(crate) fn verify(at: &Checking<'_>, found: &mut Found<'_>) {
    let (io, dir, sb) = (at.io, at.dir, at.sb);
    let (commit, head, tail) = (at.commit, at.head, at.tail);
    let copy = match TreeCopy::read(io, dir, sb) {
        Ok(c) => c,
        Err(e) => {
            found
                .problems
                .push(Finding::of(&e, &storage::tree_path(dir)));
            return;
        }
    };
    if !at.items {
        return;
    }
    let mismatches = copy.tree.check(&copy.words, TREE_FINDINGS);
    let (leaves, parents): (Vec<_>, Vec<_>) =
        mismatches.into_iter().partition(|m| m.tree == "leaf");
    let finding = |m: &crate::algo::sumtree::Mismatch| Finding {
        file: copy.path.clone(),
        offset: (crate::format::tree::BODY_OFFSET + m.word * 8) as u64,
        what: format!(
            "{} node {} of level {}: stored {}, expected {}",
            m.tree, m.index, m.level, m.stored, m.expected
        ),
    };
    found.problems.extend(leaves.iter().map(finding));
    // The tree is settled when its last owner closed it (a writer that owns it, or a
    // PriorityOwner beside actors) and the rows were closed too. An owner named in the
    // header is running, or was killed: the next one recomputes the parents. An owner
    // word that fails its check names nobody: it is damage, and the tree is judged.
    let owner = match &copy.owner_damage {
        Some(p) => {
            found.problems.push(Finding {
                file: copy.path.clone(),
                offset: crate::format::tree::OWNER_PID_OFF as u64,
                what: p.to_string(),
            });
            0
        }
        None => copy.counters.owner_pid,
    };
    let caught_up = copy.counters.caught_up;
    let settled = commit.is_clean() && owner == 0;
    if settled && caught_up < tail {
        found.notes.push(format!(
            "{} items were added by actors after the priorities last caught up (at index \
             {caught_up}); the next owner or writer gives them the largest priority",
            tail - caught_up.max(head)
        ));
    }
    if settled {
        found.problems.extend(parents.iter().map(finding));
    }
    if settled && caught_up >= tail {
        let cap = sb.capacity;
        let live = tail - head;
        let mut dead_nonzero = 0u64;
        for slot in 0..cap {
            let offset = (slot + cap - head % cap) % cap;
            if offset >= live && copy.leaf(slot) != 0.0 {
                dead_nonzero += 1;
                if dead_nonzero <= TREE_FINDINGS as u64 {
                    found.problems.push(Finding {
                        file: copy.path.clone(),
                        offset: copy.leaf_offset(slot),
                        what: format!(
                            "slot {slot} holds no live item but its priority leaf is {}",
                            copy.leaf(slot)
                        ),
                    });
                }
            }
        }
    }
    if !settled && !parents.is_empty() {
        found.notes.push(format!(
            "{}{} priority-tree parents differ from their children: expected after an unclean \
             shutdown or next to a running writer or priority owner (process {owner}); the \
             next open recomputes them",
            parents.len(),
            if parents.len() >= TREE_FINDINGS {
                "+"
            } else {
                ""
            }
        ));
    }
}
