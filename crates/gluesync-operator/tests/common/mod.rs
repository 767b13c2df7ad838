//! Helpers shared by the cluster tests: the CRD, an operator running on the test's namespace, the sample
//! install.
#![allow(dead_code)] // each test binary uses its own part of these helpers

use std::{sync::Arc, time::Duration};

use gko_test_support::{TestNamespace, eventually};
use gluesync_operator::{
    api::{FIELD_MANAGER, GluesyncPlatform},
    controller,
    metrics::Metrics,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, CustomResourceExt,
    api::{Patch, PatchParams},
};
use tokio::sync::watch;

pub const SAMPLE_INSTALL: &str = include_str!("../../../../examples/sample/install.yaml");
pub const RBAC: &str = include_str!("../../../../deploy/rbac.yaml");
pub const SAMPLE_PLATFORM: &str = include_str!("../../../../examples/sample/platform.yaml");

/// Installs the CRD generated from the current types and waits until it serves.
pub async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = GluesyncPlatform::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    eventually("the CRD to be established", Duration::from_secs(30), || {
        let crds = crds.clone();
        let name = name.clone();
        async move {
            let crd = crds.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        }
    })
    .await
}

/// A namespace with the CRD installed.
pub async fn namespace(hint: &str) -> anyhow::Result<TestNamespace> {
    let ns = TestNamespace::new(hint).await?;
    install_crd(&ns.client).await?;
    Ok(ns)
}

/// GKO's controller running on one namespace, stopped when dropped.
pub struct Operator {
    pub metrics: Arc<Metrics>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Operator {
    /// Runs GKO with the admin's rights.
    pub fn start(ns: &TestNamespace) -> Operator {
        Self::start_with(ns, ns.client.clone())
    }

    /// Runs GKO with only the rights of deploy/rbac.yaml's Role.
    pub async fn start_with_role(ns: &TestNamespace) -> anyhow::Result<Operator> {
        ns.apply(RBAC)?;
        let client = ns.service_account_client("gluesync-operator").await?;
        Ok(Self::start_with(ns, client))
    }

    pub fn start_with(ns: &TestNamespace, client: Client) -> Operator {
        let metrics = Arc::new(Metrics::default());
        let (stop, mut rx) = watch::channel(false);
        let settings = controller::Settings {
            namespace: ns.name.clone(),
            instance: Some("test".into()),
        };
        let task = tokio::spawn(controller::run(
            client,
            settings,
            metrics.clone(),
            async move {
                let _ = rx.wait_for(|s| *s).await;
            },
        ));
        Operator {
            metrics,
            stop,
            task: Some(task),
        }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub fn platforms(ns: &TestNamespace) -> Api<GluesyncPlatform> {
    Api::namespaced(ns.client.clone(), &ns.name)
}

/// Waits until the GluesyncPlatform satisfies `check`, and returns it.
pub async fn wait_for_platform(
    ns: &TestNamespace,
    what: &str,
    check: impl Fn(&GluesyncPlatform) -> bool,
) -> anyhow::Result<GluesyncPlatform> {
    let api = platforms(ns);
    eventually(what, Duration::from_secs(60), || {
        let api = api.clone();
        let check = &check;
        async move {
            let g = api.get("gluesync").await?;
            Ok(check(&g).then_some(g))
        }
    })
    .await
}
