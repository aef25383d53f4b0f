//! The partition world's run: the world set up, then epochs of producer and consumer tasks
//! on the deterministic executor, each ended by a restart (a process crash or a power loss,
//! then the engine's real recovery on the surviving image and the oracle's checks), until
//! the safety phase has done its operations; then the liveness phase with faults healed.

use super::{Stop, World};
use crate::env::sim_env;
use crate::env::MAX_EPOCH_POLLS;
use crate::executor::Executor;
use crate::profile::Profile;
use crate::report::{violation, RunReport, Trace, INV_LIVENESS};
use cairn_faults::FaultKind;
use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Rounds of the liveness phase every serving partition must complete.
pub const LIVENESS_ROUNDS: u32 = 5;
/// Virtual time the liveness phase has for them.
pub const LIVENESS_BUDGET: Duration = Duration::from_secs(120);

type Shared = Arc<Mutex<World>>;

fn lock(world: &Shared) -> std::sync::MutexGuard<'_, World> {
    world.lock().expect("world")
}

/// Builds the world of `seed`: a simulated disk, clock and network as the node's `Env`.
pub fn world_for(seed: u64, verbose: bool) -> (Shared, Executor) {
    // The partition scope whatever the seed draws (`--scope partitions`, a pinned seed).
    let profile = Profile::from_seed_in(seed, crate::profile::Scope::Partitions);
    let (disk, clock, executor, env) = sim_env(seed, &profile);
    let trace = Trace::new(verbose, clock.clone());
    let world = World::new(profile, disk, clock, env, trace);
    (Arc::new(Mutex::new(world)), executor)
}

/// Runs one partition-scope seed.
pub fn run(seed: u64, verbose: bool) -> RunReport {
    let (world, mut executor) = world_for(seed, verbose);
    {
        let mut w = lock(&world);
        if verbose {
            print!("{}", w.profile);
        }
        let profile_text = w.profile.to_string();
        w.event(format!(
            "profile {}",
            xxhash::xxh3::xxh3_64(profile_text.as_bytes())
        ));
    }
    safety_phase(&world, &mut executor);
    let clean = lock(&world).violation.is_none();
    if clean {
        liveness_phase(&world, &mut executor);
    }
    executor.kill_all();
    let mut w = lock(&world);
    w.count_faults();
    if let Some(v) = w.violation.clone() {
        w.event(format!("VIOLATION {v}"));
    }
    w.report
        .clone()
        .finished(w.violation.clone(), w.ops, &w.clock, &w.trace)
}

fn safety_phase(world: &Shared, executor: &mut Executor) {
    {
        let mut w = lock(world);
        w.setup();
        let faults = w.profile.disk;
        w.disk.set_faults(faults);
        w.event("phase safety");
    }
    loop {
        spawn_workload(world, executor);
        let keep_going = || {
            let w = lock(world);
            w.stop.is_none() && w.violation.is_none()
        };
        let stopped = executor.run_while(MAX_EPOCH_POLLS, u64::MAX, &keep_going);
        executor.kill_all();
        let mut w = lock(world);
        if w.violation.is_some() {
            return;
        }
        match w.stop.take() {
            Some(Stop::Restart { power }) => {
                if let Err(v) = w.restart(power) {
                    w.fail(v);
                    return;
                }
                if std::mem::take(&mut w.power_loss_next) {
                    // Right after the restart, before any record is written again.
                    if let Err(v) = w.restart(true) {
                        w.fail(v);
                        return;
                    }
                }
            }
            Some(Stop::End) => return,
            None => {
                // Every serving partition fenced or down, or the poll budget ran out.
                w.event(format!("epoch ended: {stopped:?}"));
                if w.open_partitions().is_empty() && w.ops < w.profile.steps {
                    let power_p = w.profile.power_loss.map(|_| 0.5);
                    let power = w.chance(power_p);
                    if let Err(v) = w.restart(power) {
                        w.fail(v);
                    }
                    if w.open_partitions().is_empty() {
                        return;
                    }
                    continue;
                }
                return;
            }
        }
    }
}

/// The tasks of one epoch: producers and a consumer per serving partition.
fn spawn_workload(world: &Shared, executor: &mut Executor) {
    let handle = executor.handle();
    let (open, producers, think) = {
        let w = lock(world);
        (
            w.open_partitions(),
            w.profile.producers,
            w.profile.max_think_nanos,
        )
    };
    for p in open {
        for _ in 0..producers {
            let world = world.clone();
            cairn_engine::env::Tasks::spawn(
                &handle,
                Box::pin(async move { producer(world, p, think).await }),
            );
        }
        let world = world.clone();
        cairn_engine::env::Tasks::spawn(
            &handle,
            Box::pin(async move { consumer(world, p, think).await }),
        );
    }
}

/// Sleeps a random think time; false when the epoch is over.
async fn think(world: &Shared, max_think: u64) -> bool {
    let (nanos, clock) = {
        let mut w = lock(world);
        if w.stop.is_some() || w.violation.is_some() {
            return false;
        }
        (w.rng.gen_range(0..max_think), w.clock.clone())
    };
    cairn_engine::env::Clock::sleep(&clock, Duration::from_nanos(nanos)).await;
    let w = lock(world);
    w.stop.is_none() && w.violation.is_none()
}

async fn producer(world: Shared, p: usize, max_think: u64) {
    while think(&world, max_think).await {
        let mut w = lock(&world);
        if w.rng.gen_bool(0.05) {
            w.operate(p, World::persist);
        } else {
            w.operate(p, World::produce);
        }
        nemesis(&mut w);
    }
}

async fn consumer(world: Shared, p: usize, max_think: u64) {
    while think(&world, max_think).await {
        let mut w = lock(&world);
        let close_reopen = w.profile.close_reopen;
        match w.rng.gen_range(0..100) {
            _ if w.rng.gen_bool(close_reopen) => w.operate(p, World::close_reopen),
            0..=59 => w.operate(p, World::poll),
            60..=79 => w.operate(p, World::store_offset),
            80..=84 => w.operate(p, World::delete_offset),
            85..=86 => w.operate(p, World::delete_segments),
            _ => w.operate(p, |w, p| w.verify(p, false)),
        }
        nemesis(&mut w);
    }
}

/// After every operation: the faults of the profile strike, and boots that failed retry.
fn nemesis(w: &mut World) {
    if w.stop.is_some() || w.violation.is_some() {
        return;
    }
    let profile = w.profile.clone();
    if w.chance(profile.clock_jump) {
        let jump: i64 = w.rng.gen_range(-86_400_000_000..86_400_000_000);
        w.clock.jump_wall(jump);
        w.disk
            .record(FaultKind::ClockJump, None, format!("{jump} us"));
        w.event(format!("fault clock jump {jump} us"));
    }
    if w.chance(profile.power_loss) {
        w.stop = Some(Stop::Restart { power: true });
        return;
    }
    if !w.slot_crash_armed && w.chance(profile.slot_crash) {
        // The next persist: its log sync lies, and the crash strikes its superblock write.
        w.disk
            .script(cairn_faults::Scripted::LieOnSync(".log".into()));
        w.disk
            .script(cairn_faults::Scripted::CrashAfterWrite("superblock".into()));
        w.slot_crash_armed = true;
        w.event("fault the next log sync lies and the next superblock write crashes");
    }
    if w.chance(profile.process_crash) {
        w.stop = Some(Stop::Restart { power: false });
        return;
    }
    if w.chance(profile.mid_operation_crash.map(|p| p * 0.05)) {
        let n = w.rng.gen_range(0..8);
        w.disk.arm_crash(n);
        w.event(format!("fault crash armed at mutating call +{n}"));
    }
    for p in 0..w.models.len() {
        let down = !w.is_open(p) && w.models[p].fenced.is_none();
        if down && w.rng.gen_bool(0.3) {
            w.event(format!("p{p} boot retry"));
            if let Err(v) = w.recover(p) {
                w.fail(v);
                return;
            }
            if w.disk.is_crashed() {
                let power = w.profile.power_loss.is_some() && w.rng.gen_bool(0.5);
                w.stop = Some(Stop::Restart { power });
                return;
            }
        }
    }
}

/// Faults healed, the node restarts (after a power loss or a process crash), and every
/// serving partition must append, persist, read back and store an offset within the budget.
fn liveness_phase(world: &Shared, executor: &mut Executor) {
    let deadline = {
        let mut w = lock(world);
        w.event("phase liveness: faults healed");
        w.disk.heal();
        w.faulty = false;
        let power = w.rng.gen_bool(0.5);
        if let Err(v) = w.restart(power) {
            w.fail(v);
            return;
        }
        w.clock.now_nanos() + LIVENESS_BUDGET.as_nanos() as u64
    };
    let partitions = lock(world).models.len();
    let done = Arc::new(Mutex::new(vec![false; partitions]));
    let handle = executor.handle();
    for p in 0..partitions {
        let (world, done) = (world.clone(), done.clone());
        cairn_engine::env::Tasks::spawn(
            &handle,
            Box::pin(async move {
                let clock = lock(&world).clock.clone();
                let mut rounds = 0;
                while rounds < LIVENESS_ROUNDS {
                    let progressed = {
                        let mut w = lock(&world);
                        if w.violation.is_some() {
                            return;
                        }
                        match w.liveness_round(p) {
                            Ok(progressed) => progressed,
                            Err(v) => {
                                w.fail(v);
                                return;
                            }
                        }
                    };
                    if progressed {
                        rounds += 1;
                    }
                    cairn_engine::env::Clock::sleep(&clock, Duration::from_millis(10)).await;
                }
                done.lock().expect("done")[p] = true;
            }),
        );
    }
    let keep_going = || lock(world).violation.is_none();
    executor.run_while(MAX_EPOCH_POLLS, deadline, &keep_going);
    let mut w = lock(world);
    if w.violation.is_some() {
        return;
    }
    let done = done.lock().expect("done").clone();
    if let Some(p) = done.iter().position(|d| !d) {
        let v = violation(INV_LIVENESS, format!("partition {p}: no progress within {LIVENESS_BUDGET:?} of virtual time after faults healed"));
        w.fail(v);
        return;
    }
    w.event(format!(
        "liveness: {LIVENESS_ROUNDS} rounds on every serving partition"
    ));
    for p in 0..partitions {
        if let Err(v) = w.verify(p, false) {
            w.fail(v);
            return;
        }
    }
}
