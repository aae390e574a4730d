//! What a [`super::ReplayBuffer`] handle was opened as, in its type: the writer (the
//! default), an actor adding beside a priority owner, or a frozen snapshot. A method a
//! role may not call does not exist on its handle, instead of failing at run time:
//! a snapshot has no `add`, an actor no `update_priorities`.

use crate::parts::hooks::Holder;

mod sealed {
    /// What the engine reads of a role when it opens files for it. Out of reach of
    /// callers, who can neither name nor implement it.
    #[expect(
        unnameable_types,
        reason = "sealed: callers may reach it through the public Role trait but not name or implement it"
    )]
    pub trait Sealed {
        /// How the handle holds the files.
        const HOLDER: super::Holder;
    }
    impl Sealed for super::Writer {
        const HOLDER: super::Holder = super::Holder::Writer;
    }
    impl Sealed for super::Actor {
        const HOLDER: super::Holder = super::Holder::Actor;
    }
    impl Sealed for super::Frozen {
        const HOLDER: super::Holder = super::Holder::Frozen;
    }
}

/// What a [`super::ReplayBuffer`] handle is: [`Writer`], [`Actor`] or [`Frozen`].
/// Sealed.
pub trait Role: sealed::Sealed + std::fmt::Debug + Send + Sync + 'static {}

/// A role that stores rows, commits and checkpoints: [`Writer`] and [`Actor`].
pub trait Writes: Role {}

/// A role whose handle holds the priority tree it draws from: [`Writer`] (the live
/// tree) and [`Frozen`] (a snapshot's copy). An [`Actor`] leaves the tree to the
/// [`crate::PriorityOwner`] process.
pub trait HoldsTree: Role {}

/// The one writer of a buffer, owning its priorities: what [`super::ReplayBuffer::create`]
/// and [`super::ReplayBuffer::open`] return, and `ReplayBuffer`'s default role.
#[derive(Debug)]
pub enum Writer {}

/// The one writer of a buffer whose priorities another process owns (Ape-X):
/// [`super::ReplayBuffer::open_actor`]. It adds, commits and checkpoints; it never
/// draws by priority or sets priorities (the [`crate::PriorityOwner`] does).
///
/// ```compile_fail
/// # use replaystore::{Config, DType, ReplayBuffer, Schema};
/// # let dir = tempfile::tempdir()?;
/// # let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
/// # ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).prioritized(1.0, 0.0))?.close()?;
/// let mut actor = ReplayBuffer::open_actor(dir.path().join("b"))?;
/// actor.update_priorities(&[0], &[1.0f32])?; // the priority owner's job
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub enum Actor {}

/// A snapshot, opened read-only with [`super::ReplayBuffer::open_snapshot`]: it draws
/// and reads (from the snapshot's RNG position and priorities) and never writes.
///
/// ```compile_fail
/// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
/// # let dir = tempfile::tempdir()?;
/// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
/// # let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8))?;
/// # buf.get_state_named("s")?;
/// let mut frozen = ReplayBuffer::open_snapshot(dir.path().join("b"), "s")?;
/// frozen.add(&[Column::scalar("x", &1u8)])?; // a snapshot never changes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub enum Frozen {}

impl Role for Writer {}
impl Role for Actor {}
impl Role for Frozen {}
impl Writes for Writer {}
impl Writes for Actor {}
impl HoldsTree for Writer {}
impl HoldsTree for Frozen {}
