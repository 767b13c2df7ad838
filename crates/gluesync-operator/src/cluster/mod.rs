//! GKO and the cluster: the watches of its namespace and what they cache, the snapshot a decision is
//! made on, the long lists kept in ConfigMaps, the Lease, and the one writer every API write goes through
//! while this GKO holds the Lease.

pub mod commit;
pub mod lease;
pub mod observe;
pub mod pending;
pub mod spill;
pub mod view;
pub mod watches;
pub mod wording;
pub mod writer;
