//! Boots and crashes of the server's process: the node's and the server's settings, a
//! boot (retried while an armed crash strikes inside it) judged before the server listens
//! again (every partition scanned through the node and held against the oracle, the
//! metadata checked against the view), the process going down (a crash or a power loss,
//! with the network's view of it), and the setup of the workload's topology.

use super::oracle::{self, PartKey, PartModel, Scan};
use super::{
    actors, lock, Down, Phase, ServerProfile, ServerWorld, Shared, DATA_DIR, MAX_BOOT_ATTEMPTS,
    ROOT_PASSWORD, ROOT_USER, SERVER_ADDR, SERVER_GROUP, SERVER_IP, STREAM, TOPICS,
};
use crate::env::MAX_EPOCH_POLLS;
use crate::executor::{Executor, ExecutorHandle};
use crate::report::{violation, Violation, INV_LIVENESS};
use crate::timeline::{LaneKind, MarkKind};
use cairn_engine::node::{Node, NodeLimits, NodeSettings, PasswordCost};
use cairn_server::{Server, ServerLimits, ServerSettings, TopicDefaults};
use rand::Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn node_settings(profile: &ServerProfile) -> NodeSettings {
    NodeSettings {
        password_cost: PasswordCost::CHEAP,
        root_username: ROOT_USER.into(),
        root_password: ROOT_PASSWORD.into(),
        shards: profile.shards,
        limits: NodeLimits {
            in_flight_per_client: 4,
            journal_bytes: 64 << 20,
            ..NodeLimits::default()
        },
        hooks: crate::canary::node_hooks(),
        partition: cairn_engine::config::PartitionSettings {
            pipeline_records: profile.pipeline_records,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn server_settings(profile: &ServerProfile) -> ServerSettings {
    ServerSettings {
        address: SERVER_ADDR,
        limits: ServerLimits {
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(5),
            buffered_bytes: match profile.hostile.buffered_bytes {
                0 => ServerLimits::default().buffered_bytes,
                small => small,
            },
            ..ServerLimits::default()
        },
        topic_defaults: TopicDefaults {
            messages_required_to_save: profile.messages_required_to_save,
            size_of_messages_required_to_save: 1 << 20,
            replication_factor: None,
        },
        tls: None,
        hooks: crate::canary::server_hooks(),
    }
}

/// Runs `future` on the executor (the clients run meanwhile) until it finishes; `None` if
/// the run stalled first.
pub(crate) fn block<T: Send + 'static>(
    executor: &mut Executor,
    tasks: &ExecutorHandle,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    executor.block_on(tasks, MAX_EPOCH_POLLS, future)
}

/// Boots the node on the disk as it is, scans what it recovered, then starts the server.
/// A crash armed before it (see `go_down`) that strikes inside the boot kills that process;
/// the next attempt boots again.
pub(crate) fn boot(
    world: &Shared,
    executor: &mut Executor,
    graceful: bool,
) -> Result<(), Violation> {
    for attempt in 0..MAX_BOOT_ATTEMPTS {
        let (env, settings, profile, handle) = {
            let w = lock(world);
            (
                w.server_env.clone(),
                node_settings(&w.profile),
                w.profile.clone(),
                w.clients.in_group(SERVER_GROUP),
            )
        };
        let started = block(executor, &handle, async move {
            let booted = Node::start(&env, Path::new(DATA_DIR), settings)
                .await
                .map_err(|e| e.to_string())?;
            let scan = scan(&booted.node).await;
            Ok::<_, String>((booted.node, scan))
        });
        let crashed = lock(world).disk.is_crashed();
        match started {
            Some(Ok((node, scan))) if !crashed => {
                let scan = scan
                    .map_err(|e| violation(INV_LIVENESS, format!("the boot scan failed: {e}")))?;
                {
                    let mut w = lock(world);
                    let epoch = w.oracle.epoch;
                    let parts = scan_parts(&w, &scan);
                    w.oracle.recovered(Scan { epoch, parts }, graceful)?;
                    check_metadata(&mut w, &node)?;
                    w.event(format!("boot {epoch}: recovered and judged"));
                }
                let settings = server_settings(&profile);
                let server = block(executor, &handle, async move {
                    Server::start(node, settings).await
                });
                match server {
                    Some(Ok(server)) => {
                        let mut w = lock(world);
                        let epoch = w.oracle.epoch;
                        assert!(
                            w.boot_sessions
                                .last()
                                .is_none_or(|(s, _)| *s < server.started_at()),
                            "session numbers grow across boots"
                        );
                        w.boot_sessions.push((server.started_at(), epoch));
                        w.records_at_boot = w.disk.record_count();
                        w.server = Some(Arc::new(server));
                        let label = format!("boot {}", w.oracle.epoch);
                        w.mark("node", LaneKind::Node, MarkKind::Boot, label);
                        return Ok(());
                    }
                    other => {
                        let why = other.map_or("stalled".to_string(), |r| format!("{:?}", r.err()));
                        return Err(violation(
                            INV_LIVENESS,
                            format!("the server did not start: {why}"),
                        ));
                    }
                }
            }
            Some(Err(e)) if !crashed => {
                return Err(violation(
                    INV_LIVENESS,
                    format!("boot {attempt} refused with no damaging fault in this scope: {e}"),
                ));
            }
            None if !crashed => return Err(violation(INV_LIVENESS, "boot stalled".into())),
            _ => {
                // The boot itself crashed: that process is gone too.
                let mut w = lock(world);
                w.event(format!("boot attempt {attempt} crashed"));
                w.report.crashes_in_recovery += 1;
                executor.kill_group(SERVER_GROUP);
                w.disk.process_crash();
                w.disk.cancel_crashes();
            }
        }
    }
    Err(violation(
        INV_LIVENESS,
        format!("no boot completed in {MAX_BOOT_ATTEMPTS} attempts"),
    ))
}

/// Every partition of the workload's topics, read whole from the recovered node: (topic,
/// partition) → the ids at offsets 0.. (and whether each payload was the one sent).
async fn scan(node: &Node) -> Result<BTreeMap<(String, u32), Vec<(u128, bool)>>, String> {
    use iggy_binary_protocol::requests::messages::PollMessagesRequest;
    use iggy_binary_protocol::{WireConsumer, WireIdentifier, WirePollingStrategy};
    let client = node.client(u128::MAX);
    let mut out = BTreeMap::new();
    let view = node.view();
    let Some(stream) = view.streams().values().find(|s| s.name == STREAM) else {
        return Ok(out);
    };
    for topic in stream.topics.values() {
        for p in 0..topic.partitions.len() as u32 {
            let mut all = Vec::new();
            loop {
                let request = PollMessagesRequest {
                    consumer: WireConsumer::consumer(WireIdentifier::numeric(1)),
                    stream_id: WireIdentifier::numeric(stream.id),
                    topic_id: WireIdentifier::numeric(topic.id),
                    partition_id: Some(p),
                    strategy: WirePollingStrategy::offset(all.len() as u64),
                    count: 1000,
                    auto_commit: false,
                };
                let polled = client
                    .poll(&request)
                    .await
                    .map_err(|e| format!("{}/{p}: {e}", topic.name))?
                    .ok_or_else(|| format!("{}/{p}: no partition", topic.name))?;
                let messages =
                    crate::partition_world::decode(&polled, true).map_err(|v| v.to_string())?;
                if messages.is_empty() {
                    break;
                }
                for m in messages {
                    if m.offset != all.len() as u64 {
                        return Err(format!(
                            "{}/{p}: offset {} at position {}",
                            topic.name,
                            m.offset,
                            all.len()
                        ));
                    }
                    all.push((m.id, m.payload == actors::payload(m.id, m.payload.len())));
                }
            }
            out.insert((topic.name.clone(), p), all);
        }
    }
    Ok(out)
}

fn scan_parts(
    w: &ServerWorld,
    scan: &BTreeMap<(String, u32), Vec<(u128, bool)>>,
) -> BTreeMap<PartKey, Vec<u128>> {
    let mut parts = BTreeMap::new();
    for ((topic, p), messages) in scan {
        let Some(t) = TOPICS.iter().position(|(name, _)| name == topic) else {
            continue;
        };
        if !w.oracle.parts.contains_key(&(t, *p)) {
            continue;
        }
        parts.insert((t, *p), messages.iter().map(|(id, _)| *id).collect());
    }
    parts
}

/// After a boot: the scratch streams and users as the recovered view holds them.
fn check_metadata(w: &mut ServerWorld, node: &Node) -> Result<(), Violation> {
    let view = node.view();
    let listed: BTreeMap<String, u32> = view
        .streams()
        .values()
        .filter(|s| s.name != STREAM)
        .map(|s| (s.name.clone(), s.id))
        .collect();
    w.oracle.streams_read(&listed)?;
    for name in w.oracle.live_users.keys() {
        if !w.oracle.users_in_doubt.contains(name) && view.user_by_name(name).is_none() {
            return Err(violation(
                oracle::INV_META,
                format!("user {name} was created (acknowledged), the recovered view lacks it"),
            ));
        }
    }
    for name in w.oracle.deleted_users.keys() {
        if !w.oracle.users_in_doubt.contains(name) && view.user_by_name(name).is_some() {
            return Err(violation(
                oracle::INV_META,
                format!("user {name} was deleted (acknowledged), the recovered view holds it"),
            ));
        }
    }
    Ok(())
}

/// The server's process goes down: power off (its connections freeze half-open) or a
/// process crash (they close), its tasks die, the disk keeps what the fault keeps.
pub(crate) fn go_down(world: &Shared, executor: &mut Executor, down: Down) {
    let mut w = lock(world);
    // The restart would erase a stop's evidence: judged before it, as liveness judges it.
    if w.node_stopped() == Some(false) {
        w.fail(violation(
            INV_LIVENESS,
            "the node stopped, with no fault to blame (no I/O error, no disk crash this process), before the server went down".into(),
        ));
    }
    w.restarts += 1;
    w.report.restarts += 1;
    let power = down == Down::PowerLoss;
    if power {
        w.net.power_off(SERVER_IP);
        w.power_lost_at = Some(w.now());
    }
    executor.kill_group(SERVER_GROUP);
    w.server = None;
    if power {
        w.disk.power_loss();
        w.event("fault power loss");
        w.mark(
            "node",
            LaneKind::Node,
            MarkKind::PowerLoss,
            "power loss".into(),
        );
    } else {
        w.disk.process_crash();
        w.event("fault process crash");
        w.mark(
            "node",
            LaneKind::Node,
            MarkKind::ProcessCrash,
            "process crash".into(),
        );
    }
    w.disk.cancel_crashes();
    if w.disk_full_until.take().is_some() {
        // Recovery on a full disk fences what it cannot repair (the node scope judges
        // that); here the operator makes room before restarting the server.
        let mut faults = w.disk.faults();
        faults.capacity = None;
        w.disk.set_faults(faults);
        w.event("the operator makes room on the disk before the restart");
    }
    w.oracle.crashed(power);
    if power {
        w.net.power_on(SERVER_IP);
    }
    if w.phase == Phase::Safety && w.profile.mid_operation_crash > 0.0 && w.rng.gen_bool(0.3) {
        // The next boot's recovery is interrupted too (the boot loop boots again).
        let n = w.rng.gen_range(0..24);
        w.disk.arm_crash(n);
        w.event(format!("fault crash armed inside the next boot at +{n}"));
    }
}

/// Sets the run up: the first boot, then the stream, topics and group over the network.
pub(crate) fn setup(world: &Shared, executor: &mut Executor) -> Result<(), Violation> {
    boot(world, executor, false)?;
    let (env, partitions, handle) = {
        let mut w = lock(world);
        let env = w.client_env(actors::ADMIN_IP);
        (env, w.profile.partitions, w.clients.clone())
    };
    let hostile_users = lock(world).profile.hostile.users();
    let made = block(
        executor,
        &handle,
        actors::create_topology(env, partitions, hostile_users),
    );
    let ids = match made {
        Some(Ok(ids)) => ids,
        Some(Err(e)) => return Err(violation(INV_LIVENESS, format!("setup failed: {e}"))),
        None => return Err(violation(INV_LIVENESS, "setup stalled".into())),
    };
    let mut w = lock(world);
    w.ids = ids;
    for (t, (_, persisted)) in TOPICS.iter().enumerate() {
        for p in 0..partitions {
            w.oracle.parts.insert(
                (t, p),
                PartModel {
                    persisted: *persisted,
                    ..Default::default()
                },
            );
        }
    }
    let faults = w.profile.net;
    w.net.set_faults(faults);
    w.event(format!("setup: {ids:?}"));
    Ok(())
}
