//! Topic options as the wire carries them (a TLV block of string keys and typed values, as
//! `iggy_common` 0.11 encodes them) and as a topic keeps them. Parsing is a table: one row per
//! key, saying which value kinds it accepts, its bounds, and whether an update may change it.

use crate::config::{
    Durability, TopicConfig, MAX_SEGMENT_SIZE, MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
    MIN_SEGMENT_SIZE,
};
use crate::error::NodeError;
use iggy_binary_protocol::primitives::options::WireOptions;
use serde::{Deserialize, Serialize};

/// Option value kinds (`iggy_common` 0.11 `HeaderKind`).
const KIND_STRING: u8 = 2;
const KIND_BOOL: u8 = 3;
const KIND_UINT8: u8 = 9;
const KIND_UINT32: u8 = 11;
const KIND_UINT64: u8 = 12;

pub const MAX_MESSAGES_REQUIRED_TO_SAVE: u32 = 16 * 1024 * 1024;
/// The most copies a topic's partitions may ask for (a cluster's most members). A factor
/// above 1 needs a cluster ([`single_copy`]); one of 0 or 1 there keeps a copy on every
/// member (`cairn_cluster::partition::placement`).
pub const MAX_REPLICATION_FACTOR: u8 = 7;

/// Refuses a replication factor above 1 for a topic of a node that is no cluster member.
pub fn single_copy(options: &TopicOptions) -> Result<(), NodeError> {
    match options.replication_factor {
        0 | 1 => Ok(()),
        factor => Err(NodeError::InvalidOptionValue {
            key: "replication_factor".into(),
            why: format!(
                "replication factor {factor} needs a cluster: a single node keeps one copy"
            ),
        }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Compression {
    #[default]
    None,
    Gzip,
}

impl Compression {
    /// Its name as an option value.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
        }
    }

    /// The wire code (`1` none, `2` gzip).
    pub fn code(self) -> u8 {
        match self {
            Compression::None => 1,
            Compression::Gzip => 2,
        }
    }
}

/// Every option a topic keeps (what `GetTopic` reports as effective values), and which of
/// them its creating or updating requests named (the rest came from defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicOptions {
    pub durability: Durability,
    pub consumer_offset_durability: Durability,
    /// Microseconds; 0 = never.
    pub message_expiry: u64,
    /// Bytes; 0 = unlimited.
    pub max_topic_size: u64,
    pub replication_factor: u8,
    pub compression: Compression,
    pub segment_size: u64,
    pub messages_required_to_save: u32,
    pub size_of_messages_required_to_save: u64,
    pub preallocate_segments: bool,
    /// Bit `i` set: [`KEYS`]`[i]` was named by a request (explicit, in Iggy's words), not
    /// filled from a default. Snapshots written before it existed read as all derived.
    #[serde(default)]
    pub explicit: u16,
}

const _: () = assert!(KEYS.len() <= u16::BITS as usize, "a bit per key");

/// A key the server fills from its configuration at a topic's creation is journaled under
/// this prefix: it sets the option like the bare key, but is reported as derived (Iggy's
/// `explicit == false`), not as the client's choice. Only creations take it; the server
/// refuses a client's key with it.
pub const DERIVED_PREFIX: &str = "derived.";

impl Default for TopicOptions {
    fn default() -> Self {
        let config = TopicConfig::default();
        TopicOptions {
            durability: config.durability,
            consumer_offset_durability: config.consumer_offset_durability,
            message_expiry: 0,
            max_topic_size: 0,
            replication_factor: 1,
            compression: Compression::None,
            segment_size: config.segment_size,
            messages_required_to_save: config.messages_required_to_save,
            size_of_messages_required_to_save: config.size_of_messages_required_to_save,
            preallocate_segments: config.preallocate_segments,
            explicit: 0,
        }
    }
}

impl TopicOptions {
    /// What its partitions' logs follow.
    pub fn config(&self) -> TopicConfig {
        TopicConfig {
            durability: self.durability,
            consumer_offset_durability: self.consumer_offset_durability,
            messages_required_to_save: self.messages_required_to_save,
            size_of_messages_required_to_save: self.size_of_messages_required_to_save,
            segment_size: self.segment_size,
            preallocate_segments: self.preallocate_segments,
        }
    }
}

/// When an option may be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutability {
    CreateOnly,
    Updatable,
}

/// The keys, what they take, and when. Unknown keys are refused.
pub const KEYS: &[(&str, Mutability)] = &[
    ("durability", Mutability::CreateOnly),
    ("consumer_offset_durability", Mutability::CreateOnly),
    ("message_expiry", Mutability::Updatable),
    ("max_topic_size", Mutability::Updatable),
    ("replication_factor", Mutability::CreateOnly),
    ("compression_algorithm", Mutability::Updatable),
    ("segment_size", Mutability::CreateOnly),
    ("messages_required_to_save", Mutability::CreateOnly),
    ("size_of_messages_required_to_save", Mutability::CreateOnly),
    ("preallocate_segments", Mutability::CreateOnly),
];

/// Applies a create's options to the defaults.
pub fn for_create(options: &WireOptions) -> Result<TopicOptions, NodeError> {
    apply(TopicOptions::default(), options, Mutability::CreateOnly)
}

/// Applies an update's options to `current`. Create-only options are refused (even with
/// their current value), so a client never believes it changed one.
pub fn for_update(current: TopicOptions, options: &WireOptions) -> Result<TopicOptions, NodeError> {
    apply(current, options, Mutability::Updatable)
}

/// One option as `GetTopic` reports it: its key, its value in the wire's typed form (the
/// kinds Iggy's SDK writes), and whether a request named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub key: &'static str,
    pub kind: u8,
    pub value: Vec<u8>,
    pub explicit: bool,
}

impl TopicOptions {
    /// Every option's effective value, in [`KEYS`] order. `message_expiry` and
    /// `max_topic_size` read `u64::MAX` for never and unlimited, as Iggy reports them.
    pub fn effective(&self) -> Vec<Effective> {
        let never = |v: u64| if v == 0 { u64::MAX } else { v };
        KEYS.iter()
            .enumerate()
            .map(|(index, (key, _))| {
                let (kind, value) = match *key {
                    "durability" => (KIND_STRING, self.durability.to_string().into_bytes()),
                    "consumer_offset_durability" => (
                        KIND_STRING,
                        self.consumer_offset_durability.to_string().into_bytes(),
                    ),
                    "message_expiry" => (
                        KIND_UINT64,
                        never(self.message_expiry).to_le_bytes().to_vec(),
                    ),
                    "max_topic_size" => (
                        KIND_UINT64,
                        never(self.max_topic_size).to_le_bytes().to_vec(),
                    ),
                    "replication_factor" => (KIND_UINT8, vec![self.replication_factor]),
                    "compression_algorithm" => {
                        (KIND_STRING, self.compression.name().as_bytes().to_vec())
                    }
                    "segment_size" => (KIND_UINT64, self.segment_size.to_le_bytes().to_vec()),
                    "messages_required_to_save" => (
                        KIND_UINT32,
                        self.messages_required_to_save.to_le_bytes().to_vec(),
                    ),
                    "size_of_messages_required_to_save" => (
                        KIND_UINT64,
                        self.size_of_messages_required_to_save
                            .to_le_bytes()
                            .to_vec(),
                    ),
                    "preallocate_segments" => {
                        (KIND_BOOL, vec![u8::from(self.preallocate_segments)])
                    }
                    other => unreachable!("{other} has no effective value"),
                };
                Effective {
                    key,
                    kind,
                    value,
                    explicit: self.explicit & (1 << index) != 0,
                }
            })
            .collect()
    }
}

fn apply(
    mut topic: TopicOptions,
    options: &WireOptions,
    allowed: Mutability,
) -> Result<TopicOptions, NodeError> {
    for entry in options.iter() {
        let key = std::str::from_utf8(entry.key)
            .ok()
            .filter(|_| entry.key_kind.0 == KIND_STRING)
            .ok_or_else(|| NodeError::UnsupportedOptionKey {
                key: String::from_utf8_lossy(entry.key).into_owned(),
                why: "option keys are strings".into(),
            })?;
        let (key, derived) = match key.strip_prefix(DERIVED_PREFIX) {
            Some(bare) if allowed == Mutability::CreateOnly => (bare, true),
            Some(_) => {
                return Err(NodeError::UnsupportedOptionKey {
                    key: key.into(),
                    why: "a derived option is filled at a topic's creation only".into(),
                })
            }
            None => (key, false),
        };
        let value = Value {
            key,
            kind: entry.value_kind.0,
            bytes: entry.value,
        };
        if key == "enforce_fsync" {
            return Err(NodeError::UnsupportedOptionKey {
                key: key.into(),
                why: "enforce_fsync was removed: use `durability` (and `consumer_offset_durability` for offsets) instead".into(),
            });
        }
        let Some(index) = KEYS.iter().position(|(k, _)| *k == key) else {
            return Err(NodeError::UnsupportedOptionKey {
                key: key.into(),
                why: format!(
                    "unknown topic option; known: {}",
                    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
                ),
            });
        };
        if allowed == Mutability::Updatable && KEYS[index].1 == Mutability::CreateOnly {
            return Err(value.invalid("create-only: it cannot be changed on an existing topic"));
        }
        set(&mut topic, &value)?;
        let bit = 1u16 << index;
        topic.explicit = if derived {
            topic.explicit & !bit
        } else {
            topic.explicit | bit
        };
    }
    let config = topic.config();
    config
        .validate()
        .map_err(|e| NodeError::InvalidOptionValue {
            key: "segment_size / thresholds".into(),
            why: e.to_string(),
        })?;
    Ok(topic)
}

fn set(topic: &mut TopicOptions, value: &Value<'_>) -> Result<(), NodeError> {
    match value.key {
        "durability" => topic.durability = value.durability()?,
        "consumer_offset_durability" => topic.consumer_offset_durability = value.durability()?,
        "message_expiry" => {
            let micros = value.duration_micros()?;
            topic.message_expiry = if micros == u64::MAX { 0 } else { micros };
        }
        "max_topic_size" => {
            let bytes = value.size_bytes()?;
            topic.max_topic_size = if bytes == u64::MAX { 0 } else { bytes };
        }
        "replication_factor" => {
            let factor = value.unsigned()?;
            if !(1..=u64::from(MAX_REPLICATION_FACTOR)).contains(&factor) {
                return Err(value.invalid(&format!(
                    "replication factor {factor} is not 1 to {MAX_REPLICATION_FACTOR}"
                )));
            }
            topic.replication_factor = factor as u8;
        }
        "compression_algorithm" => {
            topic.compression = match value.string()?.to_ascii_lowercase().as_str() {
                "none" => Compression::None,
                "gzip" => {
                    return Err(value.invalid("gzip compression is not supported yet: use \"none\""))
                }
                other => return Err(value.invalid(&format!("unknown algorithm {other:?}"))),
            }
        }
        "segment_size" => {
            let size = value.size_bytes()?;
            if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&size) || !size.is_multiple_of(512) {
                return Err(value.invalid(&format!(
                    "{size} is not a multiple of 512 between {MIN_SEGMENT_SIZE} and {MAX_SEGMENT_SIZE}"
                )));
            }
            topic.segment_size = size;
        }
        "messages_required_to_save" => {
            let count = value.unsigned()?;
            if !(1..=u64::from(MAX_MESSAGES_REQUIRED_TO_SAVE)).contains(&count) {
                return Err(value.invalid(&format!(
                    "{count} is not between 1 and {MAX_MESSAGES_REQUIRED_TO_SAVE}"
                )));
            }
            topic.messages_required_to_save = count as u32;
        }
        "size_of_messages_required_to_save" => {
            let size = value.size_bytes()?;
            if !(1..=MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE).contains(&size) {
                return Err(value.invalid(&format!(
                    "{size} is not between 1 and {MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE}"
                )));
            }
            topic.size_of_messages_required_to_save = size;
        }
        "preallocate_segments" => topic.preallocate_segments = value.boolean()?,
        other => unreachable!("{other} is in KEYS"),
    }
    Ok(())
}

/// One option value as the wire carries it.
struct Value<'a> {
    key: &'a str,
    kind: u8,
    bytes: &'a [u8],
}

impl Value<'_> {
    fn invalid(&self, why: &str) -> NodeError {
        NodeError::InvalidOptionValue {
            key: self.key.into(),
            why: why.into(),
        }
    }

    fn string(&self) -> Result<String, NodeError> {
        if self.kind != KIND_STRING {
            return Err(self.invalid("expected a string"));
        }
        std::str::from_utf8(self.bytes)
            .map(str::to_owned)
            .map_err(|_| self.invalid("not UTF-8"))
    }

    fn unsigned(&self) -> Result<u64, NodeError> {
        let fixed = |n: usize| -> Result<u64, NodeError> {
            if self.bytes.len() != n {
                return Err(self.invalid(&format!("expected {n} bytes")));
            }
            let mut le = [0u8; 8];
            le[..n].copy_from_slice(self.bytes);
            Ok(u64::from_le_bytes(le))
        };
        match self.kind {
            KIND_UINT8 => fixed(1),
            KIND_UINT32 => fixed(4),
            KIND_UINT64 => fixed(8),
            KIND_STRING => self
                .string()?
                .trim()
                .parse()
                .map_err(|_| self.invalid("expected an unsigned integer")),
            _ => Err(self.invalid("expected an unsigned integer")),
        }
    }

    fn boolean(&self) -> Result<bool, NodeError> {
        match (self.kind, self.bytes) {
            (KIND_BOOL, [0]) => Ok(false),
            (KIND_BOOL, [1]) => Ok(true),
            (KIND_STRING, _) => match self.string()?.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(self.invalid("expected true or false")),
            },
            _ => Err(self.invalid("expected a boolean")),
        }
    }

    fn durability(&self) -> Result<Durability, NodeError> {
        self.string()?
            .to_ascii_lowercase()
            .parse()
            .map_err(|e: crate::config::ConfigError| self.invalid(&e.to_string()))
    }

    /// Microseconds: a `u64`, or text like `"7 days"`, `"1h 30m"`, `"unlimited"`.
    fn duration_micros(&self) -> Result<u64, NodeError> {
        if self.kind != KIND_STRING {
            return self.unsigned();
        }
        let text = self.string()?;
        parse_quantity(&text, DURATION_UNITS)
            .ok_or_else(|| self.invalid(&format!("{text:?} is not a duration like \"7 days\"")))
    }

    /// Bytes: a `u64`, or text like `"1 GiB"`, `"512MB"`, `"unlimited"`.
    fn size_bytes(&self) -> Result<u64, NodeError> {
        if self.kind != KIND_STRING {
            return self.unsigned();
        }
        let text = self.string()?;
        parse_quantity(&text, SIZE_UNITS)
            .ok_or_else(|| self.invalid(&format!("{text:?} is not a size like \"1 GiB\"")))
    }
}

const DURATION_UNITS: &[(&str, u64)] = &[
    ("us", 1),
    ("ms", 1_000),
    ("s", 1_000_000),
    ("sec", 1_000_000),
    ("secs", 1_000_000),
    ("second", 1_000_000),
    ("seconds", 1_000_000),
    ("m", 60_000_000),
    ("min", 60_000_000),
    ("mins", 60_000_000),
    ("minute", 60_000_000),
    ("minutes", 60_000_000),
    ("h", 3_600_000_000),
    ("hour", 3_600_000_000),
    ("hours", 3_600_000_000),
    ("d", 86_400_000_000),
    ("day", 86_400_000_000),
    ("days", 86_400_000_000),
];

const SIZE_UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("kb", 1_000),
    ("kib", 1 << 10),
    ("mb", 1_000_000),
    ("mib", 1 << 20),
    ("gb", 1_000_000_000),
    ("gib", 1 << 30),
    ("tb", 1_000_000_000_000),
    ("tib", 1 << 40),
];

/// `"<n><unit> <n><unit> ..."` summed; `"unlimited"` / `"none"` / `"never"` = `u64::MAX`.
fn parse_quantity(text: &str, units: &[(&str, u64)]) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    if ["unlimited", "none", "never"].contains(&text.as_str()) {
        return Some(u64::MAX);
    }
    let mut total: u64 = 0;
    let mut rest = text.as_str();
    while !rest.trim_start().is_empty() {
        rest = rest.trim_start();
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = units.iter().find(|(u, _)| *u == unit)?.1;
        total = total.checked_add(number.checked_mul(scale)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use iggy_binary_protocol::primitives::user_headers::encode_user_headers;

    fn options(entries: &[(&str, u8, &[u8])]) -> WireOptions {
        let mut buf = BytesMut::new();
        let tlv: Vec<(u8, &[u8], u8, &[u8])> = entries
            .iter()
            .map(|(k, kind, v)| (KIND_STRING, k.as_bytes(), *kind, *v))
            .collect();
        encode_user_headers(&tlv, &mut buf);
        WireOptions::from_bytes(buf.freeze()).unwrap()
    }

    #[test]
    fn the_sdks_default_block_gives_the_defaults() {
        let o = options(&[
            ("consumer_offset_durability", KIND_STRING, b"replicated"),
            ("durability", KIND_STRING, b"replicated"),
        ]);
        let created = for_create(&o).unwrap();
        assert_eq!(created.config(), TopicOptions::default().config());
        let explicit: Vec<&str> = created
            .effective()
            .into_iter()
            .filter(|e| e.explicit)
            .map(|e| e.key)
            .collect();
        assert_eq!(explicit, ["durability", "consumer_offset_durability"]);
    }

    #[test]
    fn a_derived_key_sets_the_option_but_not_as_the_clients_choice() {
        let derived = format!("{DERIVED_PREFIX}messages_required_to_save");
        let o = options(&[
            (derived.as_str(), KIND_UINT32, &7u32.to_le_bytes()),
            ("durability", KIND_STRING, b"persisted"),
        ]);
        let created = for_create(&o).unwrap();
        assert_eq!(created.messages_required_to_save, 7);
        let effective = created.effective();
        assert_eq!(effective.len(), KEYS.len(), "every option is reported");
        let find = |key: &str| effective.iter().find(|e| e.key == key).unwrap().clone();
        assert!(!find("messages_required_to_save").explicit);
        assert_eq!(find("messages_required_to_save").value, 7u32.to_le_bytes());
        assert!(find("durability").explicit);
        assert_eq!(find("durability").value, b"persisted");
        assert!(!find("segment_size").explicit);
        // An update may not use the prefix; it marks what it sets as explicit.
        let update = options(&[(derived.as_str(), KIND_UINT32, &8u32.to_le_bytes())]);
        assert!(for_update(created, &update).is_err());
        let expiry = options(&[("message_expiry", KIND_UINT64, &5u64.to_le_bytes())]);
        let updated = for_update(created, &expiry).unwrap();
        assert!(updated
            .effective()
            .iter()
            .any(|e| e.key == "message_expiry" && e.explicit));
    }

    #[test]
    fn every_option_is_parsed() {
        let o = options(&[
            ("durability", KIND_STRING, b"Persisted"),
            ("consumer_offset_durability", KIND_STRING, b"persisted"),
            ("message_expiry", KIND_STRING, b"7 days"),
            ("max_topic_size", KIND_UINT64, &(5u64 << 30).to_le_bytes()),
            ("replication_factor", KIND_UINT8, &[1]),
            ("compression_algorithm", KIND_STRING, b"none"),
            ("segment_size", KIND_STRING, b"2 MiB"),
            (
                "messages_required_to_save",
                KIND_UINT32,
                &10u32.to_le_bytes(),
            ),
            ("size_of_messages_required_to_save", KIND_STRING, b"64KiB"),
            ("preallocate_segments", KIND_BOOL, &[1]),
        ]);
        let t = for_create(&o).unwrap();
        assert_eq!(t.durability, Durability::Persisted);
        assert_eq!(t.consumer_offset_durability, Durability::Persisted);
        assert_eq!(t.message_expiry, 7 * 86_400_000_000);
        assert_eq!(t.max_topic_size, 5 << 30);
        assert_eq!(t.segment_size, 2 << 20);
        assert_eq!(t.messages_required_to_save, 10);
        assert_eq!(t.size_of_messages_required_to_save, 64 << 10);
        assert!(t.preallocate_segments);
    }

    #[test]
    fn refusals_name_the_option_and_why() {
        let refuse = |o: WireOptions| for_create(&o).unwrap_err().to_string();
        assert!(refuse(options(&[("enforce_fsync", KIND_BOOL, &[1])])).contains("durability"));
        assert!(refuse(options(&[("colour", KIND_STRING, b"red")])).contains("unknown"));
        assert!(refuse(options(&[("replication_factor", KIND_UINT8, &[0])])).contains("1 to 7"));
        assert!(refuse(options(&[("replication_factor", KIND_UINT8, &[8])])).contains("1 to 7"));
        let three = for_create(&options(&[("replication_factor", KIND_UINT8, &[3])])).unwrap();
        assert_eq!(three.replication_factor, 3);
        assert!(single_copy(&three)
            .unwrap_err()
            .to_string()
            .contains("needs a cluster"));
        assert!(single_copy(&TopicOptions::default()).is_ok());
        assert!(
            refuse(options(&[("compression_algorithm", KIND_STRING, b"gzip")]))
                .contains("not supported yet")
        );
        assert!(refuse(options(&[(
            "segment_size",
            KIND_UINT64,
            &1000u64.to_le_bytes()
        )]))
        .contains("multiple of 512"));
        assert!(
            refuse(options(&[("durability", KIND_STRING, b"sometimes")])).contains("durability")
        );
        let update = for_update(
            TopicOptions::default(),
            &options(&[("durability", KIND_STRING, b"replicated")]),
        )
        .unwrap_err()
        .to_string();
        assert!(update.contains("create-only"), "{update}");
        let updated = for_update(
            TopicOptions::default(),
            &options(&[("message_expiry", KIND_UINT64, &5u64.to_le_bytes())]),
        )
        .unwrap();
        assert_eq!(updated.message_expiry, 5);
    }
}
