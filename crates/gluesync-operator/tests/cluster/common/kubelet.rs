//! GKO's own Deployment on the control plane, its pods simulated, and a supervisor that plays the kubelet
//! for them: for each Ready pod it runs the real GKO process (named after the pod, so GKO reads its own
//! image from it), restarts that process if it dies while its pod stays, and stops it (SIGTERM) when its
//! pod goes. A pod whose image ends in `-crash` never becomes Ready, so no GKO of that version ever runs.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use gko_test_support::TestNamespace;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};

use super::{Gko, GkoOptions};

pub const GKO: &str = "gluesync-operator";
pub const OLD: &str = "molo17/gluesync-operator:0.1.0";

/// GKO's Deployment as the chart makes it (surge 1, unavailable 0); its new pod must be ready
/// `min_ready` seconds before the old one goes.
pub fn deployment(image: &str, min_ready: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {GKO}
  labels: {{com.molo17.conductor.type: operator}}
spec:
  replicas: 1
  minReadySeconds: {min_ready}
  strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}}}
  selector: {{matchLabels: {{app: {GKO}}}}}
  template:
    metadata: {{labels: {{app: {GKO}}}}}
    spec: {{containers: [{{name: {GKO}, image: "{image}"}}]}}
"#
    )
}

/// The kubelet of GKO's pods: one GKO process per Ready pod.
pub struct Kubelet {
    running: Arc<Mutex<BTreeMap<String, Gko>>>,
    /// Every pod a GKO process was started for, with its image, in order (restarts too).
    started: Arc<Mutex<Vec<(String, String)>>>,
    /// Where each pod's GKO serves the Conductor API.
    conductor: Arc<Mutex<BTreeMap<String, String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Kubelet {
    pub fn start(ns: &TestNamespace) -> Kubelet {
        Kubelet::start_with(ns, vec![])
    }

    /// [`Kubelet::start`], each GKO with this environment besides its own.
    pub fn start_with(ns: &TestNamespace, env: Vec<(String, String)>) -> Kubelet {
        let running: Arc<Mutex<BTreeMap<String, Gko>>> = Arc::default();
        let started: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
        let ns_name = ns.name.clone();
        let cp = ns.cp;
        let conductor: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        let (run, log, addrs) = (running.clone(), started.clone(), conductor.clone());
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = pods
                    .list(&kube::api::ListParams::default().labels(&format!("app={GKO}")))
                    .await
                {
                    let ready: BTreeMap<String, String> = list
                        .items
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
                        .map(|p| (p.name_any(), pod_image(p)))
                        .collect();
                    let gone: Vec<Gko>;
                    {
                        let mut run = run.lock().unwrap();
                        let names: Vec<String> = run
                            .keys()
                            .filter(|n| !ready.contains_key(*n))
                            .cloned()
                            .collect();
                        gone = names.iter().filter_map(|n| run.remove(n)).collect();
                        for (name, image) in &ready {
                            let dead = run.get_mut(name).is_some_and(|g| g.exited());
                            if run.contains_key(name) && !dead {
                                continue;
                            }
                            let addr = gko_test_support::free_addr()
                                .map(|a| a.to_string())
                                .unwrap_or_default();
                            match Gko::spawn_in(
                                &ns_name,
                                cp,
                                GkoOptions {
                                    instance: Some(name.clone()),
                                    conductor_addr: Some(addr.clone()),
                                    env: env.clone(),
                                    ..Default::default()
                                },
                            ) {
                                Ok(g) => {
                                    addrs.lock().unwrap().insert(name.clone(), addr);
                                    eprintln!(
                                        "[kubelet {ns_name}] started GKO for {name} ({image})"
                                    );
                                    log.lock().unwrap().push((name.clone(), image.clone()));
                                    run.insert(name.clone(), g);
                                }
                                Err(e) => eprintln!("[kubelet] starting GKO for {name}: {e}"),
                            }
                        }
                    }
                    // Pods that went: their GKO is stopped as Kubernetes stops a container.
                    for mut g in gone {
                        let _ = tokio::task::spawn_blocking(move || g.terminate()).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Kubelet {
            running,
            started,
            conductor,
            task,
        }
    }

    /// SIGKILL the GKO of `pod` (its pod stays: the kubelet starts it again).
    pub fn kill(&self, pod: &str) -> anyhow::Result<()> {
        let mut run = self.running.lock().unwrap();
        let g = run.get_mut(pod).context("no GKO runs for that pod")?;
        g.kill()
    }

    /// The Conductor API of `pod`'s GKO.
    pub fn conductor(&self, pod: &str) -> Option<String> {
        self.conductor
            .lock()
            .unwrap()
            .get(pod)
            .map(|a| format!("http://{a}/conductor/api"))
    }

    /// Where every pod's GKO serves (or served) the Conductor API.
    pub fn addresses(&self) -> Vec<String> {
        self.conductor.lock().unwrap().values().cloned().collect()
    }

    /// The pods a GKO runs for now.
    pub fn running(&self) -> Vec<String> {
        self.running.lock().unwrap().keys().cloned().collect()
    }

    pub fn started(&self) -> Vec<(String, String)> {
        self.started.lock().unwrap().clone()
    }
}

pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}
