//! A group's Raft log and vote, on the `Env` disk (the metadata group's, and each
//! partition group's WAL).
//!
//! A group directory holds:
//! - `state`: one 128-byte record kept in ping-pong slots (`cairn_engine::slots`): the
//!   vote, the last committed and purged log ids, this replica's identity (cluster id and
//!   Raft id: member and incarnation, `crate::types::NodeId`) and the **synced position**: the segment being appended to and how many of its
//!   bytes are synced. It is rewritten after every append, truncation, purge and rotation.
//! - `log-<first index, 20 digits>`: segments of entries, each
//!   `[length u32][xxh3 u64 of index ++ body][index u64][body: the entry, MessagePack]`.
//!
//! Only each entry's place and log id stay in memory; entries are read back from their
//! segment when openraft asks for them (a partition group's entries are whole batches).
//!
//! Boot ([`LogStore::open`]) follows the partition log's rule (DESIGN §5): synced bytes that
//! fail verification are damage and refuse the boot; only bytes past the synced position
//! may be a torn tail, and whole valid records there (written and synced, the crash came
//! before the state record said so) are kept, the rest cut. Entries chain: consecutive
//! indexes, terms never decreasing.
//!
//! | found at boot | what it is | decision |
//! |---|---|---|
//! | no `state`, no other file | a new replica | a new incarnation, an empty log |
//! | no `state`, other files (segments, a snapshot) | the vote and the identity were lost | files set aside in `lost-<new Raft id>/`; a new incarnation, an empty log |
//! | `state` unreadable in both copies | damage | refuse |
//! | `state` of another cluster or member | not this replica's | refuse |
//! | a sealed segment (before the synced one) that does not verify whole | damage | refuse |
//! | the synced segment's first `synced` bytes do not verify | damage | refuse |
//! | bytes past `synced` | a tail | keep whole chained records (synced now), cut the rest |
//! | the synced segment missing, `synced` > 0 | synced bytes lost | refuse |
//! | segments after the synced one | left by a truncation or rotation the crash cut short | remove |
//! | segments before the synced one whose every entry is purged | left by a purge | remove |
//!
//! A replica that lost its vote must not vote again under the identity it voted with (it
//! could vote twice in one term, or for a log without what it had acknowledged): so the vote
//! and the identity live in one record, and losing the record makes a new replica, which
//! its peers do not count until an administrator adds it (`crate::types::NodeId`). The new
//! incarnation is recorded before the replica answers anyone.
//!
//! Ordering that makes the table hold: a truncation records the shorter synced position
//! before it cuts (a crash between keeps the longer log, a state the replica had synced);
//! a rotation creates the next segment and syncs the directory before the record names it;
//! a purge records the purged id before it removes segments.

use crate::types::{member_of, replica_id, show_id, LogId, MemberId, MetaConfig, NodeId, Vote};
use cairn_engine::env::{self, Env, OpenMode};
use cairn_engine::slots;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::{LogState, RaftLogReader};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use xxhash_rust::xxh3::xxh3_64;

type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, u64>;

/// A type configuration whose log this store keeps: every group of a node shares its ids,
/// terms and votes (so one state record layout serves them), and differs in what its
/// entries carry, which the store writes as MessagePack.
pub trait LogTypes:
    openraft::RaftTypeConfig<
    NodeId = NodeId,
    Term = u64,
    LeaderId = LeaderId,
    Vote = Vote,
    Entry: serde::Serialize + serde::de::DeserializeOwned,
>
{
    /// The longest entry body this group's log takes.
    const MAX_ENTRY_LEN: usize;
}

impl LogTypes for MetaConfig {
    const MAX_ENTRY_LEN: usize = MAX_ENTRY_LEN;
}

type EntryOf<C> = <C as openraft::RaftTypeConfig>::Entry;

pub const STATE_FILE: &str = "state";
const SEGMENT_PREFIX: &str = "log-";
/// A segment is sealed and the next one begun once it holds this many bytes.
pub const SEGMENT_BYTES: u64 = 4 << 20;
/// The longest entry body of the metadata group: an operation's body is at most 256 KiB.
pub const MAX_ENTRY_LEN: usize = 1 << 20;
const RECORD_HEADER: usize = 20;
const STATE_MAGIC: &[u8; 4] = b"CRFT";
/// Version 2: the node field holds the Raft id (member and incarnation), not the member.
const STATE_VERSION: u16 = 2;

/// The durable facts of the state record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Durable {
    sequence: u64,
    cluster: u128,
    node: u64,
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    /// The segment appended to (its first index) and its synced length.
    segment: u64,
    synced: u64,
}

fn put_log_id(out: &mut Vec<u8>, id: Option<LogId>) {
    let id = id.unwrap_or_else(|| {
        LogId::new(
            LeaderId {
                term: 0,
                node_id: 0,
            },
            0,
        )
    });
    out.extend_from_slice(&id.leader_id.term.to_le_bytes());
    out.extend_from_slice(&id.leader_id.node_id.to_le_bytes());
    out.extend_from_slice(&id.index.to_le_bytes());
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Durable {
    /// `magic 4 | version u16 | flags u16 | sequence u64 | cluster u128 | node u64 |
    /// vote term u64 | vote node u64 | committed (term, node, index) | purged (term, node,
    /// index) | segment u64 | synced u64 | xxh3 u64 of the 120 bytes before`.
    fn encode(&self) -> [u8; slots::RECORD_LEN] {
        let flags = u16::from(self.vote.is_some())
            | u16::from(self.vote.is_some_and(|v| v.committed)) << 1
            | u16::from(self.committed.is_some()) << 2
            | u16::from(self.purged.is_some()) << 3;
        let mut out = Vec::with_capacity(slots::RECORD_LEN);
        out.extend_from_slice(STATE_MAGIC);
        out.extend_from_slice(&STATE_VERSION.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.sequence.to_le_bytes());
        out.extend_from_slice(&self.cluster.to_le_bytes());
        out.extend_from_slice(&self.node.to_le_bytes());
        let vote = self
            .vote
            .map_or((0, 0), |v| (v.leader_id.term, v.leader_id.node_id));
        out.extend_from_slice(&vote.0.to_le_bytes());
        out.extend_from_slice(&vote.1.to_le_bytes());
        put_log_id(&mut out, self.committed);
        put_log_id(&mut out, self.purged);
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.extend_from_slice(&self.synced.to_le_bytes());
        assert_eq!(
            out.len(),
            slots::RECORD_LEN - 8,
            "the state record's layout"
        );
        let checksum = xxh3_64(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out.try_into().expect("128 bytes")
    }

    fn decode(b: &[u8; slots::RECORD_LEN]) -> Result<Durable, String> {
        if &b[..4] != STATE_MAGIC {
            return Err("not a Raft state record (magic)".into());
        }
        if xxh3_64(&b[..120]) != u64_at(b, 120) {
            return Err("checksum mismatch".into());
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != STATE_VERSION {
            return Err(format!("version {version}, expected {STATE_VERSION}"));
        }
        let flags = u16::from_le_bytes([b[6], b[7]]);
        let log_id = |at: usize| {
            LogId::new(
                LeaderId {
                    term: u64_at(b, at),
                    node_id: u64_at(b, at + 8),
                },
                u64_at(b, at + 16),
            )
        };
        let vote = (flags & 1 != 0).then(|| {
            let mut v = Vote::new(u64_at(b, 40), u64_at(b, 48));
            v.committed = flags & 2 != 0;
            v
        });
        Ok(Durable {
            sequence: u64_at(b, 8),
            cluster: u128::from_le_bytes(b[16..32].try_into().expect("16 bytes")),
            node: u64_at(b, 32),
            vote,
            committed: (flags & 4 != 0).then(|| log_id(56)),
            purged: (flags & 8 != 0).then(|| log_id(80)),
            segment: u64_at(b, 104),
            synced: u64_at(b, 112),
        })
    }
}

/// Why a group's log refused to open.
#[derive(Debug, thiserror::Error)]
pub enum LogOpenError {
    #[error("the Raft state record {path} is unreadable: {why}")]
    StateDamaged { path: PathBuf, why: String },
    #[error("the Raft state in {path} belongs to cluster {found_cluster:032x} member {}, not cluster {cluster:032x} member {member}", member_of(*found_node))]
    NotThisReplica {
        path: PathBuf,
        cluster: u128,
        member: MemberId,
        found_cluster: u128,
        found_node: NodeId,
    },
    #[error("synced log bytes of {path} fail verification at offset {offset}: {why}")]
    Damaged {
        path: PathBuf,
        offset: u64,
        why: String,
    },
    #[error("I/O on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// One entry's place on disk, and its log id.
#[derive(Debug, Clone, Copy)]
struct Place {
    segment: u64,
    offset: u64,
    /// The record's length, header included.
    len: u64,
    log_id: LogId,
}

struct Inner<C: LogTypes> {
    env: Env,
    dir: PathBuf,
    durable: Durable,
    /// Where every entry not purged is (read back from disk when asked for: a partition
    /// group's entries are whole batches, too many to hold).
    places: BTreeMap<u64, Place>,
    entry: std::marker::PhantomData<fn() -> C>,
    /// The segments on disk, by first index.
    segments: Vec<u64>,
    /// Where boot set aside the files of a replica that had lost its state record.
    set_aside: Option<PathBuf>,
}

/// A group's log storage ([`openraft::storage::RaftLogStorage`]); clones share it.
pub struct LogStore<C: LogTypes = MetaConfig> {
    inner: Arc<Mutex<Inner<C>>>,
}

impl<C: LogTypes> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore {
            inner: self.inner.clone(),
        }
    }
}

fn segment_name(first: u64) -> String {
    format!("{SEGMENT_PREFIX}{first:020}")
}

/// Encodes one entry as a record.
fn encode_record<C: LogTypes>(entry: &EntryOf<C>) -> io::Result<Vec<u8>> {
    let body = rmp_serde::to_vec(entry).map_err(io::Error::other)?;
    if body.len() > C::MAX_ENTRY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a log entry of {} bytes (at most {})",
                body.len(),
                C::MAX_ENTRY_LEN
            ),
        ));
    }
    let index = entry.index();
    let mut summed = Vec::with_capacity(8 + body.len());
    summed.extend_from_slice(&index.to_le_bytes());
    summed.extend_from_slice(&body);
    let mut out = Vec::with_capacity(RECORD_HEADER + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&xxh3_64(&summed).to_le_bytes());
    out.extend_from_slice(&summed);
    Ok(out)
}

/// Where the records of a segment stop decoding, and why.
type Stop = Option<(u64, String)>;

/// The records of `bytes` from the start, each `(offset, length, entry)`, up to the first
/// that does not decode, with why it did not (`None` when the bytes end on a record
/// boundary).
fn decode_records<C: LogTypes>(bytes: &[u8]) -> (Vec<(u64, u64, EntryOf<C>)>, Stop) {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let fail = |why: &str| Some((at as u64, why.to_owned()));
        if bytes.len() - at < RECORD_HEADER {
            return (out, fail("a partial record header"));
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4")) as usize;
        if len > C::MAX_ENTRY_LEN || bytes.len() - at - RECORD_HEADER < len {
            return (out, fail("a record longer than what follows it"));
        }
        let summed = &bytes[at + 12..at + RECORD_HEADER + len];
        if xxh3_64(summed) != u64_at(bytes, at + 4) {
            return (out, fail("a record whose checksum does not match"));
        }
        let index = u64_at(bytes, at + 12);
        let entry: EntryOf<C> = match rmp_serde::from_slice(&summed[8..]) {
            Ok(e) => e,
            Err(_) => return (out, fail("a record whose entry does not decode")),
        };
        if entry.index() != index {
            return (out, fail("a record whose entry is not at its index"));
        }
        out.push((at as u64, (RECORD_HEADER + len) as u64, entry));
        at += RECORD_HEADER + len;
    }
    (out, None)
}

impl<C: LogTypes> LogStore<C> {
    /// Opens (or creates) the log of `member`'s replica of cluster `cluster` in `dir`, by
    /// the table in the module doc; a new replica's incarnation is drawn from the `Env`'s
    /// entropy.
    pub async fn open(
        env: &Env,
        dir: &Path,
        cluster: u128,
        member: MemberId,
    ) -> Result<LogStore<C>, LogOpenError> {
        LogStore::open_drawing(env, dir, cluster, member, None).await
    }

    /// [`LogStore::open`], with a new replica's incarnation drawn by `draw` if given (the
    /// simulator's hook; production draws at random).
    pub async fn open_drawing(
        env: &Env,
        dir: &Path,
        cluster: u128,
        member: MemberId,
        draw: Option<&(dyn Fn(MemberId) -> u32 + Send + Sync)>,
    ) -> Result<LogStore<C>, LogOpenError> {
        let span = tracing::info_span!("open_raft_log", dir = %dir.display());
        let _entered = span.enter();
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| LogOpenError::Io { path, source }
        };
        env.disk.create_dir_all(dir).map_err(io(dir))?;
        // Every name down to the group's directory durable: a power loss must not take the
        // directory (and the replica's vote with it) back to before it existed.
        for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            env.disk.sync_dir(ancestor).map_err(io(ancestor))?;
        }
        let listing = env.disk.read_dir(dir).map_err(io(dir))?;
        let mut segments: Vec<u64> = listing
            .iter()
            .filter_map(|e| e.name.strip_prefix(SEGMENT_PREFIX)?.parse().ok())
            .collect();
        segments.sort_unstable();
        let state_path = dir.join(STATE_FILE);
        let mut set_aside = None;
        let durable = match slots::read(&*env.disk, dir, &listing, STATE_FILE) {
            slots::SlotBytes::Missing => {
                let incarnation = match draw {
                    Some(draw) => draw(member),
                    None => draw_incarnation(env),
                };
                let id = replica_id(member, incarnation);
                set_aside = set_aside_leftovers(env, dir, &listing, id)?;
                if set_aside.is_some() {
                    segments.clear();
                }
                let fresh = Durable {
                    cluster,
                    node: id,
                    ..Durable::default()
                };
                slots::create(&*env.disk, &state_path, &fresh.encode()).map_err(io(&state_path))?;
                env.disk.sync_dir(dir).map_err(io(dir))?;
                tracing::info!(replica = %show_id(id), set_aside = ?set_aside, "a new replica");
                fresh
            }
            slots::SlotBytes::Unreadable(why) => {
                return Err(LogOpenError::StateDamaged {
                    path: state_path,
                    why,
                })
            }
            slots::SlotBytes::Oversized { len } => {
                return Err(LogOpenError::StateDamaged {
                    path: state_path,
                    why: format!("{len} bytes"),
                })
            }
            slots::SlotBytes::Copies(copies) => {
                let decoded: Vec<_> = copies
                    .iter()
                    .map(|c| c.as_ref().map_err(Clone::clone).and_then(Durable::decode))
                    .collect();
                match decoded
                    .iter()
                    .filter_map(|d| d.as_ref().ok())
                    .max_by_key(|d| d.sequence)
                {
                    Some(d) => *d,
                    None => {
                        let why = decoded
                            .iter()
                            .filter_map(|d| d.as_ref().err().cloned())
                            .collect::<Vec<_>>()
                            .join("; ");
                        return Err(LogOpenError::StateDamaged {
                            path: state_path,
                            why,
                        });
                    }
                }
            }
        };
        if durable.cluster != cluster || member_of(durable.node) != member {
            return Err(LogOpenError::NotThisReplica {
                path: state_path,
                cluster,
                member,
                found_cluster: durable.cluster,
                found_node: durable.node,
            });
        }
        let mut inner = Inner {
            env: env.clone(),
            dir: dir.to_owned(),
            durable,
            places: BTreeMap::new(),
            entry: std::marker::PhantomData,
            segments: Vec::new(),
            set_aside,
        };
        inner.load(&segments)?;
        drop(_entered);
        env::settle(env).await;
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<C>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn settle(&self) {
        let env = self.lock().env.clone();
        env::settle(&env).await;
    }

    /// This replica's Raft id (its member and the incarnation of its storage).
    pub fn id(&self) -> NodeId {
        self.lock().durable.node
    }

    /// Where boot set aside the files of a replica that had lost its state record (the new
    /// replica started empty beside them).
    pub fn set_aside(&self) -> Option<PathBuf> {
        self.lock().set_aside.clone()
    }

    /// The vote and the log's ends, as stored (the simulator's checks read them).
    pub fn summary(&self) -> (Option<Vote>, Option<LogId>, Option<LogId>) {
        let inner = self.lock();
        let last = inner.places.values().next_back().map(|p| p.log_id);
        (
            inner.durable.vote,
            inner.durable.purged,
            last.or(inner.durable.purged),
        )
    }
}

/// A new replica's incarnation: random and never 0. Random, not counted: a wiped disk
/// remembers no counter, and a replica must never come back under an identity it had.
fn draw_incarnation(env: &Env) -> u32 {
    loop {
        let drawn = env.entropy.next_u64() as u32;
        if drawn != 0 {
            return drawn;
        }
    }
}

/// Moves the files a replica without a state record left in `dir` (segments, a snapshot)
/// into `dir/lost-<new replica's id>/`, for an operator to inspect; `None` if there were
/// none. A crash part-way leaves the rest for the next boot, which sets them aside again.
fn set_aside_leftovers(
    env: &Env,
    dir: &Path,
    listing: &[env::DirEntry],
    id: NodeId,
) -> Result<Option<PathBuf>, LogOpenError> {
    let temp = format!("{STATE_FILE}.tmp");
    let files: Vec<&str> = listing
        .iter()
        .filter(|e| !e.is_dir && e.name != temp)
        .map(|e| e.name.as_str())
        .collect();
    if files.is_empty() {
        return Ok(None);
    }
    let lost = dir.join(format!("lost-{id:016x}"));
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| LogOpenError::Io { path, source }
    };
    env.disk.create_dir_all(&lost).map_err(io(&lost))?;
    env.disk.sync_dir(dir).map_err(io(dir))?;
    for name in &files {
        let from = dir.join(name);
        env.disk
            .rename(&from, &lost.join(name))
            .map_err(io(&from))?;
    }
    env.disk.sync_dir(&lost).map_err(io(&lost))?;
    env.disk.sync_dir(dir).map_err(io(dir))?;
    tracing::warn!(dir = %dir.display(), lost = %lost.display(), files = files.len(),
        "the Raft state record is missing: this replica's files are set aside and it starts as a new replica");
    Ok(Some(lost))
}

impl<C: LogTypes> Inner<C> {
    fn segment_path(&self, first: u64) -> PathBuf {
        self.dir.join(segment_name(first))
    }

    /// Loads the segments by the module doc's table.
    fn load(&mut self, segments: &[u64]) -> Result<(), LogOpenError> {
        let disk = self.env.disk.clone();
        let purged_index = self.durable.purged.map(|p| p.index);
        for (i, &first) in segments.iter().enumerate() {
            let path = self.segment_path(first);
            let io = |source| LogOpenError::Io {
                path: path.clone(),
                source,
            };
            // Only segments up to the synced one count: one after it is a leftover, and the
            // synced segment itself is never "all purged" (appends go there).
            let next_first = segments
                .get(i + 1)
                .copied()
                .filter(|&n| n <= self.durable.segment);
            let all_purged = first < self.durable.segment
                && matches!((next_first, purged_index), (Some(n), Some(p)) if n <= p + 1);
            if first > self.durable.segment || all_purged {
                disk.remove_file(&path).map_err(io)?;
                continue;
            }
            let file = disk.open(&path, OpenMode::ReadWrite).map_err(io)?;
            let len = file.len().map_err(io)?;
            let mut bytes = vec![0u8; len as usize];
            file.read_exact_at(&mut bytes, 0).map_err(io)?;
            let synced = if first == self.durable.segment {
                self.durable.synced
            } else {
                len
            };
            if synced > len {
                return Err(LogOpenError::Damaged {
                    path,
                    offset: len,
                    why: format!("{synced} bytes were synced, the file has {len}"),
                });
            }
            let (records, stop) = decode_records::<C>(&bytes);
            let mut end = len;
            if let Some((offset, why)) = stop {
                if offset < synced {
                    return Err(LogOpenError::Damaged { path, offset, why });
                }
                end = offset;
            }
            for (offset, len, entry) in records {
                if offset >= end {
                    break;
                }
                if purged_index.is_some_and(|p| entry.index() <= p) {
                    continue;
                }
                if let Some(why) = self.breaks_chain(&entry) {
                    if offset < synced {
                        return Err(LogOpenError::Damaged { path, offset, why });
                    }
                    end = offset;
                    break;
                }
                self.places.insert(
                    entry.index(),
                    Place {
                        segment: first,
                        offset,
                        len,
                        log_id: entry.log_id(),
                    },
                );
            }
            if end < len {
                tracing::info!(path = %path.display(), from = end, to = len, "cut the log's torn tail");
                file.set_len(end).map_err(io)?;
                file.sync_data().map_err(io)?;
            }
            if first == self.durable.segment && end > self.durable.synced {
                // Whole records past the synced position may be only in the page cache (a
                // process crash between their write and their sync): synced now, before the
                // state record says they are, so openraft may count them as flushed.
                file.sync_data().map_err(io)?;
                self.durable.synced = end;
            }
            self.segments.push(first);
        }
        if self.segments.last() != Some(&self.durable.segment) {
            // The synced segment is missing: only a log with nothing synced in it may lack
            // it (a rotation's new segment whose creation a crash undid, or a new log).
            if self.durable.synced > 0 {
                return Err(LogOpenError::Damaged {
                    path: self.segment_path(self.durable.segment),
                    offset: 0,
                    why: format!(
                        "the segment is missing, {} bytes of it were synced",
                        self.durable.synced
                    ),
                });
            }
            let first = self.durable.segment;
            self.create_segment(first)
                .map_err(|source| LogOpenError::Io {
                    path: self.segment_path(first),
                    source,
                })?;
        }
        disk.sync_dir(&self.dir)
            .map_err(|source| LogOpenError::Io {
                path: self.dir.clone(),
                source,
            })?;
        self.write_state().map_err(|source| LogOpenError::Io {
            path: self.dir.join(STATE_FILE),
            source,
        })
    }

    /// Why `entry` cannot follow the loaded entries: not the next index, or an older term.
    fn breaks_chain(&self, entry: &EntryOf<C>) -> Option<String> {
        let last = self
            .places
            .values()
            .next_back()
            .map(|p| p.log_id)
            .or(self.durable.purged);
        let expected = last.map_or(entry.index(), |l| l.index + 1);
        if entry.index() != expected {
            return Some(format!(
                "entry {} where {expected} was expected",
                entry.index()
            ));
        }
        let term = entry.log_id().leader_id.term;
        match last {
            Some(l) if l.leader_id.term > term => Some(format!(
                "entry {} of term {term} after term {}",
                entry.index(),
                l.leader_id.term
            )),
            _ => None,
        }
    }

    fn create_segment(&mut self, first: u64) -> io::Result<()> {
        let path = self.segment_path(first);
        self.env
            .disk
            .open(&path, OpenMode::CreateOrOpen)?
            .set_len(0)?;
        self.env.disk.sync_dir(&self.dir)?;
        if !self.segments.contains(&first) {
            self.segments.push(first);
        }
        Ok(())
    }

    fn write_state(&mut self) -> io::Result<()> {
        self.durable.sequence += 1;
        slots::write(
            &*self.env.disk,
            &self.dir.join(STATE_FILE),
            &self.durable.encode(),
        )
    }

    /// Appends `entries` with one sync per segment they reach (group commit: openraft hands
    /// over everything that arrived since its last append), then records the new end.
    fn append(&mut self, entries: Vec<EntryOf<C>>) -> io::Result<()> {
        let mut unsynced: Option<Box<dyn env::DiskFile>> = None;
        for entry in entries {
            assert!(
                self.breaks_chain(&entry).is_none(),
                "openraft appends the next index: {:?}",
                self.breaks_chain(&entry)
            );
            if self.durable.synced >= SEGMENT_BYTES {
                // The full segment's bytes are synced before the record names the next one.
                if let Some(file) = unsynced.take() {
                    file.sync_data()?;
                }
                let first = entry.index();
                self.create_segment(first)?;
                self.durable.segment = first;
                self.durable.synced = 0;
                self.write_state()?;
            }
            let record = encode_record::<C>(&entry)?;
            let file = match unsynced.take() {
                Some(file) => file,
                None => {
                    let path = self.segment_path(self.durable.segment);
                    self.env.disk.open(&path, OpenMode::ReadWrite)?
                }
            };
            file.write_all_at(&[io::IoSlice::new(&record)], self.durable.synced)?;
            unsynced = Some(file);
            let place = Place {
                segment: self.durable.segment,
                offset: self.durable.synced,
                len: record.len() as u64,
                log_id: entry.log_id(),
            };
            self.durable.synced += record.len() as u64;
            self.places.insert(entry.index(), place);
        }
        if let Some(file) = unsynced {
            file.sync_data()?;
        }
        self.write_state()
    }

    fn truncate_after(&mut self, last: Option<LogId>) -> io::Result<()> {
        let from = last.map_or(0, |l| l.index + 1);
        let Some(&place) = self.places.get(&from) else {
            return Ok(());
        };
        // Record the shorter log first (module doc: a crash keeps the longer one).
        self.durable.segment = place.segment;
        self.durable.synced = place.offset;
        self.write_state()?;
        let file = self
            .env
            .disk
            .open(&self.segment_path(place.segment), OpenMode::ReadWrite)?;
        file.set_len(place.offset)?;
        file.sync_data()?;
        for later in self
            .segments
            .clone()
            .into_iter()
            .filter(|&s| s > place.segment)
        {
            self.env.disk.remove_file(&self.segment_path(later))?;
            self.segments.retain(|&s| s != later);
        }
        self.places.split_off(&from);
        Ok(())
    }

    fn purge(&mut self, upto: LogId) -> io::Result<()> {
        assert!(
            self.durable.purged.is_none_or(|p| p.index <= upto.index),
            "purges only move forward"
        );
        self.durable.purged = Some(upto);
        self.write_state()?;
        self.places = self.places.split_off(&(upto.index + 1));
        // A segment goes once the next one begins at or before the first kept index.
        let segments = self.segments.clone();
        for pair in segments.windows(2) {
            if pair[1] <= upto.index + 1 {
                self.env.disk.remove_file(&self.segment_path(pair[0]))?;
                self.segments.retain(|&s| s != pair[0]);
            }
        }
        Ok(())
    }

    /// The entries in `range`, read back from their segments.
    fn range(&self, range: (Bound<u64>, Bound<u64>)) -> io::Result<Vec<EntryOf<C>>> {
        let mut open: Option<(u64, Box<dyn env::DiskFile>)> = None;
        let mut out = Vec::new();
        for (&index, place) in self.places.range(range) {
            if open.as_ref().map(|(s, _)| *s) != Some(place.segment) {
                let path = self.segment_path(place.segment);
                open = Some((place.segment, self.env.disk.open(&path, OpenMode::Read)?));
            }
            let (_, file) = open.as_ref().expect("opened above");
            let mut bytes = vec![0u8; place.len as usize];
            file.read_exact_at(&mut bytes, place.offset)?;
            let (mut records, stop) = decode_records::<C>(&bytes);
            match (records.pop(), stop) {
                (Some((0, _, entry)), None) if entry.index() == index => out.push(entry),
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "entry {index} in {} at {} does not read back",
                            self.segment_path(place.segment).display(),
                            place.offset
                        ),
                    ))
                }
            }
        }
        Ok(out)
    }
}

fn bounds<RB: RangeBounds<u64>>(range: &RB) -> (Bound<u64>, Bound<u64>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

impl<C: LogTypes> RaftLogReader<C> for LogStore<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<EntryOf<C>>> {
        self.lock().range(bounds(&range))
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        Ok(self.lock().durable.vote)
    }
}

impl<C: LogTypes> openraft::storage::RaftLogStorage<C> for LogStore<C> {
    type LogReader = LogStore<C>;

    async fn get_log_state(&mut self) -> io::Result<LogState<C>> {
        let inner = self.lock();
        let last = inner.places.values().next_back().map(|p| p.log_id);
        Ok(LogState {
            last_purged_log_id: inner.durable.purged,
            last_log_id: last.or(inner.durable.purged),
        })
    }

    async fn get_log_reader(&mut self) -> LogStore<C> {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let written = {
            let mut inner = self.lock();
            inner.durable.vote = Some(*vote);
            inner.write_state()
        };
        self.settle().await;
        written
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        // Kept in memory and recorded with the next state write: a committed id that lags
        // the truth only makes boot re-apply less before the leader says more.
        self.lock().durable.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self.lock().durable.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> io::Result<()>
    where
        I: IntoIterator<Item = EntryOf<C>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<EntryOf<C>> = entries.into_iter().collect();
        let written = self.lock().append(entries);
        self.settle().await;
        match written {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> io::Result<()> {
        let done = self.lock().truncate_after(last);
        self.settle().await;
        done
    }

    async fn purge(&mut self, upto: LogId) -> io::Result<()> {
        let done = self.lock().purge(upto);
        self.settle().await;
        done
    }
}

#[cfg(test)]
pub(crate) mod tests;
