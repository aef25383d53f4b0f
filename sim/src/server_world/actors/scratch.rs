//! The admin's topic, partition, segment and group commands on scratch streams: topic "t"
//! created in one, read back, updated, grown and shrunk, purged, a deletion of its oldest
//! segment refused (only active segments exist), a group created, read and deleted in it, the topic deleted, the stream purged.
//! Each command is judged against the model of that topic ([`ScratchTopic`]): a definite
//! model expects the command to succeed and its effect to show in the next read; a lost
//! reply or a refusal with a cause of the server's puts the topic in doubt until a read
//! after that server process is gone.

use super::super::lock;
use super::super::oracle::{ScratchTopic, StreamState, INV_META, MAX_SCRATCH_PARTITIONS};
use super::{outcome, Actor, Outcome};
use crate::report::violation;
use cairn_client::iggy_binary_protocol::{WireIdentifier, WireOptions};
use cairn_client::ClientError;
use rand::Rng;

/// The scratch topic's name, and its group's.
const TOPIC: &str = "t";
const GROUP: &str = "g";
/// Expiry values an update picks from (µs).
const EXPIRIES: [u64; 2] = [3_600_000_000, 86_400_000_000];

/// A command on the scratch topic.
#[derive(Debug, Clone, Copy)]
enum Command {
    Create { partitions: u32 },
    Read,
    Update { expiry: u64 },
    AddPartition,
    RemovePartition,
    Purge,
    DeleteSegments,
    CreateGroup,
    ReadGroup,
    DeleteGroup,
    Delete,
    PurgeStream,
}

/// One command on the topic of a scratch stream the admin created and has not deleted.
pub(crate) async fn scratch(a: &mut Actor) {
    let Some((stream, model)) = pick_stream(a) else {
        return;
    };
    let command = {
        let mut w = lock(&a.world);
        choose(&mut w.rng, model)
    };
    let Some(command) = command else { return };
    let label = format!("{command:?} on {stream}/{TOPIC}");
    let begun = a.begin(&label);
    let result = run(a, &stream, command).await;
    a.end(&begun, &result);
    let epoch = a.after(&begun);
    let next = match &result {
        Ok(Answer::Unlike(reply)) => {
            let why = format!("{label}: answered a topic the admin never made: {reply}");
            return a.fail(violation(INV_META, why));
        }
        // A topic in doubt read back after the process that might apply its command.
        Ok(Answer::Topic(found)) if matches!(model, Some(ScratchTopic::InDoubt(_))) => *found,
        Ok(answer) => match judge(&stream, command, model, answer) {
            Ok(next) => {
                lock(&a.world).decision(row(command));
                next
            }
            Err(v) => return a.fail(v),
        },
        Err(_) => match outcome(&result) {
            // The topic holds no messages, so each partition has only its active segment,
            // which DeleteSegments never deletes: refused (code 1, as Iggy's Error).
            // (With a cause of the server's the refusal may be that instead: the topic
            // stays as it was either way, but the row counts only the rule's own refusals.)
            Outcome::Refused(1)
                if matches!(command, Command::DeleteSegments)
                    && matches!(model, Some(ScratchTopic::Exists { .. })) =>
            {
                let mut w = lock(&a.world);
                if w.refusal_cause(begun.records, begun.epoch).is_none() {
                    w.decision(row(command));
                }
                model
            }
            Outcome::Refused(code) => {
                if !a.refusal_in_doubt(&begun, code, &label, INV_META) {
                    return;
                }
                reads_nothing(command, model, epoch)
            }
            Outcome::Unknown => reads_nothing(command, model, epoch),
            Outcome::Ok | Outcome::NotSent => return,
        },
    };
    let mut w = lock(&a.world);
    match next {
        Some(next) => w.oracle.scratch_topics.insert(stream, next),
        None => w.oracle.scratch_topics.remove(&stream),
    };
}

/// The model after `command` failed without an answer: a read changes nothing; any other
/// command may have landed, so the topic is in doubt.
fn reads_nothing(
    command: Command,
    model: Option<ScratchTopic>,
    epoch: u64,
) -> Option<ScratchTopic> {
    match command {
        Command::Read | Command::ReadGroup => model,
        _ => Some(ScratchTopic::InDoubt(epoch)),
    }
}

/// The coverage row of a command judged against a definite model.
fn row(command: Command) -> &'static str {
    match command {
        Command::Create { .. } => "ScratchTopicCreated",
        Command::Read => "ScratchTopicRead",
        Command::Update { .. } => "ScratchTopicUpdated",
        Command::AddPartition | Command::RemovePartition => "ScratchPartitions",
        Command::Purge | Command::PurgeStream => "ScratchPurged",
        Command::DeleteSegments => "ScratchActiveSegmentKept",
        Command::CreateGroup | Command::ReadGroup | Command::DeleteGroup => "ScratchGroup",
        Command::Delete => "ScratchTopicDeleted",
    }
}

/// A scratch stream the model knows exists (no create or delete of it in doubt), with its
/// topic's model; only a read is sent to a topic in doubt, and only after the server
/// process that may still apply its command is gone.
fn pick_stream(a: &Actor) -> Option<(String, Option<ScratchTopic>)> {
    let mut w = lock(&a.world);
    let epoch = w.oracle.epoch;
    let names: Vec<String> = w
        .oracle
        .streams
        .iter()
        .filter(|(n, s)| matches!(s, StreamState::Exists(_)) && !w.oracle.pending.contains_key(*n))
        .filter(|(n, _)| {
            !matches!(w.oracle.scratch_topics.get(*n), Some(ScratchTopic::InDoubt(e)) if *e == epoch)
        })
        .map(|(n, _)| n.clone())
        .collect();
    // Mostly a stream whose topic exists: its commands, not only creations.
    let with_topic: Vec<String> = names
        .iter()
        .filter(|n| w.oracle.scratch_topics.contains_key(*n))
        .cloned()
        .collect();
    let names = match with_topic.is_empty() || w.rng.gen_bool(0.2) {
        true => names,
        false => with_topic,
    };
    if names.is_empty() {
        return None;
    }
    let name = names[w.rng.gen_range(0..names.len())].clone();
    let model = w.oracle.scratch_topics.get(&name).copied();
    Some((name, model))
}

/// The next command for a topic in state `model` (`None`: there is none).
fn choose(rng: &mut impl Rng, model: Option<ScratchTopic>) -> Option<Command> {
    let Some(ScratchTopic::Exists {
        partitions, group, ..
    }) = model
    else {
        return match model {
            None => Some(Command::Create {
                partitions: rng.gen_range(1..=2),
            }),
            // A topic in doubt is read back first.
            Some(_) => Some(Command::Read),
        };
    };
    let picks: Vec<Command> = [
        Some(Command::Read),
        Some(Command::Update {
            expiry: EXPIRIES[rng.gen_range(0..EXPIRIES.len())],
        }),
        (partitions < MAX_SCRATCH_PARTITIONS).then_some(Command::AddPartition),
        (partitions > 1).then_some(Command::RemovePartition),
        Some(Command::Purge),
        Some(Command::DeleteSegments),
        (!group).then_some(Command::CreateGroup),
        group.then_some(Command::ReadGroup),
        group.then_some(Command::DeleteGroup),
        Some(Command::Delete),
        Some(Command::PurgeStream),
    ]
    .into_iter()
    .flatten()
    .collect();
    Some(picks[rng.gen_range(0..picks.len())])
}

/// What a command answered, as far as the model can judge it.
#[derive(Debug)]
enum Answer {
    /// The topic as a read (or its creation) describes it; `None` when there is none.
    Topic(Option<ScratchTopic>),
    /// A topic unlike any the admin made (messages in it, partitions misnumbered): wrong
    /// whatever the model.
    Unlike(String),
    /// A group read: its partitions and members, `None` when there is none.
    Group(Option<(u32, u32)>),
    Done,
}

async fn run(a: &mut Actor, stream: &str, command: Command) -> Result<Answer, ClientError> {
    let s = WireIdentifier::named(stream).expect("a valid name");
    let t = WireIdentifier::named(TOPIC).expect("a valid name");
    let g = WireIdentifier::named(GROUP).expect("a valid name");
    let c = a.client();
    Ok(match command {
        Command::Create { partitions } => {
            let created = c
                .create_topic(&s, TOPIC, partitions, WireOptions::empty())
                .await?;
            described(&created, false)
        }
        Command::Read => {
            let Some(topic) = c.get_topic(&s, &t).await? else {
                return Ok(Answer::Topic(None));
            };
            let groups = c.get_consumer_groups(&s, &t).await?;
            let group = groups.iter().any(|g| g.name.as_str() == GROUP);
            described(&topic, group)
        }
        Command::Update { expiry } => {
            c.update_topic(&s, &t, TOPIC, expiry_option(expiry)).await?;
            Answer::Done
        }
        Command::AddPartition => c
            .create_partitions(&s, &t, 1)
            .await
            .map(|()| Answer::Done)?,
        Command::RemovePartition => c
            .delete_partitions(&s, &t, 1)
            .await
            .map(|()| Answer::Done)?,
        Command::Purge => c.purge_topic(&s, &t).await.map(|()| Answer::Done)?,
        Command::DeleteSegments => c
            .delete_segments(&s, &t, 0, 1)
            .await
            .map(|()| Answer::Done)?,
        Command::CreateGroup => {
            let created = c.create_consumer_group(&s, &t, GROUP).await?;
            Answer::Group(created.map(|d| (d.group.partitions_count, d.group.members_count)))
        }
        Command::ReadGroup => {
            let read = c.get_consumer_group(&s, &t, &g).await?;
            Answer::Group(read.map(|d| (d.group.partitions_count, d.group.members_count)))
        }
        Command::DeleteGroup => c
            .delete_consumer_group(&s, &t, &g)
            .await
            .map(|()| Answer::Done)?,
        Command::Delete => c.delete_topic(&s, &t).await.map(|()| Answer::Done)?,
        Command::PurgeStream => c.purge_stream(&s).await.map(|()| Answer::Done)?,
    })
}

/// The model of a topic as GetTopic (or CreateTopic) describes it; a topic that holds
/// messages, or partitions that are not numbered 0.., is not one the admin made.
fn described(
    reply: &cairn_client::iggy_binary_protocol::responses::topics::GetTopicResponse,
    group: bool,
) -> Answer {
    let ids: Vec<u32> = reply.partitions.iter().map(|p| p.id).collect();
    let partitions = reply.topic.partitions_count;
    if reply.topic.name.as_str() != TOPIC
        || ids != (0..partitions).collect::<Vec<_>>()
        || reply.topic.messages_count != 0
        || reply
            .partitions
            .iter()
            .any(|p| p.messages_count != 0 || p.current_offset != 0)
    {
        return Answer::Unlike(format!("{reply:?}"));
    }
    Answer::Topic(Some(ScratchTopic::Exists {
        partitions,
        expiry: reply.topic.message_expiry,
        group,
    }))
}

/// Options setting only `message_expiry` (µs).
fn expiry_option(expiry: u64) -> WireOptions {
    use crate::wire::{options, KIND_UINT64};
    options(&[("message_expiry", KIND_UINT64, expiry.to_le_bytes().to_vec())])
}

/// A definite model's verdict on an answered command: the topic's next model.
fn judge(
    stream: &str,
    command: Command,
    model: Option<ScratchTopic>,
    answer: &Answer,
) -> Result<Option<ScratchTopic>, crate::report::Violation> {
    let wrong = |why: String| {
        Err(violation(
            INV_META,
            format!("{command:?} on {stream}/{TOPIC}: {why} (the model: {model:?})"),
        ))
    };
    let Some(ScratchTopic::Exists {
        partitions,
        expiry,
        group,
    }) = model
    else {
        // Only a creation is sent to a topic the model holds absent.
        return match answer {
            Answer::Topic(Some(
                made @ ScratchTopic::Exists {
                    partitions: p,
                    group: false,
                    ..
                },
            )) if matches!(command, Command::Create { partitions } if partitions == *p) => {
                Ok(Some(*made))
            }
            other => wrong(format!("created as {other:?}")),
        };
    };
    let exists = |partitions, expiry, group| {
        Ok(Some(ScratchTopic::Exists {
            partitions,
            expiry,
            group,
        }))
    };
    match (command, answer) {
        (Command::Read, Answer::Topic(Some(read))) if *read == model.expect("exists") => {
            Ok(Some(*read))
        }
        (Command::Read, other) => wrong(format!("read as {other:?}")),
        (Command::Update { expiry }, Answer::Done) => exists(partitions, expiry, group),
        (Command::AddPartition, Answer::Done) => exists(partitions + 1, expiry, group),
        (Command::RemovePartition, Answer::Done) => exists(partitions - 1, expiry, group),
        (Command::Purge | Command::PurgeStream, Answer::Done) => exists(partitions, expiry, group),
        (Command::DeleteSegments, Answer::Done) => {
            wrong("deleted a segment, though only active segments exist".into())
        }
        (Command::CreateGroup, Answer::Group(Some((p, 0)))) if *p == partitions => {
            exists(partitions, expiry, true)
        }
        (Command::ReadGroup, Answer::Group(Some((p, 0)))) if *p == partitions => {
            exists(partitions, expiry, true)
        }
        (Command::CreateGroup | Command::ReadGroup, other) => wrong(format!(
            "answered {other:?}, the model's group spans {partitions} partitions"
        )),
        (Command::DeleteGroup, Answer::Done) => exists(partitions, expiry, false),
        (Command::Delete, Answer::Done) => Ok(None),
        (command, other) => wrong(format!("{command:?} answered {other:?}")),
    }
}
