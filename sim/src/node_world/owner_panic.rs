//! An owner whose assertion fires stops the node, as production's runtime would see it: the
//! executor catches the panicking task's unwind (tokio does, and runs the other tasks on),
//! and every caller, the one in flight and any later, is answered `Stopped(Panicked)` instead
//! of waiting for an owner that is gone. A survivor of mutation shard 7/12
//! (`PanicGuard::drop` → `()`): the simulator's executor used to let every panic fail the
//! run, so no seed could see what a panic leaves behind.

#[cfg(test)]
mod tests {
    use crate::env::sim_env;
    use cairn_engine::node::{Failure, Node, NodeError, NodeSettings, PasswordCost};
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};

    static ARMED: AtomicBool = AtomicBool::new(false);
    const INJECTED: &str = "an injected assertion in the metadata owner";

    /// The metadata owner's hook between a batch's journal write and its sync: the injected
    /// assertion, once armed.
    fn assert_fires(_publish: &mut dyn FnMut()) {
        if ARMED.swap(false, Ordering::SeqCst) {
            panic!("{INJECTED}");
        }
    }

    #[test]
    fn a_panicking_metadata_owner_stops_the_node_with_panicked() {
        let profile = crate::profile::Profile::from_seed(0x0a41c);
        let (_disk, _clock, mut executor, env) = sim_env(0x0a41c, &profile);
        executor.catch_panics();
        let mut settings = NodeSettings {
            password_cost: PasswordCost::CHEAP,
            shards: 2,
            ..Default::default()
        };
        settings.hooks.owners.before_metadata_sync = Some(assert_fires);
        let tasks = executor.handle();
        let node = executor
            .block_on(&tasks, 10_000_000, {
                let env = env.clone();
                async move { Node::start(&env, Path::new("/node"), settings).await }
            })
            .expect("boot finished")
            .expect("booted")
            .node;
        let client = node.client(1);
        let created = executor.block_on(&tasks, 10_000_000, {
            let client = client.clone();
            async move { client.create_stream("before").await }
        });
        assert!(matches!(created, Some(Ok(_))), "{created:?}");
        ARMED.store(true, Ordering::SeqCst);
        let panicked = |answer: &Option<Result<u32, NodeError>>| match answer {
            Some(Err(NodeError::Stopped(failure))) => {
                matches!(&**failure, Failure::Panicked(_))
            }
            _ => false,
        };
        for name in ["during", "after"] {
            let answer = executor.block_on(&tasks, 10_000_000, {
                let client = client.clone();
                async move { client.create_stream(name).await }
            });
            assert!(
                panicked(&answer),
                "the create {name:?} the panic was answered {answer:?}, not Stopped(Panicked)"
            );
        }
        assert!(
            matches!(node.failure().as_deref(), Some(Failure::Panicked(_))),
            "the node's failure: {:?}",
            node.failure()
        );
        let panics = executor.take_panics();
        assert_eq!(panics, vec![INJECTED.to_owned()], "only the injected panic");
    }
}
