//! Simulated implementations of the engine's `Env` traits, with fault injection: a disk
//! with a page-cache model ([`disk`]), virtual time ([`clock`]) and a network of lossy
//! links ([`net`]). No engine logic lives here.
#![forbid(unsafe_code)]

pub mod clock;
pub mod disk;
pub mod net;

pub use clock::{SimClock, SkewedClock};
pub use disk::{
    Call, CallRecord, Damage, DiskFaults, Fates, FaultKind, FaultRecord, Scripted, SimDisk, PAGE,
    SECTOR,
};
pub use net::{HostNet, NetEvent, NetFaults, SimNet};
