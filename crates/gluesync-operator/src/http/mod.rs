//! HTTP plumbing GKO's servers and clients share: the one listener that serves the Conductor API and
//! `/metrics`, and reads of answers bounded in size.

pub mod bounded;
pub mod listener;
