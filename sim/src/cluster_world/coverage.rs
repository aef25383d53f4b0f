//! The cluster scope's coverage rows: what the swarm must see reached.

/// The cluster scope's coverage rows: decision name, and what reaching it means.
pub const CLUSTER_COVERAGE: [(&str, &str); 42] = [
    (
        "ClusterTotalPowerLoss",
        "every replica lost power at once, then all restarted",
    ),
    (
        "ClusterLeaderHandedOver",
        "a leader stopped gracefully and handed leadership to another replica first",
    ),
    (
        "ClusterDiskReplaced",
        "a replica's disk was replaced by a blank one and it came back as a new replica",
    ),
    (
        "ClusterStateLost",
        "a replica lost its state record (its vote) and came back as a new replica, its files set aside",
    ),
    (
        "ClusterReplicaReplaced",
        "an administrator replaced a blank replica's old incarnation with it (a learner caught up, then a voter)",
    ),
    (
        "ClusterCrashInIo",
        "a replica crashed inside a disk call (a write landed in part)",
    ),
    (
        "ClusterLeaderChanged",
        "a second leader was elected after the first (a new term)",
    ),
    (
        "ClusterProcessCrash",
        "a replica's process crashed under proposals",
    ),
    (
        "ClusterPowerLoss",
        "a replica lost power (its unsynced pages and connections)",
    ),
    ("ClusterPartition", "two replicas' hosts were partitioned"),
    (
        "ClusterClockSkew",
        "a replica's clock ran fast or slow (up to 10%), its wall clock seconds off",
    ),
    (
        "ClusterOneWayPartition",
        "one replica's host could not reach another's, which still reached it",
    ),
    (
        "ClusterFlappingPartition",
        "a partition between two replicas' hosts came and went 2 to 5 times within two seconds",
    ),
    (
        "ClusterReplicaRemoved",
        "an administrator removed a member's replica from the group (a leader asked to remove itself hands over first)",
    ),
    (
        "ClusterInDoubtResolved",
        "a proposal in doubt was resolved by its retry (found applied, or applied once)",
    ),
    (
        "ClusterSnapshotInstalled",
        "a replica behind the leader's log caught up by installing its snapshot",
    ),
    (
        "ClusterFreshRead",
        "a follower read through the leader's read index and saw every op acknowledged before",
    ),
    (
        "ClusterRetryRepeated",
        "a member asked again for an op whose first attempt had applied, and was answered with that attempt's outcome (the same key)",
    ),
    (
        "ClusterNodeReplayed",
        "a restarted replica handed its node commands the node had applied before, and the node applied none twice",
    ),
    (
        "ClusterNodeAdopted",
        "a replica's node behind the leader's log adopted the leader's state whole (its snapshot)",
    ),
    (
        "ClusterAdoptionRemoved",
        "a replica's node adopted a state that removed or emptied partitions it held (deleted or purged while it was behind), live or finished at boot",
    ),
    (
        "ClusterAdoptionCutShort",
        "a replica's node stopped while adopting a state, and its next boot removed the adoption's leftovers or finished it",
    ),
    (
        "ClusterBootFromSnapshot",
        "a replica restarted from its snapshot and the log after it (its log's head purged)",
    ),
    (
        "ClusterMessagesReplicated",
        "a send was acknowledged once its partition's group committed it (proposed at its leader, or forwarded there)",
    ),
    (
        "ClusterMessagesReadAtFollower",
        "a poll read messages from a member whose replica of the partition does not lead its group",
    ),
    (
        "ClusterMessagesLeaderChanged",
        "a partition's group elected a leader in a later term than its first",
    ),
    (
        "ClusterMessagesCheckpointed",
        "a partition's group checkpointed (its replica synced, the applied entry recorded)",
    ),
    (
        "ClusterPartitionDamaged",
        "the nemesis flipped a byte of a partition's segment on a crashed member, which then started again",
    ),
    (
        "ClusterPartitionRepaired",
        "a member's group start found its replica fenced or short of its checkpoint and repaired it from its peers' segments",
    ),
    (
        "ClusterMessagesRefilled",
        "a replica behind its leader's purged WAL took the missing batches from its peers' segments and installed the leader's checkpoint",
    ),
    (
        "ClusterLeadershipSpread",
        "a partition group's leader handed the group to its preferred member's replica (up and caught up)",
    ),
    (
        "ClusterGroupsSlept",
        "an idle partition group's replicas stopped their Raft timers, every voter's member agreeing (quiet)",
    ),
    (
        "ClusterOffsetReplicated",
        "a consumer's offset stored or deleted through a member was acknowledged once its partition's group committed it",
    ),
    (
        "ClusterOffsetsAgree",
        "after the final heal every replica held the same offset for a consumer written to, one its writes allow",
    ),
    (
        "ClusterRaftBatched",
        "one exchange between two members carried the Raft requests of more than one partition group (batch)",
    ),
    (
        "ClusterPartitionPlaced",
        "the final judgement read a partition placed on fewer members than the cluster has (its topic's replication factor), judging those copies only",
    ),
    (
        "ClusterGroupMadeOnAsk",
        "a member made a partition's group of the replicas the metadata leader, placed elsewhere, named when asked",
    ),
    (
        "ClusterWriteOfUnplacedMember",
        "a placed replica leading its group took a send or offset write of a member the partition is not placed on",
    ),
    (
        "ClusterReadOfUnplacedMember",
        "a poll, offset read or partition's numbers at a member the partition is not placed on was answered from a placed member's copy",
    ),
    (
        "ClusterReplicaReleased",
        "a member removed its replica of a partition placed elsewhere (a change of voters moved it) once the group left it out",
    ),
    (
        "ClusterPlacedCopyBlank",
        "a member holding copies of partitions placed on fewer members than the cluster has came back blank (a copy of three lost), a majority of each one's copies in",
    ),
    (
        "ClusterQuietWoken",
        "a sleeping partition group was woken because its leader's member went silent or restarted",
    ),
];
