//! Iggy's permissions, as a pure decision: may this user do this action? The root user (id
//! 0) may do everything; any other user holds [`WirePermissions`] (global, per stream, per
//! topic) or none at all.
//!
//! The rules, each level implying the ones beneath it:
//! - global `manage_streams` ⇒ manage and read every stream and topic; `read_streams` ⇒
//!   read them and poll their messages; `manage_topics` / `read_topics` likewise for topics;
//! - a stream's `manage_stream` ⇒ everything in that stream but sending; `read_stream` ⇒
//!   read it and poll; its `manage_topics` / `read_topics` cover its topics;
//! - a topic's `manage_topic` ⇒ read it; `read_topic` ⇒ poll it;
//! - `poll_messages` and `send_messages` at each level cover everything beneath;
//! - `manage_users` ⇒ `read_users`; `manage_servers` ⇒ `read_servers`.

use super::session::Session;
use super::status::{codes, Status};
use super::{Call, Context, Resolved};
use cairn_engine::node::MetaView;
use iggy_binary_protocol::{WirePermissions, WireStreamPermissions, WireTopicPermissions};

/// Who may run a command, on what its names resolved to.
#[derive(Debug, Clone, Copy)]
pub enum Rule {
    /// Any session.
    Open,
    /// A server-wide action.
    Server(Action),
    /// An action on the command's stream.
    Stream(fn(u32) -> Action),
    /// An action on the command's topic.
    Topic(fn(u32, u32) -> Action),
    /// Any session acting on itself (its own user, its own connection); else the action.
    OwnOr(Action),
}

/// The root user's id: it holds every permission.
pub const ROOT_USER: u32 = 0;

/// What a request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    ReadServers,
    ManageServers,
    ReadUsers,
    ManageUsers,
    /// List every stream.
    ReadStreams,
    /// Create a stream.
    CreateStream,
    ReadStream(u32),
    /// Update, delete or purge a stream.
    ManageStream(u32),
    /// List a stream's topics.
    ReadTopics(u32),
    /// Create a topic in the stream.
    CreateTopic(u32),
    ReadTopic(u32, u32),
    /// Update, delete or purge a topic; its partitions, segments and consumer groups.
    ManageTopic(u32, u32),
    /// Poll, consumer offsets, consumer-group membership.
    Poll(u32, u32),
    Send(u32, u32),
}

/// Whether `user` (with `permissions`, none meaning no permission at all) may do `action`.
pub fn allowed(user: u32, permissions: Option<&WirePermissions>, action: Action) -> bool {
    if user == ROOT_USER {
        return true;
    }
    let Some(p) = permissions else {
        return false;
    };
    let g = &p.global;
    let stream = |s: u32| p.streams.iter().find(|sp| sp.stream_id == s);
    let topic = |sp: &'_ WireStreamPermissions, t: u32| -> Option<WireTopicPermissions> {
        sp.topics.iter().find(|tp| tp.topic_id == t).cloned()
    };
    match action {
        Action::ReadServers => g.read_servers || g.manage_servers,
        Action::ManageServers => g.manage_servers,
        Action::ReadUsers => g.read_users || g.manage_users,
        Action::ManageUsers => g.manage_users,
        Action::ReadStreams => g.read_streams || g.manage_streams,
        Action::CreateStream => g.manage_streams,
        Action::ReadStream(s) => {
            g.read_streams
                || g.manage_streams
                || stream(s).is_some_and(|sp| sp.read_stream || sp.manage_stream)
        }
        Action::ManageStream(s) => g.manage_streams || stream(s).is_some_and(|sp| sp.manage_stream),
        Action::ReadTopics(s) => {
            g.read_streams
                || g.manage_streams
                || g.read_topics
                || g.manage_topics
                || stream(s).is_some_and(|sp| {
                    sp.read_stream || sp.manage_stream || sp.read_topics || sp.manage_topics
                })
        }
        Action::CreateTopic(s) => {
            g.manage_streams
                || g.manage_topics
                || stream(s).is_some_and(|sp| sp.manage_stream || sp.manage_topics)
        }
        Action::ReadTopic(s, t) => {
            allowed(user, permissions, Action::ReadTopics(s))
                || stream(s)
                    .and_then(|sp| topic(sp, t))
                    .is_some_and(|tp| tp.read_topic || tp.manage_topic)
        }
        Action::ManageTopic(s, t) => {
            allowed(user, permissions, Action::CreateTopic(s))
                || stream(s)
                    .and_then(|sp| topic(sp, t))
                    .is_some_and(|tp| tp.manage_topic)
        }
        Action::Poll(s, t) => {
            g.poll_messages
                || g.read_streams
                || g.manage_streams
                || stream(s).is_some_and(|sp| {
                    sp.poll_messages
                        || sp.read_stream
                        || sp.manage_stream
                        || topic(sp, t)
                            .is_some_and(|tp| tp.poll_messages || tp.read_topic || tp.manage_topic)
                })
        }
        Action::Send(s, t) => {
            g.send_messages
                || stream(s).is_some_and(|sp| {
                    sp.send_messages || topic(sp, t).is_some_and(|tp| tp.send_messages)
                })
        }
    }
}

/// Whether `user` may send to some topic: a send's frame (or body) may then be as large
/// as the server takes; anyone else's is refused unread past a command's size.
pub fn may_send_somewhere(user: u32, permissions: Option<&WirePermissions>) -> bool {
    if user == ROOT_USER {
        return true;
    }
    permissions.is_some_and(|p| {
        p.global.send_messages
            || p.streams
                .iter()
                .any(|s| s.send_messages || s.topics.iter().any(|t| t.send_messages))
    })
}

/// Whether the call's session may run a command whose row says `rule`, on what its names
/// resolved to.
pub fn check(call: &Call<'_>, rule: Rule) -> Result<(), Status> {
    let own_user = call.session().user_id;
    let action = match (rule, call.target) {
        (Rule::Open, _) => return Ok(()),
        (Rule::Server(action), _) => action,
        (Rule::Stream(action), Resolved::Stream(s)) => action(s),
        (Rule::Topic(action), Resolved::Topic(s, t)) => action(s, t),
        (Rule::OwnOr(_), Resolved::User(user)) if user == own_user => return Ok(()),
        (Rule::OwnOr(_), Resolved::Client(id)) if id == call.caller.client_id => return Ok(()),
        (Rule::OwnOr(action), Resolved::User(_) | Resolved::Client(_)) => action,
        (rule, target) => {
            unreachable!("the table's rule {rule:?} does not fit a command that names {target:?}")
        }
    };
    require(call.cx, call.session(), call.view, action)
}

/// Refuses unless `session`'s user may do `action` (as `view` holds its permissions).
pub fn require(
    cx: &Context,
    session: &Session,
    view: &MetaView,
    action: Action,
) -> Result<(), Status> {
    let permissions = session.permissions(view, &cx.hooks);
    if allowed(session.user_id, permissions.as_ref(), action) {
        Ok(())
    } else {
        tracing::debug!(user = session.user_id, ?action, "permission denied");
        Err(Status::of(codes::UNAUTHORIZED))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_binary_protocol::WireGlobalPermissions;

    fn none() -> WirePermissions {
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
            streams: Vec::new(),
        }
    }

    fn stream(id: u32) -> WireStreamPermissions {
        WireStreamPermissions {
            stream_id: id,
            manage_stream: false,
            read_stream: false,
            manage_topics: false,
            read_topics: false,
            poll_messages: false,
            send_messages: false,
            topics: Vec::new(),
        }
    }

    #[test]
    fn root_may_do_anything_and_a_user_without_permissions_nothing() {
        assert!(allowed(ROOT_USER, None, Action::ManageUsers));
        assert!(allowed(ROOT_USER, None, Action::Send(1, 1)));
        assert!(!allowed(1, None, Action::ReadStreams));
        assert!(!allowed(1, Some(&none()), Action::Poll(0, 0)));
    }

    #[test]
    fn global_permissions_cover_every_stream() {
        let mut p = none();
        p.global.read_streams = true;
        assert!(allowed(1, Some(&p), Action::ReadStream(7)));
        assert!(allowed(1, Some(&p), Action::Poll(7, 3)));
        assert!(!allowed(1, Some(&p), Action::Send(7, 3)));
        assert!(!allowed(1, Some(&p), Action::ManageStream(7)));
        assert!(!allowed(1, Some(&p), Action::CreateStream));
        p.global.send_messages = true;
        assert!(allowed(1, Some(&p), Action::Send(7, 3)));
        let mut m = none();
        m.global.manage_users = true;
        assert!(allowed(1, Some(&m), Action::ReadUsers));
        assert!(!allowed(1, Some(&m), Action::ReadServers));
    }

    #[test]
    fn stream_and_topic_permissions_cover_only_their_own() {
        let mut p = none();
        let mut s = stream(2);
        s.topics.push(WireTopicPermissions {
            topic_id: 5,
            manage_topic: false,
            read_topic: false,
            poll_messages: false,
            send_messages: true,
        });
        s.read_topics = true;
        p.streams.push(s);
        assert!(allowed(1, Some(&p), Action::Send(2, 5)));
        assert!(!allowed(1, Some(&p), Action::Send(2, 6)));
        assert!(!allowed(1, Some(&p), Action::Send(3, 5)));
        assert!(allowed(1, Some(&p), Action::ReadTopic(2, 6)));
        assert!(!allowed(1, Some(&p), Action::ManageTopic(2, 5)));
        assert!(!allowed(1, Some(&p), Action::ReadStream(2)));
        p.streams[0].manage_stream = true;
        assert!(allowed(1, Some(&p), Action::ManageTopic(2, 9)));
        assert!(allowed(1, Some(&p), Action::Poll(2, 9)));
        assert!(!allowed(1, Some(&p), Action::Send(2, 9)));
        assert!(!allowed(1, Some(&p), Action::ManageStream(3)));
    }
}
