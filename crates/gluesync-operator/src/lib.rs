//! GKO, the Gluesync Kubernetes Operator: keeps a Gluesync install on Kubernetes at the Core Hub version
//! its `GluesyncPlatform` asks for, and reports what runs.

pub mod background;
pub mod catalog;
pub mod cluster;
pub mod conductor;
pub mod controller;
pub mod corehub;
pub mod http;
pub mod metrics;
pub mod operator;

// The engine, under the names the operator has always used for it.
pub use gluesync_engine::{api, update};

/// The CustomResourceDefinition of `GluesyncPlatform`, as installed: the one the types generate, with
/// - `status` defaulting to `{observedGeneration: 0}`, so that a resource GKO has not reported on yet reads
///   as in progress (generation 1, observed 0) to kstatus, Flux and Helm's `--wait`, not as current;
/// - Argo CD told to apply it server-side (it is too large for the annotation a client-side apply keeps).
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON;
    use kube::CustomResourceExt;
    let mut crd = api::GluesyncPlatform::crd();
    crd.metadata.annotations = Some(
        [(
            "argocd.argoproj.io/sync-options".to_string(),
            "ServerSideApply=true".to_string(),
        )]
        .into(),
    );
    for version in &mut crd.spec.versions {
        let status = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("status"));
        if let Some(status) = status {
            status.default = Some(JSON(serde_json::json!({})));
            if let Some(observed) = status
                .properties
                .as_mut()
                .and_then(|p| p.get_mut("observedGeneration"))
            {
                observed.default = Some(JSON(serde_json::json!(0)));
            }
        }
    }
    crd
}

/// [`crd`] as YAML.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&crd())
}

#[cfg(test)]
mod tests {
    /// GKO is open source under the license Cargo.toml names, and the repository carries its text.
    #[test]
    fn the_license_file_is_the_license_cargo_names() {
        let text = include_str!("../../../LICENSE");
        assert_eq!(env!("CARGO_PKG_LICENSE"), "Apache-2.0");
        assert!(text.contains("Apache License") && text.contains("Version 2.0, January 2004"));
    }

    /// The checked-in CRD is the one the types generate.
    #[test]
    fn checked_in_crd_matches_the_types() {
        let checked_in =
            include_str!("../../../charts/gluesync-operator/files/gluesyncplatforms.crd.yaml");
        let generated = super::crd_yaml().expect("the CRD serializes");
        assert!(
            checked_in == generated,
            "the chart's CRD (deploy/crd.yaml links to it) drifted from the Rust types: run `make crd`"
        );
    }
}
