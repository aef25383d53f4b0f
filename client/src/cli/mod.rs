//! The client half of the `cairn` command line: arguments ([`ConnectArgs`],
//! [`ClientCommand`]), one connection per command, a table or JSON on stdout, errors that
//! name what went wrong on stderr and a non-zero exit.
//!
//! - `args`: the clap argument types.
//! - `run`: [`run`], connecting and executing a command per resource.
//! - `parse`: argument values into wire values (options, headers, partitioning).
//! - [`render`]: replies as tables or JSON.
//! - `error`: [`CliError`] and [`describe`], what went wrong in the user's words.

mod args;
mod error;
mod parse;
pub mod render;
mod run;

pub use args::{
    ClientCommand, ClientsCommand, Compression, ConnectArgs, ConsumerChoice, Durability,
    GroupCommand, Ident, MessageCommand, OffsetCommand, PartitionChoice, PartitionCommand,
    PermissionFlags, SegmentCommand, Start, StreamCommand, TopicCommand, TopicSettings,
    UserCommand,
};
pub use error::{describe, CliError, Subject};
pub use parse::{create_topic_options, parse_headers};
pub use run::run;

#[cfg(test)]
mod tests;
