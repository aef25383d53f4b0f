//! A poll's JSON, encoded straight from the stored batches: each payload is base64-encoded
//! from the bytes the partition holds into the response body, with no copy of the batches
//! and no model of the messages in between. The shape is Iggy's
//! (`iggy_common::PolledMessages`), field for field (a test compares the two):
//!
//! ```json
//! {"partition_id": 0, "current_offset": 9, "count": 1,
//!  "messages": [{"header": {"checksum", "id", "offset", "timestamp", "origin_timestamp",
//!                "user_headers_length", "payload_length", "reserved"},
//!                "payload": "aGVsbG8=", "user_headers": []}]}
//! ```

use crate::command::Polled;
use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use cairn_engine::format::{BatchHeader, MessageIter};
use serde::ser::{SerializeSeq, SerializeStruct, Serializer};
use serde::Serialize;

/// A poll's answer as JSON.
pub struct PolledJson<'a>(pub &'a Polled);

impl Serialize for PolledJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let polled = self.0;
        let mut state = serializer.serialize_struct("PolledMessages", 4)?;
        state.serialize_field("partition_id", &polled.partition_id)?;
        state.serialize_field("current_offset", &polled.current_offset)?;
        state.serialize_field("count", &polled.count)?;
        state.serialize_field("messages", &Messages(&polled.batches))?;
        state.end()
    }
}

struct Messages<'a>(&'a [Bytes]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for batch in self.0 {
            // The partition verified every batch it serves: a header that does not decode
            // is the server's own bug.
            let header = BatchHeader::decode(batch).map_err(serde::ser::Error::custom)?;
            for message in MessageIter::new(batch, header.base_offset) {
                seq.serialize_element(&Message {
                    header: iggy_common::IggyMessageHeader {
                        checksum: message.header.checksum,
                        id: message.header.id,
                        offset: message.offset,
                        // The broker's append time is stamped once per batch; the
                        // per-message delta applies to the origin timestamp only.
                        timestamp: header.base_timestamp,
                        origin_timestamp: header.origin_timestamp
                            + u64::from(message.header.timestamp_delta),
                        user_headers_length: message.header.user_headers_length,
                        payload_length: message.header.payload_length,
                        reserved: 0,
                    },
                    payload: message.payload,
                    user_headers: message.user_headers,
                })?;
            }
        }
        seq.end()
    }
}

struct Message<'a> {
    header: iggy_common::IggyMessageHeader,
    payload: &'a [u8],
    user_headers: &'a [u8],
}

/// Bytes as base64 text, written into the output as they are encoded.
struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&Base64Display::new(self.0, &BASE64))
    }
}

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("IggyMessage", 3)?;
        state.serialize_field("header", &self.header)?;
        state.serialize_field("payload", &Base64(self.payload))?;
        // As Iggy shows them: entries when they decode as its headers, else raw base64.
        let entries = (!self.user_headers.is_empty())
            .then(|| {
                iggy_binary_protocol::WireUserHeaders::from_slice(self.user_headers)
                    .ok()
                    .and_then(|wire| {
                        iggy_common::wire_conversions::user_headers_from_wire(&wire).ok()
                    })
            })
            .flatten();
        match (self.user_headers.is_empty(), entries) {
            (true, _) => state.serialize_field("user_headers", &[(); 0])?,
            (false, Some(map)) => {
                let entries: Vec<iggy_common::HeaderEntry> = map
                    .into_iter()
                    .map(|(key, value)| iggy_common::HeaderEntry { key, value })
                    .collect();
                state.serialize_field("user_headers", &entries)?;
            }
            (false, None) => state.serialize_field("user_headers", &Base64(self.user_headers))?,
        }
        state.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use cairn_engine::format::{stamp_batch, BatchBuilder};
    use proptest::prelude::*;

    /// The poll reply's bytes on the binary protocol, as Iggy's SDK decodes them, as JSON
    /// (a string: ids are u128, which `serde_json::Value` cannot hold).
    fn iggy_model(polled: &Polled) -> String {
        let mut body = BytesMut::new();
        body.extend_from_slice(&polled.head());
        for batch in &polled.batches {
            body.extend_from_slice(batch);
        }
        let model = iggy_common::PolledMessages::from_bytes(body.freeze()).unwrap();
        serde_json::to_string(&model).unwrap()
    }

    fn headers() -> Vec<u8> {
        let mut map = iggy_common::UserHeaders::new();
        map.insert(
            iggy_common::HeaderKey::try_from("k").unwrap(),
            iggy_common::HeaderValue::try_from("v").unwrap(),
        );
        iggy_common::wire_conversions::user_headers_to_wire(&map)
            .as_bytes()
            .to_vec()
    }

    proptest! {
        #[test]
        fn the_json_is_iggys_for_any_batches(
            batches in prop::collection::vec(
                prop::collection::vec((any::<u128>(), prop::collection::vec(any::<u8>(), 0..40), 0u8..3), 1..4),
                0..3,
            ),
        ) {
            let mut offset = 10;
            let mut stored = Vec::new();
            let mut count = 0;
            for messages in &batches {
                let mut builder = BatchBuilder::new(1_000);
                for (i, (id, payload, headers_kind)) in messages.iter().enumerate() {
                    let user_headers = match headers_kind {
                        0 => Vec::new(),
                        1 => headers(),
                        _ => vec![0xff, 1, 2],
                    };
                    builder.push(*id, i as u32, payload, &user_headers);
                }
                let mut batch = builder.build();
                stamp_batch(&mut batch, 3, offset, 5_000);
                offset += messages.len() as u64;
                count += messages.len() as u32;
                stored.push(batch.freeze());
            }
            let polled = Polled { partition_id: 3, current_offset: offset - 1, count, batches: stored };
            let ours = serde_json::to_string(&PolledJson(&polled)).unwrap();
            prop_assert_eq!(ours, iggy_model(&polled));
        }
    }
}
