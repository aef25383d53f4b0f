//! Grants: the per-stream and per-topic permissions users hold, bound to what they were
//! given on. A grant names a stream or topic by id, and ids are reused by the next create,
//! so deleting a stream or topic removes every grant on it in the same operation (review
//! S1), and a snapshot decoded with grants on what no longer exists forgets them.

use super::{MetaState, NodeError, NodeResult};
use iggy_binary_protocol::{WireDecode, WireEncode, WirePermissions};
use std::collections::BTreeSet;

impl MetaState {
    /// Removes every user's grant on stream `s` (on its topic `t` only, when given): ids
    /// are reused by the next create, and a grant never outlives what it was given on.
    /// The grant on a stream stays when only one of its topics goes.
    pub(super) fn forget_grants(&mut self, s: u32, t: Option<u32>) {
        for user in self.users.values_mut() {
            let Some(bytes) = &user.permissions else {
                continue;
            };
            let (mut p, _) = WirePermissions::decode(bytes).expect("stored permissions decode");
            let before = p.streams.clone();
            match t {
                None => p.streams.retain(|sp| sp.stream_id != s),
                Some(t) => {
                    for sp in p.streams.iter_mut().filter(|sp| sp.stream_id == s) {
                        sp.topics.retain(|tp| tp.topic_id != t);
                    }
                }
            }
            if p.streams != before {
                user.permissions = Some(p.to_bytes().to_vec());
            }
        }
    }

    /// Removes every grant on a stream or topic that does not exist (a snapshot written
    /// before deletions removed their grants may hold some).
    pub(super) fn forget_stale_grants(&mut self) {
        let stale: Vec<(u32, Option<u32>)> = self
            .users
            .values()
            .filter_map(|u| u.permissions.as_ref())
            .flat_map(|bytes| {
                let (p, _) = WirePermissions::decode(bytes).expect("stored permissions decode");
                p.streams
            })
            .flat_map(|sp| match self.streams.get(&sp.stream_id) {
                None => vec![(sp.stream_id, None)],
                Some(stream) => sp
                    .topics
                    .iter()
                    .filter(|tp| !stream.topics.contains_key(&tp.topic_id))
                    .map(|tp| (sp.stream_id, Some(tp.topic_id)))
                    .collect(),
            })
            .collect();
        for (s, t) in stale {
            self.forget_grants(s, t);
        }
    }
}

/// Permissions name only streams and topics that exist, each at most once.
pub fn check_permissions(state: &MetaState, permissions: &WirePermissions) -> NodeResult<()> {
    let mut streams = BTreeSet::new();
    for stream in &permissions.streams {
        let Some(st) = state.streams.get(&stream.stream_id) else {
            return Err(NodeError::InvalidPermissions(format!(
                "stream {} does not exist",
                stream.stream_id
            )));
        };
        if !streams.insert(stream.stream_id) {
            return Err(NodeError::InvalidPermissions(format!(
                "stream {} is listed twice",
                stream.stream_id
            )));
        }
        let mut topics = BTreeSet::new();
        for topic in &stream.topics {
            if !st.topics.contains_key(&topic.topic_id) {
                return Err(NodeError::InvalidPermissions(format!(
                    "topic {} of stream {} does not exist",
                    topic.topic_id, stream.stream_id
                )));
            }
            if !topics.insert(topic.topic_id) {
                return Err(NodeError::InvalidPermissions(format!(
                    "topic {} of stream {} is listed twice",
                    topic.topic_id, stream.stream_id
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::apply::tests::{ctx, state};
    use super::super::ops::MetaOp;
    use super::*;
    use iggy_binary_protocol::requests::streams::{CreateStreamRequest, DeleteStreamRequest};
    use iggy_binary_protocol::requests::topics::{CreateTopicRequest, DeleteTopicRequest};
    use iggy_binary_protocol::requests::users::UpdatePermissionsRequest;
    use iggy_binary_protocol::{
        WireGlobalPermissions, WireIdentifier, WireName, WireOptions, WireStreamPermissions,
        WireTopicPermissions,
    };

    fn create_stream(name: &str) -> MetaOp {
        MetaOp::CreateStream(CreateStreamRequest {
            name: WireName::new(name).unwrap(),
            options: WireOptions::empty(),
        })
    }

    fn create_topic(stream: u32, name: &str) -> MetaOp {
        MetaOp::CreateTopic(CreateTopicRequest {
            stream_id: WireIdentifier::numeric(stream),
            partitions_count: 1,
            name: WireName::new(name).unwrap(),
            options: WireOptions::empty(),
        })
    }

    /// Every right on each (stream, topics) listed.
    fn grants(on: &[(u32, &[u32])]) -> WirePermissions {
        WirePermissions {
            global: WireGlobalPermissions {
                manage_servers: false,
                read_servers: false,
                manage_users: false,
                read_users: false,
                manage_streams: false,
                read_streams: false,
                manage_topics: false,
                read_topics: false,
                poll_messages: false,
                send_messages: false,
            },
            streams: on
                .iter()
                .map(|(s, topics)| WireStreamPermissions {
                    stream_id: *s,
                    manage_stream: true,
                    read_stream: true,
                    manage_topics: true,
                    read_topics: true,
                    poll_messages: true,
                    send_messages: true,
                    topics: topics
                        .iter()
                        .map(|t| WireTopicPermissions {
                            topic_id: *t,
                            manage_topic: true,
                            read_topic: true,
                            poll_messages: true,
                            send_messages: true,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    fn grant(permissions: &WirePermissions) -> MetaOp {
        MetaOp::UpdatePermissions(UpdatePermissionsRequest {
            user_id: WireIdentifier::numeric(1),
            permissions: Some(permissions.clone()),
        })
    }

    fn alices_grants(state: &MetaState) -> WirePermissions {
        let bytes = state.user(1).unwrap().permissions.as_ref().unwrap();
        WirePermissions::decode(bytes).unwrap().0
    }

    /// Review S1: a grant on a stream or topic never carries over to the next one created
    /// with its id.
    #[test]
    fn a_grant_goes_with_its_stream_or_topic_and_never_reaches_the_next_with_its_id() {
        let mut state = state();
        let ops = [
            create_stream("bobs-stream"),
            create_topic(0, "t0"),
            create_topic(0, "t1"),
            create_stream("other"),
            grant(&grants(&[(0, &[0, 1]), (1, &[])])),
        ];
        for (n, op) in ops.iter().enumerate() {
            state.apply(op, ctx(3 + n as u64)).unwrap();
        }
        let delete_topic = MetaOp::DeleteTopic(DeleteTopicRequest {
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::numeric(0),
        });
        state.apply(&delete_topic, ctx(10)).unwrap();
        assert_eq!(alices_grants(&state), grants(&[(0, &[1]), (1, &[])]));
        state.apply(&create_topic(0, "payroll"), ctx(11)).unwrap();
        assert!(state.find_topic(0, 0).is_some(), "the topic id is reused");
        assert_eq!(alices_grants(&state), grants(&[(0, &[1]), (1, &[])]));
        let delete_stream = MetaOp::DeleteStream(DeleteStreamRequest {
            stream_id: WireIdentifier::numeric(0),
        });
        state.apply(&delete_stream, ctx(12)).unwrap();
        assert_eq!(alices_grants(&state), grants(&[(1, &[])]));
        state.apply(&create_stream("payroll"), ctx(13)).unwrap();
        assert_eq!(
            state
                .stream_id(&WireIdentifier::named("payroll").unwrap())
                .unwrap(),
            0
        );
        assert_eq!(alices_grants(&state), grants(&[(1, &[])]));
        assert!(state.indexes_agree());
    }

    /// A snapshot written before deletions removed their grants decodes without them.
    #[test]
    fn a_decoded_snapshot_forgets_grants_on_what_does_not_exist() {
        let mut state = state();
        for (n, op) in [create_stream("s"), create_topic(0, "t")]
            .iter()
            .enumerate()
        {
            state.apply(op, ctx(3 + n as u64)).unwrap();
        }
        let stale = grants(&[(0, &[0, 4]), (3, &[0])]);
        state.users.get_mut(&1).unwrap().permissions = Some(stale.to_bytes().to_vec());
        let decoded: MetaState =
            serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        assert_eq!(alices_grants(&decoded), grants(&[(0, &[0])]));
    }
}
