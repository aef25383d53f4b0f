//! Request pieces both worlds build the way a client does.

use bytes::BytesMut;
use iggy_binary_protocol::WireOptions;

/// Iggy's value kinds of an option entry (its user-header kinds).
pub const KIND_STRING: u8 = 2;
pub const KIND_UINT8: u8 = 9;
pub const KIND_UINT64: u8 = 12;

/// Topic or stream options: each entry (name, value kind, value bytes) as Iggy's TLV, its
/// name a string.
pub fn options(entries: &[(&str, u8, Vec<u8>)]) -> WireOptions {
    let tlv: Vec<(u8, &[u8], u8, &[u8])> = entries
        .iter()
        .map(|(k, kind, v)| (KIND_STRING, k.as_bytes(), *kind, v.as_slice()))
        .collect();
    let mut buf = BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&tlv, &mut buf);
    WireOptions::from_bytes(buf.freeze()).expect("valid options")
}
