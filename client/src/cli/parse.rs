//! Turning argument values into wire values: the partitioning of a send, the start of a
//! poll, a topic's options block (`docs/wire.md` §8) and a send's user headers (`docs/wire.md`
//! §1.6).

use super::args::{Compression, Durability, PartitionChoice, Start, TopicSettings};
use super::error::CliError;
use bytes::BytesMut;
use iggy_binary_protocol::{WireOptions, WirePartitioning, WirePollingStrategy};

pub(super) fn partitioning(choice: &PartitionChoice) -> Result<WirePartitioning, CliError> {
    match (&choice.partition_id, &choice.key) {
        (Some(id), _) => Ok(WirePartitioning::PartitionId(*id)),
        (None, Some(key)) => {
            WirePartitioning::messages_key(key.as_bytes().to_vec()).map_err(CliError::BadKey)
        }
        (None, None) => Ok(WirePartitioning::Balanced),
    }
}

pub(super) fn strategy(start: &Start) -> WirePollingStrategy {
    if let Some(offset) = start.offset {
        WirePollingStrategy::offset(offset)
    } else if let Some(timestamp) = start.timestamp {
        WirePollingStrategy::timestamp(timestamp)
    } else if start.first {
        WirePollingStrategy::first()
    } else if start.last {
        WirePollingStrategy::last()
    } else {
        WirePollingStrategy::next()
    }
}

/// TLV kinds (`docs/wire.md` §1.6).
const KIND_STRING: u8 = 2;
const KIND_UINT64: u8 = 12;

/// One option value: a number as Uint64, `never`/`unlimited` as u64::MAX, else a string the
/// server parses.
fn option_value(text: &str) -> (u8, Vec<u8>) {
    if let Ok(number) = text.parse::<u64>() {
        return (KIND_UINT64, number.to_le_bytes().to_vec());
    }
    if text.eq_ignore_ascii_case("never") || text.eq_ignore_ascii_case("unlimited") {
        return (KIND_UINT64, u64::MAX.to_le_bytes().to_vec());
    }
    (KIND_STRING, text.as_bytes().to_vec())
}

/// CreateTopic options: the durability keys always (as the 0.11.0 SDK sends them), the
/// rest when given.
pub fn create_topic_options(
    durability: Durability,
    offset_durability: Durability,
    segment_size: Option<String>,
    settings: &TopicSettings,
) -> Result<WireOptions, CliError> {
    let mut pairs = vec![
        (
            "durability",
            (KIND_STRING, durability.as_str().as_bytes().to_vec()),
        ),
        (
            "consumer_offset_durability",
            (KIND_STRING, offset_durability.as_str().as_bytes().to_vec()),
        ),
    ];
    if let Some(size) = &segment_size {
        pairs.push(("segment_size", option_value(size)));
    }
    topic_options(pairs, settings)
}

/// The options block of `pairs` plus `settings`, keys sorted bytewise.
pub(super) fn topic_options(
    mut pairs: Vec<(&'static str, (u8, Vec<u8>))>,
    settings: &TopicSettings,
) -> Result<WireOptions, CliError> {
    if let Some(expiry) = &settings.message_expiry {
        pairs.push(("message_expiry", option_value(expiry)));
    }
    if let Some(size) = &settings.max_size {
        pairs.push(("max_topic_size", option_value(size)));
    }
    if let Some(compression) = settings.compression {
        let name = match compression {
            Compression::None => "none",
            Compression::Gzip => "gzip",
        };
        pairs.push((
            "compression_algorithm",
            (KIND_STRING, name.as_bytes().to_vec()),
        ));
    }
    pairs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let entries: Vec<(u8, &[u8], u8, &[u8])> = pairs
        .iter()
        .map(|(key, (kind, value))| (KIND_STRING, key.as_bytes(), *kind, value.as_slice()))
        .collect();
    let mut buf = BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
    WireOptions::from_bytes(buf.freeze()).map_err(CliError::BadTopicOption)
}

/// `key=value,key2=value2` as encoded user headers (string keys and values).
pub fn parse_headers(text: &str) -> Result<Vec<u8>, CliError> {
    let mut pairs = Vec::new();
    for pair in text.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| CliError::HeaderNotKeyValue {
                pair: pair.to_string(),
            })?;
        if key.is_empty() || key.len() > 255 || value.is_empty() || value.len() > 255 {
            return Err(CliError::HeaderSize {
                pair: pair.to_string(),
            });
        }
        pairs.push((key, value));
    }
    let entries: Vec<(u8, &[u8], u8, &[u8])> = pairs
        .iter()
        .map(|(k, v)| (KIND_STRING, k.as_bytes(), KIND_STRING, v.as_bytes()))
        .collect();
    let mut buf = BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
    iggy_binary_protocol::validate_user_headers(&buf).map_err(CliError::BadHeaders)?;
    Ok(buf.to_vec())
}
