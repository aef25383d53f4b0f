//! A send's JSON body, decoded straight into a batch in the stored format: each message's
//! base64 payload is decoded once, at its final offset in the batch
//! ([`BatchBuilder::push_with`]), never into a buffer of its own first. The shape is Iggy's
//! (`iggy_common::SendMessages`):
//!
//! ```json
//! {"partitioning": {"kind": "partition_id", "value": "AAAAAA=="},
//!  "messages": [{"id": 0, "payload": "aGVsbG8=", "user_headers": [...]}]}
//! ```
//!
//! A message's `id` is a number, a decimal string or a UUID (0 or absent: the server draws
//! one, standing in for the producer that owns ids); `user_headers` is absent, null, a list
//! of `{key, value}` entries or raw base64. A field of neither shape is refused, naming it.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::BytesMut;
use cairn_engine::format::BatchBuilder;
use iggy_binary_protocol::WirePartitioning;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A send body, decoded.
#[derive(Debug)]
pub struct SendBody {
    pub partitioning: WirePartitioning,
    pub count: u32,
    pub batch: BytesMut,
}

/// What the decoding needs from the server: the batch's origin timestamp and a source of
/// message ids for messages that name none.
pub struct Stamp<'a> {
    pub origin_timestamp: u64,
    pub next_id: &'a mut dyn FnMut() -> u128,
}

/// Decodes a send body with its stamp.
pub struct Seed<'a>(pub Stamp<'a>);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = SendBody;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<SendBody, D::Error> {
        deserializer.deserialize_map(BodyVisitor { stamp: self.0 })
    }
}

struct BodyVisitor<'a> {
    stamp: Stamp<'a>,
}

impl<'de> Visitor<'de> for BodyVisitor<'_> {
    type Value = SendBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with `partitioning` and `messages`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SendBody, A::Error> {
        let mut partitioning = None;
        let mut batch = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "partitioning" => {
                    if partitioning.is_some() {
                        return Err(de::Error::duplicate_field("partitioning"));
                    }
                    let value: iggy_common::Partitioning = map.next_value()?;
                    let wire = iggy_common::wire_conversions::partitioning_to_wire(&value)
                        .map_err(de::Error::custom)?;
                    partitioning = Some(wire);
                }
                "messages" => {
                    if batch.is_some() {
                        return Err(de::Error::duplicate_field("messages"));
                    }
                    let builder = BatchBuilder::new(self.stamp.origin_timestamp);
                    batch = Some(map.next_value_seed(Messages {
                        builder,
                        next_id: &mut *self.stamp.next_id,
                    })?);
                }
                other => {
                    return Err(de::Error::unknown_field(
                        other,
                        &["partitioning", "messages"],
                    ))
                }
            }
        }
        let partitioning = partitioning.ok_or_else(|| de::Error::missing_field("partitioning"))?;
        let builder = batch.ok_or_else(|| de::Error::missing_field("messages"))?;
        let count = u32::try_from(builder.message_count())
            .map_err(|_| de::Error::custom("too many messages"))?;
        Ok(SendBody {
            partitioning,
            count,
            batch: builder.build(),
        })
    }
}

/// The `messages` list, appended to the batch one by one.
struct Messages<'a> {
    builder: BatchBuilder,
    next_id: &'a mut dyn FnMut() -> u128,
}

impl<'de> DeserializeSeed<'de> for Messages<'_> {
    type Value = BatchBuilder;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<BatchBuilder, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Messages<'_> {
    type Value = BatchBuilder;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<BatchBuilder, A::Error> {
        while let Some(message) = seq.next_element::<Message<'de>>()? {
            let id = match message.id {
                0 => (self.next_id)(),
                id => id,
            };
            let payload = message
                .payload
                .ok_or_else(|| de::Error::missing_field("payload"))?;
            let room = base64::decoded_len_estimate(payload.len());
            self.builder
                .push_with(id, 0, room, &message.user_headers, |out| {
                    BASE64.decode_slice(payload.as_bytes(), out)
                })
                .map_err(|_| de::Error::custom("payload: invalid base64"))?;
        }
        Ok(self.builder)
    }
}

/// One message as it arrives: its payload is still base64 (borrowed from the body when it
/// has no escapes), its user headers already encoded.
struct Message<'de> {
    id: u128,
    payload: Option<Cow<'de, str>>,
    user_headers: Vec<u8>,
}

impl<'de> de::Deserialize<'de> for Message<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

const MESSAGE_FIELDS: &[&str] = &["id", "payload", "user_headers"];

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message: {id, payload, user_headers}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message<'de>, A::Error> {
        let mut message = Message {
            id: 0,
            payload: None,
            user_headers: Vec::new(),
        };
        let mut seen = [false; 3];
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let Some(field) = MESSAGE_FIELDS.iter().position(|f| *f == key.as_ref()) else {
                return Err(de::Error::unknown_field(&key, MESSAGE_FIELDS));
            };
            if std::mem::replace(&mut seen[field], true) {
                return Err(de::Error::duplicate_field(MESSAGE_FIELDS[field]));
            }
            match field {
                0 => message.id = map.next_value::<MessageId>()?.0,
                1 => message.payload = Some(map.next_value::<Base64Text<'de>>()?.0),
                _ => message.user_headers = map.next_value::<UserHeaders>()?.0,
            }
        }
        Ok(message)
    }
}

/// A message id: a number, a decimal string, or a UUID's 32 hex digits (dashes allowed).
struct MessageId(u128);

impl<'de> de::Deserialize<'de> for MessageId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = MessageId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a message id: a positive integer, a decimal string or a UUID")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MessageId, E> {
                Ok(MessageId(u128::from(v)))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<MessageId, E> {
                Ok(MessageId(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MessageId, E> {
                if let Ok(id) = v.parse::<u128>() {
                    return Ok(MessageId(id));
                }
                let hex: String = v.chars().filter(|c| *c != '-').collect();
                if hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return u128::from_str_radix(&hex, 16)
                        .map(MessageId)
                        .map_err(E::custom);
                }
                Err(E::custom(format!(
                    "invalid message id {v:?}: a decimal number or a UUID"
                )))
            }
        }
        deserializer.deserialize_any(IdVisitor)
    }
}

/// A base64 string, borrowed from the body when it can be.
struct Base64Text<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Base64Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Base64Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a base64 string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Base64Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Base64Text(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A message's user headers, encoded as the stored format keeps them (Iggy's TLV).
struct UserHeaders(Vec<u8>);

impl<'de> de::Deserialize<'de> for UserHeaders {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeadersVisitor;
        impl<'de> Visitor<'de> for HeadersVisitor {
            type Value = UserHeaders;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("null, a list of {key, value} entries, or base64")
            }
            fn visit_unit<E: de::Error>(self) -> Result<UserHeaders, E> {
                Ok(UserHeaders(Vec::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<UserHeaders, E> {
                Ok(UserHeaders(Vec::new()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<UserHeaders, E> {
                BASE64
                    .decode(v)
                    .map(UserHeaders)
                    .map_err(|e| E::custom(format!("invalid base64 user headers: {e}")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UserHeaders, A::Error> {
                let mut headers = iggy_common::UserHeaders::new();
                while let Some(entry) = seq.next_element::<iggy_common::HeaderEntry>()? {
                    headers.insert(entry.key, entry.value);
                }
                let wire = iggy_common::wire_conversions::user_headers_to_wire(&headers);
                Ok(UserHeaders(wire.as_bytes().to_vec()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UserHeaders, A::Error> {
                // Drain it to say what was wrong rather than where.
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Err(de::Error::custom(
                    "user_headers is a list of {key, value} entries, not an object",
                ))
            }
        }
        deserializer.deserialize_any(HeadersVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::format::{verify_batch, Layout, Limits, MessageIter};

    fn decode_str(json: &str) -> Result<SendBody, serde_json::Error> {
        let mut next = 100u128;
        let mut next_id = || {
            next += 1;
            next
        };
        let stamp = Stamp {
            origin_timestamp: 7,
            next_id: &mut next_id,
        };
        let mut de = serde_json::Deserializer::from_str(json);
        Seed(stamp).deserialize(&mut de)
    }

    #[test]
    fn a_body_decodes_to_the_batch_the_builder_makes() {
        let body = decode_str(
            r#"{"partitioning":{"kind":"partition_id","value":"AQAAAA=="},
                "messages":[{"id":5,"payload":"aGVsbG8="},{"payload":"","id":"6"},
                            {"id":0,"payload":"eA=="}]}"#,
        )
        .unwrap();
        assert_eq!(body.partitioning, WirePartitioning::PartitionId(1));
        assert_eq!(body.count, 3);
        let mut expected = BatchBuilder::new(7);
        expected.push(5, 0, b"hello", &[]);
        expected.push(6, 0, b"", &[]);
        expected.push(101, 0, b"x", &[]);
        assert_eq!(body.batch, expected.build());
        verify_batch(&body.batch, &Limits::CEILING, Layout::Stored).unwrap();
        let ids: Vec<u128> = MessageIter::new(&body.batch, 0)
            .map(|m| m.header.id)
            .collect();
        assert_eq!(ids, [5, 6, 101]);
    }

    #[test]
    fn an_unescaped_payload_is_borrowed_from_the_body_not_copied() {
        let body = r#""aGVsbG8=""#;
        let mut de = serde_json::Deserializer::from_str(body);
        let text = <Base64Text as de::Deserialize>::deserialize(&mut de).unwrap();
        let Cow::Borrowed(borrowed) = text.0 else {
            panic!("copied");
        };
        assert!(std::ptr::eq(borrowed.as_ptr(), body[1..].as_ptr()));
        // With an escape it must be unescaped first: owned, and still right.
        let mut de = serde_json::Deserializer::from_str(r#""aGVs\u0062G8=""#);
        let text = <Base64Text as de::Deserialize>::deserialize(&mut de).unwrap();
        assert!(matches!(text.0, Cow::Owned(ref s) if s == "aGVsbG8="));
    }

    #[test]
    fn escaped_payloads_and_uuids_and_user_headers_decode() {
        let body = decode_str(
            r#"{"messages":[{"user_headers":[{"key":{"kind":"string","value":"a2V5"},
                "value":{"kind":"string","value":"dmFs"}}],
                "payload":"aGVs\u0062G8=","id":"af362865-042c-4000-0000-000000000000"}],
                "partitioning":{"kind":"balanced","value":""}}"#,
        )
        .unwrap();
        let message = MessageIter::new(&body.batch, 0).next().unwrap();
        assert_eq!(message.header.id, 0xaf362865042c40000000000000000000);
        assert_eq!(message.payload, b"hello");
        assert!(!message.user_headers.is_empty());
    }

    #[test]
    fn unknown_fields_bad_base64_and_missing_parts_are_refused_naming_them() {
        let unknown = decode_str(r#"{"partitioning":{"kind":"balanced","value":""},"messages":[],"durability":"persisted"}"#)
            .unwrap_err();
        assert!(unknown.to_string().contains("durability"), "{unknown}");
        let field = decode_str(r#"{"partitioning":{"kind":"balanced","value":""},"messages":[{"payload":"eA==","key":1}]}"#)
            .unwrap_err();
        assert!(field.to_string().contains("`key`"), "{field}");
        let base64 = decode_str(
            r#"{"partitioning":{"kind":"balanced","value":""},"messages":[{"payload":"!!"}]}"#,
        )
        .unwrap_err();
        assert!(base64.to_string().contains("base64"), "{base64}");
        let missing =
            decode_str(r#"{"partitioning":{"kind":"balanced","value":""},"messages":[{"id":1}]}"#)
                .unwrap_err();
        assert!(missing.to_string().contains("payload"), "{missing}");
        assert!(decode_str(r#"{"messages":[]}"#).is_err());
    }
}
