//! The server world's oracle: a model of what the simulated clients were told, and the
//! checks that judge every reply and every boot against it. Pure: no I/O, no clock; the
//! world feeds it what happened, tagged with the server's boot ("epoch") at the time a
//! request was sent (a reply written before a crash can still arrive after it).
//!
//! A reply that never came is an unknown outcome: the model keeps both possibilities until
//! a read decides. Each allowance below names its cause:
//! - **S1** acknowledged messages survive: `persisted` ones in every boot after the ack;
//!   `replicated` ones only until a crash loses the unflushed tail (a boot may end before
//!   them, though the first boot after the ack never holds another message there), or, once
//!   a boot recovered them, only until a power loss (a process crash keeps the page cache);
//!   all of them across a graceful shutdown. A late acknowledgement (from an earlier
//!   process) is judged against the scans of the boots since.
//! - **S2** polls return sent messages with the payload sent, at consecutive offsets from
//!   the one asked, the same message at an offset within a boot, and not nothing from an
//!   offset the boot was known to hold; a log holds each message at most as often as it was
//!   sent (a send refused before any append counts as not sent), each producer's in order.
//!   Allowed: a message whose send had an unknown outcome, since its lost attempt may land
//!   late.
//! - **S3** metadata ops apply once and survive: a create answered "exists", or a delete
//!   answered "not found", only when an earlier attempt is in doubt; a lost attempt may still
//!   land after a retry's answer (the server reads what the client wrote), so that name is
//!   not judged until a read after that server process is gone.
//! - **S4** a replayed create on its session gets its original reply (the duplicate table,
//!   which holds the session's last 64), a refusal included.
//! - **S5** a request a deleted user's session sent after the deletion's reply gets no
//!   successful reply.
//! - **S6** one read of a group never shows a partition owned by two members.
//! - **S7** a partition's reported end (current offset, message count; alone, in its
//!   topic's, stream's or the server's totals) is at least what this boot acknowledged or
//!   read before the request was sent, at most its boot length plus every message sent
//!   since ([`super::ends`]). Allowed: nothing, from a partition the disk filling may have
//!   fenced or a node that stopped.
//! - **S8** stored consumer offsets read back as stored, with the partition's end; a group
//!   member's offset without a partition id means the partition its last poll read
//!   ([`super::offsets`]).
//! - **S9** GetMe, GetClients and GetClient describe the asking client as the login bound
//!   it; a group's details count and assign what they list (`actors::clients`,
//!   `actors::groups`).

use crate::report::violation;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub const INV_ACKED: &str = "S1 acknowledged messages survive";
pub const INV_POLL: &str =
    "S2 polls return sent messages, in order, gapless, at most as often as sent";
pub const INV_META: &str = "S3 metadata ops apply once, and survive";
pub const INV_DEDUP: &str = "S4 a replayed request gets its original reply";
pub const INV_REVOKED: &str = "S5 a user change holds from its answer on: no data for a deleted or revoked user's session, no login as a deactivated user or with a replaced password";
pub const INV_GROUP: &str = "S6 group members never share a partition";

/// Scans of the boots kept for judging late acknowledgements (the oldest go first).
pub const MAX_SCANS: usize = 16;

pub use super::PartKey;
pub use crate::report::Checked;

/// What the model knows of one message id.
#[derive(Debug, Clone, Default)]
pub struct Msg {
    pub part: PartKey,
    /// How many times a producer sent it (a retry after an unknown outcome sends it again).
    pub sends: u32,
    /// A send of it had an unknown outcome: that attempt may still be in flight on the
    /// connection the client gave up on, and land after messages sent later.
    pub doubtful: bool,
}

/// An acknowledged message: where the server said it landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub id: u128,
    pub epoch: u64,
    pub persisted: bool,
}

/// One partition's model.
#[derive(Debug, Clone, Default)]
pub struct PartModel {
    pub persisted: bool,
    /// Offset → acknowledged message (every ack the log must still honour).
    pub acked: BTreeMap<u64, Ack>,
    /// Offset → message id, as this epoch's boot scan, acks and reads showed it.
    pub log: BTreeMap<u64, u128>,
    /// The log's length when this epoch's boot recovered it.
    pub boot_len: u64,
    /// Messages whose sends may append to this epoch's log: those begun in it, and those in
    /// flight when it began (a client may deliver them to the new process).
    pub epoch_sends: u64,
    /// Messages in sends awaiting their reply.
    pub in_flight: u64,
}

/// The log of every partition as one boot recovered it.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub epoch: u64,
    pub parts: BTreeMap<PartKey, Vec<u128>>,
}

/// A scratch stream the admin manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    /// Created, with this id (acknowledged, or seen by a read).
    Exists(u32),
    /// Deleted, or never created (acknowledged, or seen by a read).
    Absent,
    /// A create or delete whose reply was lost, sent in this epoch: either, until a read
    /// after that server process is gone (until then the request may still be applied).
    InDoubt(u64),
}

/// Most partitions the admin gives a scratch topic.
pub const MAX_SCRATCH_PARTITIONS: u32 = 3;

/// The model of topic "t" of a scratch stream (none: it has no topic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScratchTopic {
    /// As acknowledged: its partitions, its message expiry (µs), whether group "g" exists.
    Exists {
        partitions: u32,
        expiry: u64,
        group: bool,
    },
    /// A command on it lost its reply or was refused for a cause of the server's, answered
    /// in this epoch: any state, until a read after that server process is gone.
    InDoubt(u64),
}

/// The oracle of one server-world run.
#[derive(Debug, Default)]
pub struct Oracle {
    pub epoch: u64,
    pub parts: BTreeMap<PartKey, PartModel>,
    pub msgs: BTreeMap<u128, Msg>,
    pub scans: VecDeque<Scan>,
    pub streams: BTreeMap<String, StreamState>,
    /// Users deleted, with when their deletion's reply arrived (virtual nanoseconds).
    pub deleted_users: BTreeMap<String, u64>,
    /// Users the admin created (acknowledged) and not yet deleted.
    pub live_users: BTreeMap<String, String>,
    /// Users whose create, change or delete reply was lost (or refused for a cause of the
    /// server's): never judged again.
    pub users_in_doubt: BTreeSet<String>,
    /// Logins that must be refused, (username, password), with when the change that made it
    /// so was answered: a deactivation (code 47), a password changed (code 42).
    pub refused_logins: BTreeMap<(String, String), (u64, u32)>,
    /// Users whose permission to poll was revoked, with when the revocation was answered.
    pub revoked_users: BTreeMap<String, u64>,
    /// Epochs that ended with a power loss (only a power loss takes data a boot already
    /// recovered: a process crash keeps the page cache).
    pub power_losses: BTreeSet<u64>,
    /// Scratch streams with a lost create or delete that may still land, by the epoch of
    /// the server process that may apply it: not judged, not deleted, until it is gone.
    pub pending: BTreeMap<String, u64>,
    /// Renames of a scratch stream in doubt, (old name, new name, id): the stream exists
    /// under exactly one of the names, with its id, until a read resolves the pair.
    pub renames: Vec<(String, String, u32)>,
    /// Stored consumer offsets and group members' current partitions.
    pub offsets: super::offsets::Offsets,
    /// The topic of each scratch stream that has (or may have) one, by stream name.
    pub scratch_topics: BTreeMap<String, ScratchTopic>,
    /// The admin's personal access tokens by name: created (`Exists`), deleted, or in
    /// doubt (as scratch streams are).
    pub tokens: BTreeMap<String, StreamState>,
    /// The raw tokens the admin holds, by name (until it deletes them).
    pub token_secrets: BTreeMap<String, String>,
    /// Logins with a deleted token tried, by server epoch.
    pub refused_token_logins: BTreeMap<u64, u32>,
}

fn id_text(id: u128) -> String {
    format!("{:#x}:{}", id >> 64, id as u64)
}

impl Oracle {
    /// A producer is about to send `ids` to `part` (again, for a retry).
    pub fn sending(&mut self, part: PartKey, ids: &[u128]) {
        for id in ids {
            let msg = self.msgs.entry(*id).or_insert(Msg {
                part,
                sends: 0,
                doubtful: false,
            });
            assert_eq!(msg.part, part, "a message id is sent to one partition only");
            msg.sends += 1;
        }
        let model = self.parts.get_mut(&part).expect("a known partition");
        let n = ids.len() as u64;
        model.epoch_sends += n;
        model.in_flight += n;
    }

    /// A send of `n` messages to `part` got its reply (of any kind): the client sends it
    /// no more (a lost attempt still counts in its epoch's sends).
    pub fn answered(&mut self, part: PartKey, n: usize) {
        let model = self.parts.get_mut(&part).expect("a known partition");
        assert!(model.in_flight >= n as u64, "answered only what was sent");
        model.in_flight -= n as u64;
    }

    /// A send of `ids` was refused before it could be appended: one send fewer to allow.
    pub fn unsent(&mut self, ids: &[u128]) {
        for id in ids {
            let msg = self.msgs.get_mut(id).expect("sent");
            assert!(msg.sends > 0);
            msg.sends -= 1;
        }
    }

    /// A send of `ids` ended with an unknown outcome.
    pub fn unknown(&mut self, ids: &[u128]) {
        for id in ids {
            self.msgs.get_mut(id).expect("sent").doubtful = true;
        }
    }

    /// The server acknowledged `ids` at `base..` in `part`, for a request of `epoch`.
    pub fn acked(&mut self, part: PartKey, base: u64, ids: &[u128], epoch: u64) -> Checked<()> {
        let current = epoch == self.epoch;
        if !current {
            self.late_ack(part, base, ids, epoch)?;
        }
        // A late ack whose message a boot since did not recover was lost (replicated,
        // unflushed): nothing to keep.
        let survived = |offset: u64, id: u128| {
            self.scans
                .iter()
                .filter(|s| s.epoch > epoch)
                .all(|s| s.parts.get(&part).and_then(|l| l.get(offset as usize)) == Some(&id))
        };
        let alive: Vec<bool> = (0..ids.len())
            .map(|i| current || survived(base + i as u64, ids[i]))
            .collect();
        let model = self.parts.get_mut(&part).expect("a known partition");
        let persisted = model.persisted;
        for (i, id) in ids.iter().enumerate() {
            let offset = base + i as u64;
            if !alive[i] {
                continue;
            }
            let ack = Ack {
                id: *id,
                epoch,
                persisted,
            };
            if let Some(old) = model.acked.get(&offset).copied() {
                // An offset is acknowledged for two messages only when the older ack's was
                // lost to a crash (a replicated one, unflushed) and the offset reused.
                let (older, newer) = if old.epoch <= epoch {
                    (old, ack)
                } else {
                    (ack, old)
                };
                let lost = older.epoch < newer.epoch && !older.persisted;
                if old.id != *id && !lost {
                    return Err(violation(INV_ACKED, format!("partition {part:?}: offset {offset} acknowledged for {} (boot {}) and for {} (boot {epoch})", id_text(old.id), old.epoch, id_text(*id))));
                }
                if old.epoch > epoch {
                    // A late ack of a message lost since: the newer one stands.
                    continue;
                }
            }
            if current {
                if let Some(seen) = model.log.get(&offset) {
                    if seen != id {
                        return Err(violation(INV_ACKED, format!("partition {part:?}: offset {offset} acknowledged for {} but this boot's log holds {} there", id_text(*id), id_text(*seen))));
                    }
                }
                model.log.insert(offset, *id);
            }
            model.acked.insert(offset, ack);
        }
        Ok(())
    }

    /// An acknowledgement from an earlier boot arrived after the crash: the boots since must
    /// have recovered it (a persisted one), or never put another message below their end.
    fn late_ack(&self, part: PartKey, base: u64, ids: &[u128], epoch: u64) -> Checked<()> {
        let persisted = self.parts[&part].persisted;
        for (i, id) in ids.iter().enumerate() {
            let offset = base + i as u64;
            // The last boot since that recovered it.
            let mut recovered = None;
            for scan in self.scans.iter().filter(|s| s.epoch > epoch) {
                let log = scan.parts.get(&part).map_or(&[][..], Vec::as_slice);
                let found = log.get(offset as usize);
                if found == Some(id) {
                    recovered = Some(scan.epoch);
                    continue;
                }
                let gone_ok = !persisted
                    && Self::may_be_gone(
                        &self.power_losses,
                        epoch,
                        recovered,
                        scan.epoch,
                        found.is_some(),
                    );
                match found {
                    _ if gone_ok => {}
                    Some(found) => return Err(violation(INV_ACKED, format!("partition {part:?}: {} acknowledged (late, from boot {epoch}) at offset {offset}, boot {} recovered {} there", id_text(*id), scan.epoch, id_text(*found)))),
                    None => return Err(violation(INV_ACKED, format!("partition {part:?}: {} acknowledged (late, from boot {epoch}) at offset {offset}, boot {} recovered {} messages (recovered by boot {recovered:?} before)", id_text(*id), scan.epoch, log.len()))),
                }
            }
        }
        Ok(())
    }

    /// Whether this boot's log is known to hold `offset` (checked when a poll is sent: a
    /// poll from there must then return it).
    pub fn knows(&self, part: PartKey, offset: u64) -> bool {
        self.parts
            .get(&part)
            .is_some_and(|m| m.log.contains_key(&offset))
    }

    /// A poll of `part` in `epoch` asked from `from` (`None`: the server chose, a `next`)
    /// and got `messages` (offset, id, whether the payload matched its id). `known`: the
    /// log was known to hold `from` when the poll was sent ([`Oracle::knows`]).
    pub fn polled(
        &mut self,
        part: PartKey,
        from: Option<u64>,
        known: bool,
        messages: &[(u64, u128, bool)],
        epoch: u64,
    ) -> Checked<()> {
        let current = epoch == self.epoch;
        for (i, (offset, id, payload_ok)) in messages.iter().enumerate() {
            let Some(msg) = self.msgs.get(id) else {
                return Err(violation(INV_POLL, format!("partition {part:?}: a poll returned {} at offset {offset}, which no producer sent", id_text(*id))));
            };
            if msg.part != part {
                return Err(violation(
                    INV_POLL,
                    format!(
                        "partition {part:?}: a poll returned {} at offset {offset}, sent to {:?}",
                        id_text(*id),
                        msg.part
                    ),
                ));
            }
            if !payload_ok {
                return Err(violation(INV_POLL, format!("partition {part:?}: offset {offset} holds {} with a payload that is not the one sent", id_text(*id))));
            }
            let expected = match (i, from) {
                (0, Some(from)) => Some(from),
                (0, None) => None,
                _ => Some(messages[i - 1].0 + 1),
            };
            if let Some(expected) = expected {
                if *offset != expected {
                    return Err(violation(INV_POLL, format!("partition {part:?}: a poll from {from:?} returned offset {offset} at position {i}, expected {expected} (a gap or disorder)")));
                }
            }
        }
        if !current {
            return Ok(());
        }
        let model = self.parts.get_mut(&part).expect("a known partition");
        if let (Some(from), None) = (from, messages.first()) {
            if known {
                return Err(violation(INV_POLL, format!("partition {part:?}: a poll from offset {from} returned nothing, though this boot acknowledged or recovered a message there")));
            }
        }
        for (offset, id, _) in messages {
            match model.log.get(offset) {
                Some(seen) if seen != id => return Err(violation(INV_POLL, format!("partition {part:?}: offset {offset} read as {} after it was {} in this boot", id_text(*id), id_text(*seen)))),
                _ => {
                    model.log.insert(*offset, *id);
                }
            }
        }
        // The live log as far as it is known from 0: counts and order, as at boot.
        let prefix: Vec<u128> = model
            .log
            .iter()
            .enumerate()
            .take_while(|(i, (offset, _))| **offset == *i as u64)
            .map(|(_, (_, id))| *id)
            .collect();
        check_log(part, &prefix, &self.msgs)
    }

    /// Whether a `replicated` message acknowledged in epoch `acked_in` may be missing from
    /// boot `now`'s log (`reused`: another message holds its offset there). `recovered`: the
    /// last boot since that recovered it. Until a boot recovers it, a crash may take it (the
    /// spec's unflushed tail), though the first boot after its ack cannot hold another
    /// message there (a log is a prefix); once recovered, only a power loss since takes it
    /// (a process crash keeps the page cache).
    fn may_be_gone(
        power_losses: &BTreeSet<u64>,
        acked_in: u64,
        recovered: Option<u64>,
        now: u64,
        reused: bool,
    ) -> bool {
        match recovered {
            Some(r) => power_losses.range(r..now).next().is_some(),
            None => !reused || now > acked_in + 1,
        }
    }

    /// The server went down (`power`: it lost power): a new epoch begins at the next boot.
    pub fn crashed(&mut self, power: bool) {
        if power {
            self.power_losses.insert(self.epoch);
        }
        self.epoch += 1;
        for model in self.parts.values_mut() {
            model.log.clear();
            model.epoch_sends = model.in_flight;
        }
        self.offsets.crashed();
    }

    /// What a boot recovered, before the server listens again. `graceful`: the run shut the
    /// server down cleanly before (a shutdown flushes every acknowledged message).
    pub fn recovered(&mut self, scan: Scan, graceful: bool) -> Checked<()> {
        assert_eq!(scan.epoch, self.epoch, "a scan of this epoch");
        for (part, model) in &mut self.parts {
            let log = scan.parts.get(part).map_or(&[][..], Vec::as_slice);
            check_log(*part, log, &self.msgs)?;
            let end = log.len() as u64;
            let mut lost = Vec::new();
            for (offset, ack) in &model.acked {
                let found = log.get(*offset as usize);
                // Still owed here, so every boot since its ack recovered it.
                let recovered = (ack.epoch + 1 < scan.epoch).then(|| scan.epoch - 1);
                let gone_ok = !ack.persisted
                    && !graceful
                    && Self::may_be_gone(
                        &self.power_losses,
                        ack.epoch,
                        recovered,
                        scan.epoch,
                        found.is_some(),
                    );
                match found {
                    Some(found) if *found == ack.id => {}
                    _ if gone_ok => lost.push(*offset),
                    Some(found) => return Err(violation(INV_ACKED, format!("partition {part:?}: offset {offset} acknowledged for {} (boot {}), boot {} recovered {} there", id_text(ack.id), ack.epoch, scan.epoch, id_text(*found)))),
                    None => return Err(violation(INV_ACKED, format!("partition {part:?}: {} {} acknowledged at offset {offset} (boot {}), boot {} recovered {end} messages", if ack.persisted { "persisted" } else if graceful { "replicated (then a graceful shutdown)" } else { "replicated (recovered by a boot since, no power loss since)" }, id_text(ack.id), ack.epoch, scan.epoch))),
                }
            }
            for offset in lost {
                model.acked.remove(&offset);
            }
            model.boot_len = end;
            self.offsets.recovered(*part, end);
            model.log = log
                .iter()
                .enumerate()
                .map(|(o, id)| (o as u64, *id))
                .collect();
        }
        self.scans.push_back(scan);
        while self.scans.len() > MAX_SCANS {
            self.scans.pop_front();
        }
        Ok(())
    }

    /// A create or delete of stream `name` lost its reply: it may still land, after any
    /// answer to a retry (the server reads what the client wrote), so the name is neither
    /// judged nor deleted until a read after this server process is gone.
    pub fn lost_attempt(&mut self, name: &str) {
        self.pending.insert(name.to_string(), self.epoch);
        self.streams
            .insert(name.to_string(), StreamState::InDoubt(self.epoch));
    }

    /// What the scratch streams hold beyond the workload's, as ranges (acknowledged ..=
    /// acknowledged and in doubt): topics, partitions, consumer groups.
    pub fn scratch_counts(&self) -> [std::ops::RangeInclusive<u32>; 3] {
        let (mut low, mut high) = ([0u32; 3], [0u32; 3]);
        for (name, topic) in &self.scratch_topics {
            let mut stream = self
                .streams
                .get(name)
                .copied()
                .unwrap_or(StreamState::Absent);
            // A rename in doubt: the stream exists, its topic counted once (under the old
            // name).
            for (old, new, id) in self.renames_in_doubt() {
                if name == new {
                    stream = StreamState::Absent;
                } else if name == old {
                    stream = StreamState::Exists(*id);
                }
            }
            let counts = match topic {
                ScratchTopic::Exists {
                    partitions, group, ..
                } => [1, *partitions, u32::from(*group)],
                ScratchTopic::InDoubt(_) => [0; 3],
            };
            let most = match topic {
                ScratchTopic::Exists { .. } => counts,
                ScratchTopic::InDoubt(_) => [1, MAX_SCRATCH_PARTITIONS, 1],
            };
            match stream {
                StreamState::Absent => {}
                StreamState::Exists(_) => {
                    for i in 0..3 {
                        low[i] += counts[i];
                        high[i] += most[i];
                    }
                }
                StreamState::InDoubt(_) => {
                    for i in 0..3 {
                        high[i] += most[i];
                    }
                }
            }
        }
        [0, 1, 2].map(|i| low[i]..=high[i])
    }

    /// A read of the scratch streams (name → id) judged against the model, then adopted.
    pub fn streams_read(&mut self, listed: &BTreeMap<String, u32>) -> Checked<()> {
        let epoch = self.epoch;
        self.pending.retain(|_, e| *e == epoch);
        for (name, state) in self.streams.iter_mut() {
            if self.pending.contains_key(name) {
                continue;
            }
            let found = listed.get(name).copied();
            if let StreamState::InDoubt(epoch) = *state {
                if epoch == self.epoch {
                    continue;
                }
            }
            match (*state, found) {
                (StreamState::Exists(id), Some(got)) if id != got => return Err(violation(INV_META, format!("stream {name} was created with id {id}, a read lists it with id {got}"))),
                (StreamState::Exists(id), None) => return Err(violation(INV_META, format!("stream {name} (id {id}) was acknowledged and not deleted, a read does not list it"))),
                (StreamState::Absent, Some(got)) => return Err(violation(INV_META, format!("stream {name} was acknowledged deleted (or never created), a read lists it with id {got}"))),
                _ => {}
            }
            *state = found.map_or(StreamState::Absent, StreamState::Exists);
        }
        self.renames_read(listed)
    }

    /// A read after the process that might apply a rename in doubt: the stream is listed
    /// under exactly one of its two names, with its id.
    fn renames_read(&mut self, listed: &BTreeMap<String, u32>) -> Checked<()> {
        let epoch = self.epoch;
        let (pending, resolved): (Vec<_>, Vec<_>) = std::mem::take(&mut self.renames)
            .into_iter()
            .partition(|(old, _, _)| self.streams.get(old) == Some(&StreamState::InDoubt(epoch)));
        self.renames = pending;
        for (old, new, id) in resolved {
            let found = [&old, &new].map(|n| listed.get(n).copied());
            if !matches!(found, [Some(got), None] | [None, Some(got)] if got == id) {
                return Err(violation(INV_META, format!("stream {id} renamed from {old} to {new} (in doubt): a read lists {old} as {:?} and {new} as {:?}, not exactly one of them with its id", found[0], found[1])));
            }
        }
        Ok(())
    }

    /// Renames in doubt and unresolved: each pair of names is one stream that exists.
    pub fn renames_in_doubt(&self) -> impl Iterator<Item = &(String, String, u32)> {
        self.renames.iter().filter(|(old, new, _)| {
            [old, new]
                .iter()
                .all(|n| matches!(self.streams.get(*n), Some(StreamState::InDoubt(_))))
        })
    }
}

/// A recovered log: every message was sent to this partition, each at most as often as it
/// was sent, each producer's messages in the order it sent them.
fn check_log(part: PartKey, log: &[u128], msgs: &BTreeMap<u128, Msg>) -> Checked<()> {
    let mut counts: BTreeMap<u128, u32> = BTreeMap::new();
    let mut last_of_producer: BTreeMap<u64, u64> = BTreeMap::new();
    for (offset, id) in log.iter().enumerate() {
        let Some(msg) = msgs.get(id).filter(|m| m.part == part) else {
            return Err(violation(
                INV_POLL,
                format!(
                    "partition {part:?}: offset {offset} holds {}, which no producer sent here",
                    id_text(*id)
                ),
            ));
        };
        let count = counts.entry(*id).or_default();
        *count += 1;
        if *count > msg.sends {
            return Err(violation(INV_POLL, format!("partition {part:?}: {} appears {count} times (at offset {offset}), sent {} times", id_text(*id), msg.sends)));
        }
        if msg.doubtful {
            // Allowed out of order: its lost attempt may have landed late (see `Msg`).
            continue;
        }
        let (producer, seq) = ((*id >> 64) as u64, *id as u64);
        let last = last_of_producer.entry(producer).or_insert(seq);
        if seq < *last {
            return Err(violation(INV_POLL, format!("partition {part:?}: producer {producer}'s message {seq} at offset {offset} follows its message {last} (out of order)")));
        }
        *last = seq;
    }
    Ok(())
}

/// Group members' partitions from one read of the group: no partition owned twice.
pub fn check_assignments(members: &[(u32, Vec<u32>)]) -> Checked<()> {
    let mut owner: BTreeMap<u32, u32> = BTreeMap::new();
    for (member, partitions) in members {
        for p in partitions {
            if let Some(other) = owner.insert(*p, *member) {
                return Err(violation(INV_GROUP, format!("partition {p} assigned to members {other} and {member} in one read of the group")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oracle() -> Oracle {
        let mut o = Oracle::default();
        o.parts.insert(
            (0, 0),
            PartModel {
                persisted: true,
                ..Default::default()
            },
        );
        o.parts.insert((1, 0), PartModel::default());
        o
    }

    fn id(producer: u128, seq: u128) -> u128 {
        (producer << 64) | seq
    }

    #[test]
    fn a_persisted_ack_lost_at_boot_is_caught_and_a_replicated_one_is_allowed() {
        let mut o = oracle();
        o.sending((0, 0), &[id(1, 1)]);
        o.sending((1, 0), &[id(1, 2)]);
        o.acked((0, 0), 0, &[id(1, 1)], 0).unwrap();
        o.acked((1, 0), 0, &[id(1, 2)], 0).unwrap();
        o.crashed(false);
        let scan = Scan {
            epoch: 1,
            parts: BTreeMap::new(),
        };
        let v = o.recovered(scan.clone(), false).unwrap_err();
        assert_eq!(v.invariant, INV_ACKED);
        let mut o2 = oracle();
        o2.sending((1, 0), &[id(1, 2)]);
        o2.acked((1, 0), 0, &[id(1, 2)], 0).unwrap();
        o2.crashed(false);
        o2.recovered(scan.clone(), false).unwrap();
        // After a graceful shutdown even a replicated ack must be there.
        let mut o3 = oracle();
        o3.sending((1, 0), &[id(1, 2)]);
        o3.acked((1, 0), 0, &[id(1, 2)], 0).unwrap();
        o3.crashed(false);
        assert!(o3.recovered(scan, true).is_err());
    }

    #[test]
    fn late_acks_and_recovered_replicated_data_lost_only_to_power() {
        // A late ack of a replicated message the next boot did not recover: not owed.
        let mut o = oracle();
        o.sending((1, 0), &[id(1, 1)]);
        o.crashed(false);
        let empty = Scan {
            epoch: 1,
            parts: BTreeMap::new(),
        };
        o.recovered(empty, false).unwrap();
        o.acked((1, 0), 0, &[id(1, 1)], 0).unwrap();
        assert!(o.parts[&(1, 0)].acked.is_empty(), "lost before it was owed");
        // A late persisted ack the next boot did not recover: caught.
        let mut o = oracle();
        o.sending((0, 0), &[id(1, 1)]);
        o.crashed(false);
        o.recovered(
            Scan {
                epoch: 1,
                parts: BTreeMap::new(),
            },
            false,
        )
        .unwrap();
        assert_eq!(
            o.acked((0, 0), 0, &[id(1, 1)], 0).unwrap_err().invariant,
            INV_ACKED
        );
        // Replicated data a boot recovered is lost later only to a power loss.
        let scan = |epoch, ids: Vec<u128>| Scan {
            epoch,
            parts: [((1, 0), ids)].into_iter().collect(),
        };
        for (power, lost_allowed) in [(false, false), (true, true)] {
            let mut o = oracle();
            o.sending((1, 0), &[id(1, 1)]);
            o.sending((1, 0), &[id(2, 1)]);
            o.acked((1, 0), 0, &[id(1, 1)], 0).unwrap();
            o.crashed(false);
            o.recovered(scan(1, vec![id(1, 1)]), false).unwrap();
            o.crashed(power);
            let judged = o.recovered(scan(2, vec![id(2, 1)]), false);
            assert_eq!(judged.is_ok(), lost_allowed, "power loss {power}");
            // A log that ends before it, rather than reusing the offset: the same rule.
            let mut o = oracle();
            o.sending((1, 0), &[id(1, 1)]);
            o.acked((1, 0), 0, &[id(1, 1)], 0).unwrap();
            o.crashed(false);
            o.recovered(scan(1, vec![id(1, 1)]), false).unwrap();
            o.crashed(power);
            let judged = o.recovered(scan(2, vec![]), false);
            assert_eq!(
                judged.is_ok(),
                lost_allowed,
                "shorter log, power loss {power}"
            );
        }
    }

    #[test]
    fn polls_judge_gaps_unsent_ids_payloads_and_rereads() {
        let mut o = oracle();
        o.sending((0, 0), &[id(1, 1), id(1, 2)]);
        o.acked((0, 0), 0, &[id(1, 1), id(1, 2)], 0).unwrap();
        o.polled(
            (0, 0),
            Some(0),
            true,
            &[(0, id(1, 1), true), (1, id(1, 2), true)],
            0,
        )
        .unwrap();
        let gap = o.polled((0, 0), Some(0), true, &[(1, id(1, 2), true)], 0);
        assert_eq!(gap.unwrap_err().invariant, INV_POLL);
        assert!(o
            .polled((0, 0), Some(0), true, &[(0, id(9, 9), true)], 0)
            .is_err());
        assert!(o
            .polled((0, 0), Some(0), true, &[(0, id(1, 1), false)], 0)
            .is_err());
        assert!(o
            .polled((0, 0), Some(0), true, &[(0, id(1, 2), true)], 0)
            .is_err());
        assert!(
            o.polled((0, 0), Some(1), true, &[], 0).is_err(),
            "skipped an ack"
        );
        // A reply of an earlier boot is judged on content only.
        o.crashed(false);
        o.polled((0, 0), Some(0), true, &[(0, id(1, 2), true)], 0)
            .unwrap();
    }

    #[test]
    fn a_recovered_log_holds_each_message_at_most_as_often_as_sent_in_order() {
        let mut msgs = BTreeMap::new();
        let msg = |sends, doubtful| Msg {
            part: (0, 0),
            sends,
            doubtful,
        };
        msgs.insert(id(1, 1), msg(2, false));
        msgs.insert(id(1, 2), msg(1, false));
        check_log((0, 0), &[id(1, 1), id(1, 1), id(1, 2)], &msgs).unwrap();
        assert!(check_log((0, 0), &[id(1, 2), id(1, 2)], &msgs).is_err());
        assert!(check_log((0, 0), &[id(1, 2), id(1, 1)], &msgs).is_err());
        // A message with a lost attempt may land late; the others keep their order.
        msgs.insert(id(1, 3), msg(2, true));
        check_log((0, 0), &[id(1, 1), id(1, 3), id(1, 2), id(1, 3)], &msgs).unwrap();
        assert!(check_log((0, 0), &[id(1, 3), id(1, 2), id(1, 1)], &msgs).is_err());
        assert!(check_log((1, 0), &[id(1, 1)], &msgs).is_err());
    }

    #[test]
    fn stream_reads_and_group_reads() {
        let mut o = oracle();
        o.streams.insert("a".into(), StreamState::Exists(3));
        o.streams.insert("b".into(), StreamState::InDoubt(0));
        o.streams.insert("c".into(), StreamState::InDoubt(1));
        o.epoch = 1;
        let mut listed = BTreeMap::new();
        listed.insert("a".to_string(), 3);
        o.streams_read(&listed).unwrap();
        assert_eq!(o.streams["b"], StreamState::Absent);
        // Sent in this epoch: it may still land, so a read does not decide it.
        assert_eq!(o.streams["c"], StreamState::InDoubt(1));
        listed.insert("b".to_string(), 4);
        assert!(o.streams_read(&listed).is_err());
        check_assignments(&[(1, vec![1, 2]), (2, vec![3])]).unwrap();
        assert!(check_assignments(&[(1, vec![1, 2]), (2, vec![2])]).is_err());
    }
}
