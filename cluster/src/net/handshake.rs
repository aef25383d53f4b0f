//! The handshake that opens every connection between members (and `cairn cluster`'s): both
//! ends prove they hold the cluster's secret before a request is read (`super`'s module
//! doc draws it).

use super::{read_message, unexpected, write_message, Reply};
use crate::types::{show_id, MemberId, NodeId};
use cairn_engine::env::{ByteStream, Env};
use serde::{Deserialize, Serialize};
use std::io;

/// The largest frame of a connection's handshake ([`Challenge`], [`Hello`], the welcome).
pub const MAX_HELLO: usize = 1024;

/// The cluster's shared secret as an HMAC-SHA256 key. Every connection between peers, and
/// every administrator's, proves both ends hold it before a request is read.
#[derive(Clone)]
pub struct PeerKey(ring::hmac::Key);

impl PeerKey {
    /// The shortest secret accepted.
    pub const MIN_SECRET: usize = 16;

    pub fn new(secret: &[u8]) -> PeerKey {
        assert!(
            secret.len() >= Self::MIN_SECRET,
            "the configuration refuses a secret shorter than {} bytes",
            Self::MIN_SECRET
        );
        PeerKey(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret))
    }

    /// The tag of one handshake frame: what it is (`label`), for which cluster, on which
    /// connection (both nonces), between which ends (the opener's Raft id, the member it
    /// means to reach), so a frame proves nothing on another connection or to another member.
    pub(super) fn tag(
        &self,
        label: &str,
        cluster: u128,
        nonces: (u128, u128),
        ends: (NodeId, MemberId),
    ) -> Vec<u8> {
        ring::hmac::sign(&self.0, &tagged(label, cluster, nonces, ends))
            .as_ref()
            .to_vec()
    }

    pub(super) fn verify(
        &self,
        label: &str,
        cluster: u128,
        nonces: (u128, u128),
        ends: (NodeId, MemberId),
        tag: &[u8],
    ) -> bool {
        // Constant time: a tag is not guessed byte by byte.
        ring::hmac::verify(&self.0, &tagged(label, cluster, nonces, ends), tag).is_ok()
    }
}

/// What a handshake tag covers, as bytes.
fn tagged(label: &str, cluster: u128, nonces: (u128, u128), ends: (NodeId, MemberId)) -> Vec<u8> {
    let mut message = Vec::with_capacity(label.len() + 60);
    message.extend_from_slice(label.as_bytes());
    message.extend_from_slice(&cluster.to_le_bytes());
    message.extend_from_slice(&nonces.0.to_le_bytes());
    message.extend_from_slice(&nonces.1.to_le_bytes());
    message.extend_from_slice(&ends.0.to_le_bytes());
    message.extend_from_slice(&ends.1.to_le_bytes());
    message
}

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

pub(super) const HELLO_LABEL: &str = "cairn-peer-hello-v1";
pub(super) const WELCOME_LABEL: &str = "cairn-peer-welcome-v1";

/// The listener's first frame: a nonce the opener's proof must cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    pub nonce: u128,
}

/// The opener's frame: the cluster it is for, who opens it, the member it means to reach,
/// its own nonce (the welcome's proof covers it) and its proof of the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub cluster: u128,
    pub from: NodeId,
    pub to: MemberId,
    pub nonce: u128,
    #[serde(with = "crate::types::bytes_serde")]
    pub proof: Vec<u8>,
}

fn draw_nonce(env: &Env) -> u128 {
    u128::from(env.entropy.next_u64()) << 64 | u128::from(env.entropy.next_u64())
}

/// The opener's side of the handshake with member `to` on a new connection.
pub(super) async fn open_handshake(
    env: &Env,
    stream: &mut dyn ByteStream,
    key: &PeerKey,
    cluster: u128,
    (me, to): (NodeId, MemberId),
) -> io::Result<()> {
    let challenge: Challenge = read_message(stream, MAX_HELLO).await?;
    let nonce = draw_nonce(env);
    let nonces = (challenge.nonce, nonce);
    let hello = Hello {
        cluster,
        from: me,
        to,
        nonce,
        proof: key.tag(HELLO_LABEL, cluster, nonces, (me, to)),
    };
    write_message(stream, &hello).await?;
    let denied = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    match read_message::<Reply>(stream, MAX_HELLO).await? {
        Reply::Welcome(proof) if key.verify(WELCOME_LABEL, cluster, nonces, (me, to), &proof) => {
            Ok(())
        }
        Reply::Welcome(_) => Err(denied(format!(
            "the node answering for member {to} does not prove the cluster's secret"
        ))),
        Reply::Refused(why) => Err(denied(format!("the peer refused the connection: {why}"))),
        _ => Err(unexpected()),
    }
}

/// The listener's side, as member `member`: `Ok(from)` once the opener proved it holds the
/// secret of this cluster and meant this member; otherwise it was told why (when it got
/// that far). Another cluster's member fails the proof, as does another secret: the
/// refusal names neither this cluster's id nor which it was.
pub(super) async fn accept_handshake(
    env: &Env,
    stream: &mut dyn ByteStream,
    key: &PeerKey,
    (cluster, member): (u128, MemberId),
) -> io::Result<NodeId> {
    let nonce = draw_nonce(env);
    write_message(stream, &Challenge { nonce }).await?;
    let hello: Hello = read_message(stream, MAX_HELLO).await?;
    let nonces = (nonce, hello.nonce);
    let ends = (hello.from, hello.to);
    let why = if !key.verify(HELLO_LABEL, cluster, nonces, ends, &hello.proof) {
        format!(
            "{} did not prove this cluster's secret (a member of another cluster, or another secret)",
            show_id(hello.from)
        )
    } else if hello.to != member {
        format!(
            "{} meant member {}, and reached member {member}",
            show_id(hello.from),
            hello.to
        )
    } else {
        let welcome = Reply::Welcome(key.tag(WELCOME_LABEL, cluster, nonces, ends));
        write_message(stream, &welcome).await?;
        return Ok(hello.from);
    };
    tracing::warn!(%why, "a peer connection refused");
    let _ = write_message(stream, &Reply::Refused(why.clone())).await;
    Err(io::Error::new(io::ErrorKind::PermissionDenied, why))
}
