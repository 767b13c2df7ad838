//! The thin loop: watch the GluesyncPlatforms and the labelled workloads of one namespace, compute what the
//! status should say, and write it only when it changed.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::{
    api::apps::v1::{Deployment, StatefulSet},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        events::EventType,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tracing::{info, instrument, warn};

use crate::{
    api::{GluesyncPlatform, TYPE_LABEL},
    cluster::{self, Workload, Writer},
    metrics::Metrics,
    status,
};

/// Errors of one reconciliation. Each is logged with the GluesyncPlatform's name and retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("the status changed since it was read; reading it again")]
    StaleRead,
}

/// What one GKO process works with.
pub struct Context {
    pub writer: Writer,
    pub metrics: Arc<Metrics>,
    statefulsets: Store<StatefulSet>,
    deployments: Store<Deployment>,
}

impl Context {
    /// The labelled workloads of the namespace, from the watch caches.
    fn workloads(&self) -> Vec<Workload> {
        let sts = self
            .statefulsets
            .state()
            .into_iter()
            .filter_map(|s| Workload::from_statefulset(&s));
        let deploy = self
            .deployments
            .state()
            .into_iter()
            .filter_map(|d| Workload::from_deployment(&d));
        sts.chain(deploy).collect()
    }
}

/// Settings of one GKO process.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The namespace GKO manages; it never looks outside it.
    pub namespace: String,
    /// This process's name in events (the pod name in a cluster).
    pub instance: Option<String>,
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

#[instrument(skip_all, fields(gsp = %gsp.name_any()))]
async fn reconcile(gsp: Arc<GluesyncPlatform>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciles.inc();
    let workloads = ctx.workloads();
    let next = status::idle(&gsp, &workloads, &now());
    if gsp.status.as_ref() == Some(&next) {
        return Ok(Action::await_change());
    }

    match ctx.writer.write_status(&gsp, &next).await {
        Ok(_) => {}
        Err(e) if cluster::is_conflict(&e) => return Err(Error::StaleRead),
        Err(e) => return Err(Error::WriteStatus(e)),
    }
    info!(
        phase = next.phase.map(|p| p.as_str()).unwrap_or(""),
        version = next.version.as_deref().unwrap_or(""),
        message = next.message.as_deref().unwrap_or(""),
        "status updated"
    );

    // A Warning event when the install becomes stalled, or stalled for another reason.
    let before = status::stalled(gsp.status.as_ref());
    if let Some((reason, message)) = status::stalled(Some(&next))
        && before.map(|(r, _)| r) != Some(reason)
        && let Err(e) = ctx
            .writer
            .event(&gsp, EventType::Warning, reason, message.to_string())
            .await
    {
        warn!(error = %e, "recording an event failed");
    }
    Ok(Action::await_change())
}

fn error_policy(gsp: Arc<GluesyncPlatform>, error: &Error, ctx: Arc<Context>) -> Action {
    match error {
        Error::StaleRead => Action::requeue(Duration::from_millis(200)),
        _ => {
            ctx.metrics.reconcile_errors.inc();
            warn!(gsp = %gsp.name_any(), %error, "reconcile failed; retrying in 5 s");
            Action::requeue(Duration::from_secs(5))
        }
    }
}

/// Runs GKO's controller on one namespace until `shutdown` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_str();
    let gsps: Api<GluesyncPlatform> = Api::namespaced(client.clone(), ns);
    let labelled = watcher::Config::default().labels(TYPE_LABEL).any_semantic();

    let (statefulsets, sts_writer) = reflector::store();
    let sts_stream = reflector::reflector(
        sts_writer,
        watcher(
            Api::<StatefulSet>::namespaced(client.clone(), ns),
            labelled.clone(),
        ),
    )
    .default_backoff()
    .touched_objects();
    let (deployments, deploy_writer) = reflector::store();
    let deploy_stream = reflector::reflector(
        deploy_writer,
        watcher(Api::<Deployment>::namespaced(client.clone(), ns), labelled),
    )
    .default_backoff()
    .touched_objects();

    let ctx = Arc::new(Context {
        writer: Writer::new(client.clone(), metrics.clone(), settings.instance.clone()),
        metrics: metrics.clone(),
        statefulsets: statefulsets.clone(),
        deployments: deployments.clone(),
    });

    let controller = Controller::new(gsps, watcher::Config::default().any_semantic());
    let platforms = controller.store();
    let every_platform = move || {
        platforms
            .state()
            .iter()
            .map(|g| ObjectRef::from_obj(g.as_ref()))
            .collect::<Vec<_>>()
    };
    let for_sts = every_platform.clone();
    let for_deploy = every_platform;

    // Ready once every cache has listed the namespace.
    let ready_metrics = metrics.clone();
    let (s, d) = (statefulsets.clone(), deployments.clone());
    tokio::spawn(async move {
        if s.wait_until_ready().await.is_ok() && d.wait_until_ready().await.is_ok() {
            ready_metrics
                .ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });

    info!(
        namespace = ns,
        "watching GluesyncPlatforms and labelled workloads"
    );
    controller
        .watches_stream(sts_stream, move |_| for_sts())
        .watches_stream(deploy_stream, move |_| for_deploy())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                match e {
                    kube::runtime::controller::Error::ReconcilerFailed(..) => {}
                    other => warn!(error = %other, "controller"),
                }
            }
        })
        .await;
    info!("controller stopped");
}
