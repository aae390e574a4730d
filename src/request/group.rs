//! What a draw from a buffer group asks for: which members, and how each is drawn. A
//! group draw is one of four shapes, each a constructor: a [`Request`] from one member
//! or from every member on its own, joint steps in lockstep, or a member's new items
//! mixed with replayed ones. Every group draw goes through `BufferGroup::sample` /
//! `sample_into` with one of these.

use super::Request;

/// A draw from a buffer group (see `BufferGroup::sample`). A `(name, request)` pair is
/// a draw from member `name`.
///
/// ```
/// use replaystore::{GroupRequest, Request};
/// let one = GroupRequest::from(("policy_0", Request::rows(32).prioritized(0.4)));
/// assert_eq!(one.member(), Some("policy_0"));
/// assert_eq!(GroupRequest::each(64).member(), None);
/// let mixed = GroupRequest::mixed("policy_0", 16, 16).prioritized(0.4);
/// assert_eq!(GroupRequest::from(mixed).member(), Some("policy_0"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupRequest<'a>(pub(crate) GroupDraw<'a>);

/// The shapes of a group draw, read by the group's draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum GroupDraw<'a> {
    /// `request` from member `name`.
    Member(&'a str, Request<'a>),
    /// `request` from every member, each on its own.
    Each(Request<'a>),
    /// `n` joint steps: the same positions back from every member's newest row.
    Lockstep(usize),
    /// Up to `new` of member `name`'s items not yet returned by a mixed draw of this
    /// handle, oldest first, then `replayed` drawn from the member (by priority with
    /// `beta`).
    Mixed {
        name: &'a str,
        new: usize,
        replayed: usize,
        beta: Option<f64>,
    },
}

impl<'a> GroupRequest<'a> {
    /// `request` from every member, each on its own (RLlib's `sample(n)` of a
    /// multi-agent buffer in independent mode: `n` from each policy); one batch per
    /// member, in member order.
    pub fn each(request: impl Into<Request<'a>>) -> GroupRequest<'a> {
        GroupRequest(GroupDraw::Each(request.into()))
    }

    /// `n` joint steps in lockstep (RLlib's `replay_mode="lockstep"`): the same
    /// positions in every member, counted back from each one's newest row, uniformly
    /// over the positions every member holds now. For members added to in step (one
    /// row each per joint step, from the joint step each was created at), row `i` of
    /// every member's batch is one joint step.
    pub fn lockstep(n: usize) -> GroupRequest<'a> {
        GroupRequest(GroupDraw::Lockstep(n))
    }

    /// Member `name`'s new items mixed with replayed ones (the shape of RLlib's
    /// `MultiAgentMixInReplayBuffer`, with the counts decided by the caller): up to
    /// `new` of the items the member got since this handle's last mixed draw, oldest
    /// first, each returned once (fewer when fewer came: `BufferGroup::new_items` says
    /// how many), then `replayed` items drawn uniformly from all the member holds. A
    /// member that holds nothing returns nothing. What counts as new starts at each
    /// member's tail when the handle opens it, and is the handle's alone.
    pub fn mixed(name: &'a str, new: usize, replayed: usize) -> Mixed<'a> {
        Mixed {
            name,
            new,
            replayed,
        }
    }

    /// The member drawn from, when the draw is from one member.
    pub fn member(&self) -> Option<&'a str> {
        match self.0 {
            GroupDraw::Member(name, _) | GroupDraw::Mixed { name, .. } => Some(name),
            GroupDraw::Each(_) | GroupDraw::Lockstep(_) => None,
        }
    }
}

/// A mixed group draw ([`GroupRequest::mixed`]), replayed uniformly unless
/// [`Mixed::prioritized`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "a request does nothing until a handle draws it"]
pub struct Mixed<'a> {
    name: &'a str,
    new: usize,
    replayed: usize,
}

impl<'a> Mixed<'a> {
    /// Replays by the member's priorities with exponent `beta` (a prioritized
    /// member's, else `InvalidSample`), and returns `weights`: the replayed items'
    /// importance weights, and 1 for each new item (returned once each, not drawn).
    pub fn prioritized(self, beta: f64) -> GroupRequest<'a> {
        self.with(Some(beta))
    }

    fn with(self, beta: Option<f64>) -> GroupRequest<'a> {
        let Mixed {
            name,
            new,
            replayed,
        } = self;
        GroupRequest(GroupDraw::Mixed {
            name,
            new,
            replayed,
            beta,
        })
    }
}

impl<'a> From<Mixed<'a>> for GroupRequest<'a> {
    fn from(m: Mixed<'a>) -> GroupRequest<'a> {
        m.with(None)
    }
}

/// `request` from member `name`: `group.sample(("policy_0", Request::rows(32)))`.
impl<'a, R: Into<Request<'a>>> From<(&'a str, R)> for GroupRequest<'a> {
    fn from((name, request): (&'a str, R)) -> GroupRequest<'a> {
        GroupRequest(GroupDraw::Member(name, request.into()))
    }
}
