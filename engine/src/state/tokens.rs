//! Personal access tokens (Iggy's PATs): what the state keeps of them and the two journaled
//! operations that change them.
//!
//! A token is minted by the node, never by the state machine: 50 bytes of the environment's
//! entropy, base64 (standard alphabet, padded: 68 characters), as Iggy makes them. The raw
//! token goes back to its creator once; the state, the journal and the snapshot hold only
//! its BLAKE3 hash (Iggy's hash function too), so nothing on disk logs anyone in.
//!
//! A user's tokens live in its [`super::User`]: deleting the user deletes them, and a user
//! created later under the same id starts with none. Both operations also name the
//! incarnation of the user they are for (the op that created it): one for a user that is
//! gone, even if its id was reused since, is refused.
//!
//! The journaled bodies are cairn's own (Iggy's request carries neither the user nor the
//! hash), each starting with a format byte, [`FORMAT`]:
//!
//! ```text
//! CreatePersonalAccessToken (146): [format:u8][user:u32][incarnation:u64][name:WireName][expiry:u64][hash:32]
//! DeletePersonalAccessToken (147): [format:u8][user:u32][incarnation:u64][name:WireName]
//! ```
//!
//! `expiry` keeps Iggy's `PersonalAccessTokenExpiry` wire encoding (µs from the op's
//! timestamp; 0, the server default, and `u64::MAX` never expire): applying the op turns it
//! into an absolute wall-clock time from the journaled timestamp, so a replay makes the same.

use base64::Engine as _;
use bytes::{BufMut, BytesMut};
use iggy_binary_protocol::codec::{read_bytes, read_u32_le, read_u64_le, read_u8};
use iggy_binary_protocol::{WireDecode, WireEncode, WireError, WireName};
use serde::{Deserialize, Serialize};

/// Most tokens one user may hold (Iggy's default `max_tokens_per_user`).
pub const MAX_TOKENS_PER_USER: usize = 100;
/// A token name's length in bytes (Iggy's bounds).
pub const MIN_TOKEN_NAME_LEN: usize = 3;
pub const MAX_TOKEN_NAME_LEN: usize = 30;
const _: () = assert!(0 < MIN_TOKEN_NAME_LEN && MIN_TOKEN_NAME_LEN <= MAX_TOKEN_NAME_LEN);
/// The format byte both journaled token bodies start with.
pub const FORMAT: u8 = 1;
/// Random bytes in a raw token (Iggy's size).
pub const RAW_TOKEN_BYTES: usize = 50;

/// The BLAKE3 hash of a raw token: what the state keeps and looks tokens up by.
pub type TokenHash = [u8; 32];

/// The hash a raw token is kept under.
pub fn hash_token(raw: &str) -> TokenHash {
    *blake3::hash(raw.as_bytes()).as_bytes()
}

/// A new raw token from `random` (at least [`RAW_TOKEN_BYTES`] bytes are used), and its
/// hash.
pub fn mint(random: impl FnMut() -> u64) -> (String, TokenHash) {
    let mut next = random;
    let mut bytes = Vec::with_capacity(RAW_TOKEN_BYTES + 8);
    while bytes.len() < RAW_TOKEN_BYTES {
        bytes.extend_from_slice(&next().to_le_bytes());
    }
    bytes.truncate(RAW_TOKEN_BYTES);
    let raw = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let hash = hash_token(&raw);
    (raw, hash)
}

/// One token as the state keeps it (under its name, in its user).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub hash: TokenHash,
    /// Wall-clock µs from which it no longer logs in; `None`: never.
    pub expiry_at: Option<u64>,
    pub created_at: u64,
}

impl Token {
    /// Whether it expired at wall-clock `now` (µs): at its expiry it already has, as in Iggy.
    pub fn is_expired(&self, now: u64) -> bool {
        self.expiry_at.is_some_and(|at| at <= now)
    }
}

/// When a new token expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenExpiry {
    Never,
    /// This many µs after the op that creates it (at least 1).
    After(u64),
}

impl TokenExpiry {
    /// Iggy's wire encoding: 0 (the server default) and `u64::MAX` never expire.
    pub fn from_wire(value: u64) -> TokenExpiry {
        match value {
            0 | u64::MAX => TokenExpiry::Never,
            micros => TokenExpiry::After(micros),
        }
    }

    /// The wire encoding; `After(0)` has none (it would read as "never") and is refused
    /// before it is journaled.
    pub fn to_wire(self) -> u64 {
        match self {
            TokenExpiry::Never => u64::MAX,
            TokenExpiry::After(micros) => micros,
        }
    }
}

/// `CreatePersonalAccessToken` as journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTokenOp {
    pub user_id: u32,
    /// The op that created the user the token is for.
    pub incarnation: u64,
    pub name: WireName,
    /// Iggy's wire encoding (see [`TokenExpiry::from_wire`]).
    pub expiry: u64,
    pub hash: TokenHash,
}

/// `DeletePersonalAccessToken` as journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTokenOp {
    pub user_id: u32,
    pub incarnation: u64,
    pub name: WireName,
}

fn format_byte(buf: &[u8]) -> Result<(), WireError> {
    match read_u8(buf, 0)? {
        FORMAT => Ok(()),
        other => Err(WireError::Validation(
            format!("token op format {other}, expected {FORMAT}").into(),
        )),
    }
}

/// The user, its incarnation and the name after the format byte; the offset after them.
fn decode_target(buf: &[u8]) -> Result<(u32, u64, WireName, usize), WireError> {
    format_byte(buf)?;
    let user_id = read_u32_le(buf, 1)?;
    let incarnation = read_u64_le(buf, 5)?;
    let (name, used) = WireName::decode(buf.get(13..).unwrap_or_default())?;
    Ok((user_id, incarnation, name, 13 + used))
}

impl WireEncode for CreateTokenOp {
    fn encode(&self, buf: &mut BytesMut) {
        buf.put_u8(FORMAT);
        buf.put_u32_le(self.user_id);
        buf.put_u64_le(self.incarnation);
        self.name.encode(buf);
        buf.put_u64_le(self.expiry);
        buf.put_slice(&self.hash);
    }

    fn encoded_size(&self) -> usize {
        13 + self.name.encoded_size() + 8 + 32
    }
}

impl WireDecode for CreateTokenOp {
    fn decode(buf: &[u8]) -> Result<(Self, usize), WireError> {
        let (user_id, incarnation, name, pos) = decode_target(buf)?;
        let expiry = read_u64_le(buf, pos)?;
        let hash = read_bytes(buf, pos + 8, 32)?
            .try_into()
            .expect("32 bytes were read");
        Ok((
            CreateTokenOp {
                user_id,
                incarnation,
                name,
                expiry,
                hash,
            },
            pos + 8 + 32,
        ))
    }
}

impl WireEncode for DeleteTokenOp {
    fn encode(&self, buf: &mut BytesMut) {
        buf.put_u8(FORMAT);
        buf.put_u32_le(self.user_id);
        buf.put_u64_le(self.incarnation);
        self.name.encode(buf);
    }

    fn encoded_size(&self) -> usize {
        13 + self.name.encoded_size()
    }
}

impl WireDecode for DeleteTokenOp {
    fn decode(buf: &[u8]) -> Result<(Self, usize), WireError> {
        let (user_id, incarnation, name, pos) = decode_target(buf)?;
        Ok((
            DeleteTokenOp {
                user_id,
                incarnation,
                name,
            },
            pos,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_token_is_iggys_shape_and_only_its_hash_finds_it() {
        let mut n = 0u64;
        let (raw, hash) = mint(|| {
            n += 1;
            n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        });
        assert_eq!(raw.len(), 68, "50 bytes in padded base64");
        assert!(raw.ends_with('='));
        assert_eq!(hash, hash_token(&raw));
        assert_ne!(hash, hash_token(&raw[1..]));
        let (other, _) = mint(|| 7);
        assert_ne!(raw, other);
    }

    #[test]
    fn the_journaled_bodies_round_trip_and_refuse_another_format() {
        let create = CreateTokenOp {
            user_id: 3,
            incarnation: 17,
            name: WireName::new("ci-token").unwrap(),
            expiry: 5_000_000,
            hash: [9; 32],
        };
        let bytes = create.to_bytes();
        assert_eq!(bytes.len(), create.encoded_size());
        assert_eq!(
            CreateTokenOp::decode(&bytes).unwrap(),
            (create.clone(), bytes.len())
        );
        for cut in 0..bytes.len() {
            assert!(
                CreateTokenOp::decode(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut other = bytes.to_vec();
        other[0] = 2;
        assert!(CreateTokenOp::decode(&other).is_err());

        let delete = DeleteTokenOp {
            user_id: 3,
            incarnation: 17,
            name: WireName::new("ci-token").unwrap(),
        };
        let bytes = delete.to_bytes();
        assert_eq!(bytes.len(), delete.encoded_size());
        assert_eq!(
            DeleteTokenOp::decode(&bytes).unwrap(),
            (delete, bytes.len())
        );
    }

    #[test]
    fn the_wire_expiry_follows_iggy() {
        assert_eq!(TokenExpiry::from_wire(0), TokenExpiry::Never);
        assert_eq!(TokenExpiry::from_wire(u64::MAX), TokenExpiry::Never);
        assert_eq!(TokenExpiry::from_wire(9), TokenExpiry::After(9));
        assert_eq!(TokenExpiry::After(9).to_wire(), 9);
        let token = Token {
            hash: [0; 32],
            expiry_at: Some(100),
            created_at: 0,
        };
        assert!(!token.is_expired(99));
        assert!(token.is_expired(100));
    }
}
