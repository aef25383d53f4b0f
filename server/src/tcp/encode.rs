//! A command's reply as the binary protocol's body: the codec's response types encoded as
//! they are; a poll's stored batches are not copied (the connection writes them after the
//! 16-byte head, as they lie in the partition's buffers).

use crate::command::{Polled, Reply};
use bytes::Bytes;
use iggy_binary_protocol::responses::messages::{
    SendMessagesConfirmationResponse, SendMessagesResponse,
};
use iggy_binary_protocol::WireEncode;

/// A reply's body on the wire.
pub enum Encoded {
    Body(Bytes),
    /// The 16-byte head, then the batches.
    Poll(Polled),
}

fn body(value: &impl WireEncode) -> Encoded {
    Encoded::Body(value.to_bytes())
}

pub fn encode(reply: Reply) -> Encoded {
    match reply {
        Reply::Done | Reply::NotFound => Encoded::Body(Bytes::new()),
        Reply::Stats(r) => body(&*r),
        Reply::ClusterMetadata(r) => body(&r),
        Reply::Routing(r) => body(&r),
        Reply::Client(r) => body(&r),
        Reply::Clients(r) => body(&r),
        Reply::User(r) => body(&r),
        Reply::Users(r) => body(&r),
        Reply::Stream(r) => body(&r),
        Reply::Streams(r) => body(&r),
        Reply::Topic(r) => body(&r),
        Reply::Topics(r) => body(&r),
        Reply::Sent(sent) => body(&SendMessagesResponse {
            confirmations: vec![SendMessagesConfirmationResponse {
                stream_id: sent.stream_id,
                topic_id: sent.topic_id,
                partition_id: sent.partition,
                base_offset: sent.landed.map_or(0, |l| l.base_offset),
            }],
        }),
        Reply::Polled(polled) => Encoded::Poll(polled),
        Reply::ConsumerOffset(r) => body(&r),
        Reply::Group(r) => body(&r),
        Reply::Groups(r) => body(&r),
        Reply::Assignment(r) => body(&r),
        Reply::Tokens(r) => body(&r),
        Reply::RawToken(r) => body(&r),
    }
}
