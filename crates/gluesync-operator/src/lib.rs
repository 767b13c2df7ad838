//! GKO, the Gluesync Kubernetes Operator: keeps a Gluesync install on Kubernetes at the Core Hub version
//! its `GluesyncPlatform` asks for, and reports what runs.

pub mod access;
pub mod api;
pub mod background;
pub mod catalog;
pub mod cluster;
pub mod conductor;
pub mod controller;
pub mod corehub;
pub mod lease;
pub mod metrics;
pub mod operator;
pub mod spill;
pub mod status;
pub mod update;
pub mod version;
pub mod view;
pub mod writer;

/// The CustomResourceDefinition of `GluesyncPlatform`, as YAML.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    serde_yaml::to_string(&api::GluesyncPlatform::crd())
}

#[cfg(test)]
mod tests {
    /// The checked-in CRD is the one the types generate.
    #[test]
    fn checked_in_crd_matches_the_types() {
        let checked_in = include_str!("../../../deploy/crd.yaml");
        let generated = super::crd_yaml().expect("the CRD serializes");
        assert!(
            checked_in == generated,
            "deploy/crd.yaml drifted from the Rust types: run `cargo run -p gluesync-operator -- crd > deploy/crd.yaml`"
        );
    }
}
