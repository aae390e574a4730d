//! The `GROUP` file of a buffer group (issue 32): named member buffers in one folder,
//! each a one-ring buffer in `lane-K/` whose logical indices start at `K << 56`, as a
//! lane's do, created when first used with the configuration the file keeps for new
//! members.
//!
//! ```text
//! offset  size  what
//! 0       8     magic "RPLYGRUP"
//! 8       4     format version
//! 12      4     B: bytes of the archive
//! 16      B     an rkyv archive of `GroupDoc` (validated before any byte is trusted)
//! 16 + B  4     crc32 of bytes 0..16 + B
//! ```
//! The file is written whole under a temporary name and renamed over the old one, so
//! it is always one of the two. A member's folder exists before the file names it: a
//! folder no `GROUP` lists is a member whose creation a kill cut short.

use rkyv::rancor;

use super::{BASE_VERSION, Bytes, BytesMut, Problem, crc32};

/// Magic of the `GROUP` file.
pub const MAGIC: [u8; 8] = *b"RPLYGRUP";
/// File name in the group's folder.
pub const FILE_NAME: &str = "GROUP";
/// The longest member name, in bytes.
pub const MAX_NAME: usize = 128;

const VERSION_OFF: usize = 8;
const LEN_OFF: usize = 12;
const BODY_OFF: usize = 16;

/// Everything the file says.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct GroupDoc {
    /// Uuid of the group.
    pub uuid: [u8; 16],
    /// The configuration a member created without one of its own gets, if any.
    pub template: Option<TemplateDoc>,
    /// The members, in the order they were created.
    pub members: Vec<MemberDoc>,
    /// Checkpoints taken while the group had no member: its first member takes each
    /// as an empty snapshot (later members take every checkpoint the members hold).
    pub empty_snapshots: Vec<String>,
}

/// One member: its name and its lane (its folder is `lane-<lane>/`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct MemberDoc {
    /// The name members are addressed by (1 to [`MAX_NAME`] bytes of UTF-8).
    pub name: String,
    /// Its lane number: its folder and the top byte of its logical indices.
    pub lane: u32,
}

/// A buffer's configuration, as a new member gets it (`Config` in the handle layer).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct TemplateDoc {
    /// The schema archive (`schema_doc`).
    pub schema: Vec<u8>,
    /// The MANIFEST version the archive is read as (2 with variable-length fields).
    pub schema_version: u32,
    /// Items each member holds.
    pub capacity: u64,
    /// Target bytes per segment file.
    pub segment_bytes: u64,
    /// Slots per segment file; 0: chosen from `segment_bytes`.
    pub segment_slots: u64,
    /// Priorities `(alpha, eps, arity)`, if kept.
    pub priorities: Option<(f64, f64, u32)>,
    /// Rows are steps of episodes.
    pub episodic: bool,
    /// Eviction removes whole episodes.
    pub whole_episodes: bool,
    /// Rows remember the call that added them.
    pub fragments: bool,
    /// Bytes of the chunk ring of variable-length values; 0: the default for the schema.
    pub heap_bytes: u64,
    /// Payload bytes of a chunk row.
    pub chunk_bytes: u64,
    /// Item states, if kept.
    pub life: Option<LifeDoc>,
}

/// Item-state settings (`items.state`'s header fields).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct LifeDoc {
    /// Draws an item serves before it is removed (0: no bound).
    pub max_use: u64,
    /// Items the policy keeps live (0: no policy).
    pub max_size: u64,
    /// The policy's number (`lifecycle::Policy`), if any.
    pub policy: Option<u32>,
    /// `(min_size_to_sample, samples_per_insert, min_diff, max_diff)`, if rate limited.
    pub rate_limit: Option<(u64, f64, f64, f64)>,
}

impl GroupDoc {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let body = match rkyv::to_bytes::<rancor::Error>(self) {
            Ok(b) => b,
            // Serializing owned strings and vectors into a growable buffer cannot fail.
            Err(e) => unreachable!("rkyv serialization of a group failed: {e}"),
        };
        let mut out = vec![0u8; BODY_OFF + body.len() + 4];
        let mut w = BytesMut(&mut out);
        w.put(0, &MAGIC);
        w.u32(VERSION_OFF, BASE_VERSION);
        w.u32(LEN_OFF, body.len() as u32);
        w.put(BODY_OFF, &body);
        let crc = crc32(out.get(..BODY_OFF + body.len()).unwrap_or(&[]));
        BytesMut(&mut out).u32(BODY_OFF + body.len(), crc);
        out
    }

    /// Reads and checks the file's bytes: magic, version, length, checksum, the
    /// archive's validity, and that member names and lanes are each unique.
    pub fn decode(bytes: &[u8]) -> Result<GroupDoc, Problem> {
        super::need(bytes, BODY_OFF)?;
        super::magic(bytes, 0, &MAGIC)?;
        let version = Bytes(bytes).u32(VERSION_OFF).unwrap_or(0);
        if version != BASE_VERSION {
            return Err(Problem::Version(version));
        }
        let len = Bytes(bytes).u32(LEN_OFF).unwrap_or(0) as usize;
        let end = BODY_OFF.saturating_add(len);
        super::need(bytes, end.saturating_add(4))?;
        super::checksum(bytes, 0, end, end)?;
        let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(len);
        aligned.extend_from_slice(bytes.get(BODY_OFF..end).unwrap_or(&[]));
        let doc =
            rkyv::from_bytes::<GroupDoc, rancor::Error>(&aligned).map_err(|e| Problem::Field {
                offset: BODY_OFF as u64,
                name: "group archive",
                expected: "a valid archive of the group".into(),
                got: e.to_string(),
            })?;
        doc.check()?;
        Ok(doc)
    }

    /// Member names are 1..=MAX_NAME bytes and unique; lanes are unique and below 128.
    fn check(&self) -> Result<(), Problem> {
        let bad = |k: usize, expected: &str, got: String| Problem::Field {
            offset: BODY_OFF as u64,
            name: "member",
            expected: expected.into(),
            got: format!("member {k}: {got}"),
        };
        for (k, m) in self.members.iter().enumerate() {
            if m.name.is_empty() || m.name.len() > MAX_NAME {
                return Err(bad(k, "a name of 1 to 128 bytes", format!("{:?}", m.name)));
            }
            if m.lane >= super::lanes::MAX_LANES {
                return Err(bad(k, "a lane below 128", m.lane.to_string()));
            }
            let earlier = self.members.get(..k).unwrap_or(&[]);
            if earlier.iter().any(|e| e.name == m.name || e.lane == m.lane) {
                return Err(bad(k, "a name and lane of its own", format!("{m:?}")));
            }
        }
        Ok(())
    }

    /// The member named `name`.
    pub fn member(&self, name: &str) -> Option<&MemberDoc> {
        self.members.iter().find(|m| m.name == name)
    }

    /// The lane a new member gets: the lowest not taken.
    pub fn free_lane(&self) -> Option<u32> {
        (0..super::lanes::MAX_LANES).find(|l| self.members.iter().all(|m| m.lane != *l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> GroupDoc {
        GroupDoc {
            uuid: [7; 16],
            template: Some(TemplateDoc {
                schema: vec![1, 2, 3],
                schema_version: 1,
                capacity: 1000,
                segment_bytes: 1 << 20,
                segment_slots: 0,
                priorities: Some((0.6, 1e-6, 8)),
                episodic: true,
                whole_episodes: false,
                fragments: false,
                heap_bytes: 0,
                chunk_bytes: 1008,
                life: Some(LifeDoc {
                    max_use: 4,
                    max_size: 0,
                    policy: None,
                    rate_limit: Some((10, 2.0, -1.0, 1.0)),
                }),
            }),
            members: vec![
                MemberDoc {
                    name: "policy_0".into(),
                    lane: 0,
                },
                MemberDoc {
                    name: "policy_1".into(),
                    lane: 1,
                },
            ],
            empty_snapshots: vec!["start".into()],
        }
    }

    #[test]
    fn a_group_file_reads_back_as_written() {
        let d = doc();
        assert_eq!(GroupDoc::decode(&d.encode()), Ok(d));
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let bytes = doc().encode();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            if let Some(x) = b.get_mut(i / 8) {
                *x ^= 1 << (i % 8);
            }
            assert!(GroupDoc::decode(&b).is_err(), "bit {i} flipped passed");
        }
        for n in 0..bytes.len() {
            assert!(
                GroupDoc::decode(bytes.get(..n).unwrap_or(&[])).is_err(),
                "cut at {n}"
            );
        }
    }

    #[test]
    fn duplicate_names_or_lanes_are_refused() {
        let mut d = doc();
        if let Some(m) = d.members.get_mut(1) {
            m.name = "policy_0".into();
        }
        assert!(GroupDoc::decode(&d.encode()).is_err());
        let mut d = doc();
        if let Some(m) = d.members.get_mut(1) {
            m.lane = 0;
        }
        assert!(GroupDoc::decode(&d.encode()).is_err());
        assert_eq!(doc().free_lane(), Some(2));
    }
}
