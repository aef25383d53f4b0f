//! The metadata plane, in `{root}/metadata/`: the journal of metadata operations
//! ([`journal`]), the checkpoint snapshot ([`snapshot`]) and the superblock pair that ties
//! them together ([`record`]).
//!
//! Write path ([`plane`]): an operation is journaled and synced before it is applied or
//! answered; the directory work it implies follows, then a superblock record names the new
//! durable journal end and the applied op. Every so often a checkpoint writes the whole
//! state as a snapshot and empties the journal.
//!
//! Boot ([`plan()`], then [`MetadataPlane::open`]): the newest valid superblock record; the
//! snapshot it names (missing, another one, or damaged → refuse); the journal walked from byte
//! zero (a damaged entry below the durable end, or followed by a whole later entry → refuse;
//! a broken hash chain → refuse; a torn tail above the durable end → truncate); the entries
//! after the snapshot replayed onto its state. Refusals change no byte.
//!
//! Errors ([`error`]): the plane's I/O failures are a [`MetadataError`] (no space, or any
//! other failure naming the operation and the file); damage found at boot is a
//! [`MetaRefusal`]. The plan is a survey
//! ([`plan::survey`]) and a table of cases ([`plan::decide`]).

pub mod adoption;
pub mod error;
pub mod hooks;
pub mod journal;
pub mod plan;
pub mod plane;
pub mod record;
pub mod snapshot;

pub use error::MetadataError;
pub use hooks::{MetadataHooks, PlanHook};
pub use plan::{plan, MetaAction, MetaPlan, MetaRefusal, Replayed};
pub use plane::{Checkpointed, MetaSettings, MetadataPlane, Written};

/// The metadata plane's directory under the data root.
pub const DIR: &str = "metadata";
/// The journal's file name in [`DIR`].
pub const JOURNAL: &str = "journal.wal";
