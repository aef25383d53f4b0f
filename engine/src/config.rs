//! Per-topic options that shape a partition log, with their bounds and defaults.

use crate::format::Limits;

/// What a completed write guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Durability {
    /// Acknowledged after the in-memory journal append; flushed by thresholds. Unflushed
    /// messages may be lost on a crash.
    #[default]
    Replicated,
    /// Acknowledged only after the batches are written and both segment files (and any new
    /// segment names) are synced.
    Persisted,
}

impl std::str::FromStr for Durability {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "replicated" => Ok(Durability::Replicated),
            "persisted" => Ok(Durability::Persisted),
            other => Err(ConfigError::UnknownDurability(other.to_string())),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::Replicated => "replicated",
            Durability::Persisted => "persisted",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("segment_size {0} must be a multiple of 512 between 1 MiB and 1 GiB")]
    SegmentSize(u64),
    #[error("messages_required_to_save must be at least 1")]
    MessagesRequiredToSave,
    #[error("size_of_messages_required_to_save must be between 1 byte and {max}", max = MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE)]
    SizeOfMessagesRequiredToSave,
    #[error("unknown durability policy {0:?}: expected \"replicated\" or \"persisted\"")]
    UnknownDurability(String),
}

pub const MIN_SEGMENT_SIZE: u64 = 1024 * 1024;
pub const MAX_SEGMENT_SIZE: u64 = 1024 * 1024 * 1024;
const _: () = assert!(0 < MIN_SEGMENT_SIZE && MIN_SEGMENT_SIZE <= MAX_SEGMENT_SIZE);
pub const MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE: u64 = 256 * 1024 * 1024;

/// The options of a topic that its partitions' logs follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicConfig {
    pub durability: Durability,
    pub consumer_offset_durability: Durability,
    pub messages_required_to_save: u32,
    pub size_of_messages_required_to_save: u64,
    /// Soft limit: the batch that crosses it lands whole, then the segment is sealed.
    pub segment_size: u64,
    pub preallocate_segments: bool,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            durability: Durability::Replicated,
            consumer_offset_durability: Durability::Replicated,
            messages_required_to_save: 1024,
            size_of_messages_required_to_save: 1024 * 1024,
            segment_size: MAX_SEGMENT_SIZE,
            preallocate_segments: false,
        }
    }
}

impl TopicConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&self.segment_size)
            || !self.segment_size.is_multiple_of(512)
        {
            return Err(ConfigError::SegmentSize(self.segment_size));
        }
        if self.messages_required_to_save == 0 {
            return Err(ConfigError::MessagesRequiredToSave);
        }
        if self.size_of_messages_required_to_save == 0
            || self.size_of_messages_required_to_save > MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE
        {
            return Err(ConfigError::SizeOfMessagesRequiredToSave);
        }
        Ok(())
    }
}

/// Server-wide settings of every partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSettings {
    /// Re-hash every batch a disk poll reads (default true).
    pub validate_checksum: bool,
    pub limits: Limits,
    /// Most bytes of unflushed batches a partition holds before refusing appends. Bounds
    /// memory when flushes fail (for example, while the disk is full).
    pub max_journal_bytes: u64,
    /// Most messages one poll returns.
    pub max_poll_messages: u32,
    /// Most batch bytes one poll returns (a single larger batch is still returned whole).
    pub max_poll_bytes: u64,
    /// The partition is a cluster replica's: its segments take only sends its group
    /// committed, which the group's log holds durable, so appends show at once and the
    /// segments are synced at the group's checkpoints ([`PartitionSettings::local`]).
    pub replica: bool,
    /// A `persisted` partition's superblock record is written by a job while its shard
    /// serves on, so the next group's write and log sync overlap it (the shard's
    /// `pipeline`), instead of in the same wait on the device as the log sync. Off by
    /// default: on a device whose sync returns in a fraction of a millisecond the job's
    /// hand-offs cost more than the overlap saves (README, "Persist pipeline").
    pub pipeline_records: bool,
}

impl PartitionSettings {
    /// What a partition's log follows on this node: the topic's configuration, except that
    /// a replica's appends are never held for a persist of its own (`replica`).
    pub fn local(&self, config: TopicConfig) -> TopicConfig {
        if !self.replica {
            return config;
        }
        TopicConfig {
            durability: Durability::Replicated,
            ..config
        }
    }
}

impl Default for PartitionSettings {
    fn default() -> Self {
        PartitionSettings {
            validate_checksum: true,
            limits: Limits::default(),
            max_journal_bytes: 512 * 1024 * 1024,
            max_poll_messages: 100_000,
            max_poll_bytes: 64 * 1024 * 1024,
            replica: false,
            pipeline_records: false,
        }
    }
}
