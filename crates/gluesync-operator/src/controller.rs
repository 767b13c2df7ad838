//! The thin loop: watch the GluesyncPlatforms, the labelled workloads and their pods in one namespace; ask
//! [`update::decide`] what to do; write the status it gives (only when it changed), then carry out its
//! actions and record its events.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::{Deployment, StatefulSet},
        core::v1::{Pod, Secret},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action as RequeueAction,
        events::EventType,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tracing::{info, instrument, warn};

use crate::{
    api::{ComponentType, GluesyncPlatform, SELF_UPDATE_ANNOTATION, TYPE_LABEL, UpdateStep},
    catalog::{self, CatalogClient},
    cluster::{self, Workload, Writer},
    corehub::{self, CoreHub},
    metrics::Metrics,
    update::{self, Action, Observed},
    version::ImageRef,
};

/// Errors of one reconciliation. Each is logged with the GluesyncPlatform's name and retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("the status changed since it was read; reading it again")]
    StaleRead,
    #[error("reading the GluesyncPlatform: {0}")]
    Read(#[source] kube::Error),
}

/// How many maintenance requests GKO has in flight at once.
const MAINTENANCE_CONCURRENCY: usize = 64;
/// A maintenance request is not sent again for the same pipeline within this time.
const RESEND_AFTER: Duration = Duration::from_secs(15);

/// What one GKO process works with.
pub struct Context {
    pub writer: Writer,
    pub metrics: Arc<Metrics>,
    namespace: String,
    statefulsets: Store<StatefulSet>,
    deployments: Store<Deployment>,
    pods: Store<Pod>,
    corehubs: Mutex<HashMap<String, (String, Arc<CoreHub>)>>,
    /// Maintenance requests sent, by (platform uid and update generation, pipeline, enter): not repeated
    /// within RESEND_AFTER by the same update.
    sent: Mutex<HashMap<(String, String, bool), Instant>>,
    /// When this process saw each platform's current step begin, for the step-duration metric.
    step_clock: Mutex<HashMap<String, (UpdateStep, Instant)>>,
}

impl Context {
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The phase of GKO's own update while its new pod rolls out or back (`RollingOut`, `RollingBack`),
    /// from the annotation on its Deployment.
    pub(crate) fn self_updating(&self) -> Option<String> {
        self.deployments.state().iter().find_map(|d| {
            let operator = d.labels().get(TYPE_LABEL).map(String::as_str) == Some("operator");
            let phase = d.annotations().get(SELF_UPDATE_ANNOTATION)?;
            (operator && matches!(phase.as_str(), "RollingOut" | "RollingBack"))
                .then(|| phase.clone())
        })
    }

    /// The labelled workloads of the namespace with their pods, from the watch caches.
    pub(crate) fn workloads(&self) -> Vec<Workload> {
        let pods = self.pods.state();
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
        let mut all: Vec<Workload> = sts.chain(deploy).collect();
        for w in &mut all {
            w.attach_pods(pods.iter().map(|p| p.as_ref()));
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    async fn secret(&self, name: &str) -> Result<BTreeMap<String, String>, String> {
        let api: Api<Secret> = Api::namespaced(self.writer.client().clone(), &self.namespace);
        let secret = api
            .get(name)
            .await
            .map_err(|e| format!("reading Secret {name}: {e}"))?;
        Ok(secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, ByteString(v))| (k, String::from_utf8_lossy(&v).trim().to_string()))
            .collect())
    }

    /// The Core Hub client for this platform, built again when its settings or credentials change.
    pub(crate) async fn corehub(
        &self,
        gsp: &GluesyncPlatform,
        workloads: &[Workload],
    ) -> Result<Arc<CoreHub>, String> {
        let spec = &gsp.spec.core_hub;
        let url = match &spec.url {
            Some(u) => u.clone(),
            None => {
                let w = workloads
                    .iter()
                    .find(|w| w.component_type == Some(ComponentType::CoreHub))
                    .ok_or("no Core Hub workload")?;
                format!("https://{}.{}.svc:1717", w.name, self.namespace)
            }
        };
        let credentials = match &spec.credentials_secret {
            None => corehub::Credentials::None,
            Some(name) => {
                let data = self.secret(name).await?;
                match (
                    data.get("token"),
                    data.get("username"),
                    data.get("password"),
                ) {
                    (Some(t), _, _) => corehub::Credentials::Token(t.clone()),
                    (None, Some(u), Some(p)) => corehub::Credentials::Password {
                        username: u.clone(),
                        password: p.clone(),
                    },
                    _ => {
                        return Err(format!(
                            "Secret {name} has neither token nor username and password"
                        ));
                    }
                }
            }
        };
        let ca_pem = match &spec.ca_secret {
            None => None,
            Some(name) => Some(
                self.secret(name)
                    .await?
                    .get("ca.crt")
                    .cloned()
                    .ok_or(format!("Secret {name} has no ca.crt"))?,
            ),
        };
        let tls = corehub::Tls {
            ca_pem,
            insecure_skip_verify: spec.insecure_skip_verify,
        };
        let fingerprint = format!("{url}|{credentials:?}|{tls:?}");
        let uid = gsp.uid().unwrap_or_default();
        if let Some((fp, client)) = self.corehubs.lock().map_err(|e| e.to_string())?.get(&uid)
            && *fp == fingerprint
        {
            return Ok(client.clone());
        }
        let client = Arc::new(
            CoreHub::new(&url, credentials, &tls, corehub::Retry::default())
                .map_err(|e| e.to_string())?,
        );
        self.corehubs
            .lock()
            .map_err(|e| e.to_string())?
            .insert(uid, (fingerprint, client.clone()));
        Ok(client)
    }

    /// Latest versions on the platform's channel, per image name, for the images of its workloads; why
    /// not, when the catalog cannot say. Never called for an offline install.
    pub(crate) async fn check_catalog(
        &self,
        gsp: &GluesyncPlatform,
        workloads: &[Workload],
    ) -> Result<update::Catalog, String> {
        let base = gsp
            .spec
            .catalog
            .url
            .as_deref()
            .unwrap_or(catalog::DEFAULT_URL);
        let client =
            CatalogClient::new(base).map_err(|e| format!("building the catalog client: {e}"))?;
        let names: BTreeSet<String> = workloads
            .iter()
            .filter(|w| w.component_type.is_some())
            .map(|w| ImageRef::parse(&w.image).name().to_string())
            .collect();
        let mut out = update::Catalog::new();
        for name in names {
            match client.entry(&name).await {
                Ok(entry) => {
                    if let Some(v) = entry.latest(gsp.spec.release_channel) {
                        out.insert(name, v.to_string());
                    }
                }
                Err(catalog::Error::UnknownImage(_)) => {}
                Err(e) => {
                    warn!(error = %e, image = %name, "version catalog");
                    return Err(e.to_string());
                }
            }
        }
        Ok(out)
    }

    /// The catalog for an update's preflight: `None` offline, or when the catalog cannot say.
    async fn catalog(
        &self,
        gsp: &GluesyncPlatform,
        workloads: &[Workload],
    ) -> Option<update::Catalog> {
        if gsp.spec.catalog.offline {
            return None;
        }
        self.check_catalog(gsp, workloads).await.ok()
    }

    /// Sends maintenance requests for the pipelines not asked recently.
    async fn maintenance(
        &self,
        gsp: &GluesyncPlatform,
        client: &CoreHub,
        ids: Vec<String>,
        enter: bool,
    ) {
        // Each update runs for its own generation.
        let generation = gsp
            .status
            .as_ref()
            .and_then(|s| s.update.as_ref())
            .map_or(0, |u| u.generation);
        let uid = format!("{}/{generation}", gsp.uid().unwrap_or_default());
        let now = Instant::now();
        let ids: Vec<String> = {
            let Ok(mut sent) = self.sent.lock() else {
                return;
            };
            sent.retain(|_, at| now.duration_since(*at) < RESEND_AFTER);
            ids.into_iter()
                .filter(|id| {
                    let key = (uid.clone(), id.clone(), enter);
                    if sent.contains_key(&key) {
                        return false;
                    }
                    sent.insert(key, now);
                    true
                })
                .collect()
        };
        if ids.is_empty() {
            return;
        }
        let failed: Vec<(String, corehub::Error)> = stream::iter(ids)
            .map(|id| async move {
                let r = client.set_maintenance(&id, enter).await;
                (id, r)
            })
            .buffer_unordered(MAINTENANCE_CONCURRENCY)
            .filter_map(|(id, r)| async move { r.err().map(|e| (id, e)) })
            .collect()
            .await;
        if let Some((id, e)) = failed.first() {
            self.metrics.corehub_errors.inc_by(failed.len() as u64);
            warn!(failed = failed.len(), first = %id, error = %e, "maintenance requests failed; retrying");
            // Let the failed ones be asked again on the next pass.
            if let Ok(mut sent) = self.sent.lock() {
                for (id, _) in &failed {
                    sent.remove(&(uid.clone(), id.clone(), enter));
                }
            }
        }
    }
}

/// Settings of one GKO process.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The namespace GKO manages; it never looks outside it.
    pub namespace: String,
    /// This process's name in events (the pod name in a cluster).
    pub instance: Option<String>,
    /// Address of the Conductor API, if it is served.
    pub conductor_addr: Option<std::net::SocketAddr>,
    /// The Conductor API's certificate and key, for HTTPS.
    pub conductor_tls: Option<crate::conductor::TlsFiles>,
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// How many steps one reconcile may take in a row before it lets others run.
const STEPS_PER_RECONCILE: usize = 32;

#[instrument(skip_all, fields(gsp = %gsp.name_any()))]
async fn reconcile(gsp: Arc<GluesyncPlatform>, ctx: Arc<Context>) -> Result<RequeueAction, Error> {
    if !ctx.metrics.ready.load(std::sync::atomic::Ordering::Relaxed) {
        // Deciding from half-filled caches would report workloads missing that are not.
        return Ok(RequeueAction::requeue(Duration::from_millis(50)));
    }
    ctx.metrics.reconciles.inc();
    let mut gsp = gsp.as_ref().clone();
    let api: Api<GluesyncPlatform> = Api::namespaced(ctx.writer.client().clone(), &ctx.namespace);
    if gsp.status.as_ref().is_some_and(|s| s.update.is_some()) {
        // An update acts on what it reads: read the latest, not the cache.
        gsp = api.get(&gsp.name_any()).await.map_err(Error::Read)?;
    }
    let mut next_check = None;
    for _ in 0..STEPS_PER_RECONCILE {
        let workloads = ctx.workloads();
        let step = gsp
            .status
            .as_ref()
            .and_then(|s| s.update.as_ref())
            .map(|u| u.step);
        let mut corehub = None;
        let pipelines = if matches!(step, Some(UpdateStep::Drain | UpdateStep::Resume)) {
            Some(match ctx.corehub(&gsp, &workloads).await {
                Ok(client) => {
                    let r = client.pipelines().await.map_err(|e| e.to_string());
                    if r.is_err() {
                        ctx.metrics.corehub_errors.inc();
                    }
                    corehub = Some(client);
                    r
                }
                Err(e) => Err(e),
            })
        } else {
            None
        };
        let catalog = if step == Some(UpdateStep::Preflight) {
            ctx.catalog(&gsp, &workloads).await
        } else {
            None
        };
        // The periodic catalog check, between updates.
        let mut check = None;
        if step.is_none() {
            match catalog::due(&gsp, &now()) {
                Some(wait) if wait.is_zero() => {
                    check = Some(ctx.check_catalog(&gsp, &workloads).await);
                }
                Some(wait) => next_check = Some(wait),
                None => next_check = None,
            }
        }
        let decision = update::decide(
            &gsp,
            &Observed {
                now: now(),
                workloads: &workloads,
                pipelines,
                catalog: catalog.as_ref(),
                check,
            },
        );

        if gsp.status.as_ref() != Some(&decision.status) {
            match ctx.writer.write_status(&gsp, &decision.status).await {
                Ok(written) => {
                    observe_steps(
                        &ctx,
                        &gsp.uid().unwrap_or_default(),
                        gsp.status.as_ref(),
                        &decision.status,
                    );
                    let s = &decision.status;
                    info!(
                        phase = s.phase.map(|p| p.as_str()).unwrap_or(""),
                        step = s
                            .update
                            .as_ref()
                            .map(|u| format!("{:?}", u.step))
                            .unwrap_or_default(),
                        message = s.message.as_deref().unwrap_or(""),
                        "status updated"
                    );
                    let before =
                        crate::status::stalled(gsp.status.as_ref()).map(|(r, _)| r.to_string());
                    let stalled = crate::status::stalled(written.status.as_ref())
                        .filter(|(r, _)| before.as_deref() != Some(*r) && !r.starts_with("Update"))
                        .map(|(r, m)| (r.to_string(), m.to_string()));
                    gsp = written;
                    if let Some((reason, message)) = stalled {
                        record(&ctx, &gsp, true, &reason, message).await;
                    }
                }
                Err(e) if cluster::is_conflict(&e) => return Err(Error::StaleRead),
                Err(e) => return Err(Error::WriteStatus(e)),
            }
        }

        for action in decision.actions {
            execute(&ctx, &gsp, corehub.as_deref(), action).await;
        }
        for event in decision.events {
            record(&ctx, &gsp, event.warning, event.reason, event.message).await;
        }
        if !decision.again {
            let after = match (decision.requeue, next_check) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return Ok(match after {
                Some(after) => RequeueAction::requeue(after),
                None => RequeueAction::await_change(),
            });
        }
    }
    Ok(RequeueAction::requeue(Duration::from_millis(10)))
}

/// Step durations and update results, from one status to the next. A step's start is taken from this
/// process's clock when it saw the step begin (status timestamps have whole seconds only), else from the
/// status.
fn observe_steps(
    ctx: &Context,
    uid: &str,
    before: Option<&crate::api::GluesyncPlatformStatus>,
    after: &crate::api::GluesyncPlatformStatus,
) {
    let metrics = &ctx.metrics;
    let next = after.update.as_ref();
    let Ok(mut clock) = ctx.step_clock.lock() else {
        return;
    };
    let started = clock.remove(uid);
    if let Some(u) = next {
        clock.insert(uid.to_string(), (u.step, Instant::now()));
    }
    let Some(prev) = before.and_then(|s| s.update.as_ref()) else {
        return;
    };
    if next.map(|u| u.step) == Some(prev.step) {
        if let Some(s) = started {
            clock.insert(uid.to_string(), s);
        }
        return;
    }
    let took = match started {
        Some((step, at)) if step == prev.step => at.elapsed().as_secs_f64(),
        _ => jiff::Timestamp::now()
            .duration_since(prev.step_started_at.0)
            .as_secs_f64(),
    };
    metrics
        .step_seconds
        .get_or_create(&crate::metrics::StepLabel {
            step: format!("{:?}", prev.step),
        })
        .observe(took.max(0.0));
    if next.is_none()
        && let Some(attempt) = &after.last_attempt
    {
        metrics
            .updates
            .get_or_create(&crate::metrics::ResultLabel {
                result: format!("{:?}", attempt.result),
            })
            .inc();
    }
}

async fn record(
    ctx: &Context,
    gsp: &GluesyncPlatform,
    warning: bool,
    reason: &str,
    message: String,
) {
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    if let Err(e) = ctx.writer.event(gsp, type_, reason, message).await {
        warn!(error = %e, reason, "recording an event failed");
    }
}

async fn execute(ctx: &Context, gsp: &GluesyncPlatform, corehub: Option<&CoreHub>, action: Action) {
    let ns = &ctx.namespace;
    match action {
        Action::SetImage {
            kind,
            name,
            container,
            image,
        } => {
            info!(workload = %name, %image, "setting image");
            if let Err(e) = ctx
                .writer
                .set_image(ns, kind, &name, &container, &image)
                .await
            {
                warn!(workload = %name, error = %e, "setting the image failed; retrying");
            }
        }
        Action::DeletePod(pod) => {
            info!(%pod, "deleting a pod of the failed revision");
            if let Err(e) = ctx.writer.delete_pod(ns, &pod).await {
                warn!(%pod, error = %e, "deleting the pod failed; retrying");
            }
        }
        Action::Pause(ids) | Action::Resume(ids) if corehub.is_none() => {
            warn!(
                pipelines = ids.len(),
                "no Core Hub client for maintenance requests"
            );
        }
        Action::Pause(ids) => {
            if let Some(c) = corehub {
                ctx.maintenance(gsp, c, ids, true).await;
            }
        }
        Action::Resume(ids) => {
            if let Some(c) = corehub {
                ctx.maintenance(gsp, c, ids, false).await;
            }
        }
    }
}

fn error_policy(gsp: Arc<GluesyncPlatform>, error: &Error, ctx: Arc<Context>) -> RequeueAction {
    match error {
        Error::StaleRead => RequeueAction::requeue(Duration::from_millis(50)),
        _ => {
            ctx.metrics.reconcile_errors.inc();
            warn!(gsp = %gsp.name_any(), %error, "reconcile failed; retrying in 2 s");
            RequeueAction::requeue(Duration::from_secs(2))
        }
    }
}

/// A watch of one kind in the namespace, into a cache, without managed fields (they are large and unused).
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, config)
            .modify(|o: &mut K| o.meta_mut().managed_fields = None)
            .default_backoff(),
    )
    .touched_objects();
    (store, stream)
}

/// Runs GKO's controller on one namespace until `shutdown` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_str();
    let labelled = watcher::Config::default().labels(TYPE_LABEL).any_semantic();
    let (statefulsets, sts_stream) = cached(
        Api::<StatefulSet>::namespaced(client.clone(), ns),
        labelled.clone(),
    );
    let (deployments, deploy_stream) =
        cached(Api::<Deployment>::namespaced(client.clone(), ns), labelled);
    let (pods, pod_stream) = cached(
        Api::<Pod>::namespaced(client.clone(), ns),
        watcher::Config::default().any_semantic(),
    );

    let ctx = Arc::new(Context {
        writer: Writer::new(client.clone(), metrics.clone(), settings.instance.clone()),
        metrics: metrics.clone(),
        namespace: ns.to_string(),
        statefulsets: statefulsets.clone(),
        deployments: deployments.clone(),
        pods: pods.clone(),
        corehubs: Mutex::default(),
        sent: Mutex::default(),
        step_clock: Mutex::default(),
    });

    let (stop_api, mut api_stopped) = tokio::sync::watch::channel(false);
    if let Some(addr) = settings.conductor_addr {
        let tls = settings.conductor_tls.clone();
        let api_ctx = ctx.clone();
        tokio::spawn(async move {
            let stopped = async move {
                let _ = api_stopped.wait_for(|s| *s).await;
            };
            if let Err(e) = crate::conductor::serve(addr, tls, api_ctx, stopped).await {
                warn!(error = %e, %addr, "the Conductor API stopped");
            }
        });
    }

    let gsps: Api<GluesyncPlatform> = Api::namespaced(client.clone(), ns);
    let controller = Controller::new(gsps, watcher::Config::default().any_semantic());
    let platforms = controller.store();
    let every_platform = move || {
        platforms
            .state()
            .iter()
            .map(|g| ObjectRef::from_obj(g.as_ref()))
            .collect::<Vec<_>>()
    };
    let (for_sts, for_deploy, for_pods) = (
        every_platform.clone(),
        every_platform.clone(),
        every_platform,
    );

    // Ready once every cache has listed the namespace.
    let ready_metrics = metrics.clone();
    let (s, d, p) = (statefulsets, deployments, pods);
    tokio::spawn(async move {
        if s.wait_until_ready().await.is_ok()
            && d.wait_until_ready().await.is_ok()
            && p.wait_until_ready().await.is_ok()
        {
            ready_metrics
                .ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });

    info!(
        namespace = ns,
        "watching GluesyncPlatforms, labelled workloads and their pods"
    );
    controller
        .watches_stream(sts_stream, move |_| for_sts())
        .watches_stream(deploy_stream, move |_| for_deploy())
        .watches_stream(pod_stream, move |_| for_pods())
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
    let _ = stop_api.send(true);
    info!("controller stopped");
}
