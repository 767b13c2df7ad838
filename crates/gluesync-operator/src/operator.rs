//! One GKO process on one namespace: the watch caches, the Lease, the background workers, the controller
//! and the Conductor API, started together and stopped in order (the controller, then the Core Hub calls
//! in hand, then the Lease is released).

use crate::cluster::wording::Said;
use std::{
    collections::HashSet,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{ConfigMap, Pod},
};
use kube::{
    Api, Client, ResourceExt,
    core::DeserializeGuard,
    runtime::{Controller, reflector::ObjectRef, watcher},
};
use tracing::{info, warn};

use crate::{
    api::{GluesyncPlatform, TYPE_LABEL},
    background::Tasks,
    cluster::lease::{self, Leadership},
    cluster::view::View,
    cluster::watches::{self, PodSelector, cached},
    cluster::writer::Writer,
    controller::{self, Context},
    corehub::worker,
    metrics::Metrics,
};

/// Settings of one GKO process.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The namespace GKO manages; it never looks outside it.
    pub namespace: String,
    /// This process's name in events and in the Lease (the pod name in a cluster).
    pub instance: Option<String>,
    /// Address of the Conductor API, if it is served.
    pub conductor_addr: Option<std::net::SocketAddr>,
    /// The Conductor API's certificate and key, for HTTPS.
    pub conductor_tls: Option<crate::conductor::TlsFiles>,
    /// Leader election durations; `None` runs without a Lease (a single GKO, as in some tests).
    pub leader_election: Option<lease::Durations>,
    /// The Secrets GKO may read and the Core Hub URLs it may send credentials to.
    pub access: crate::update::access::Access,
}

impl Settings {
    pub fn new(namespace: impl Into<String>) -> Settings {
        Settings {
            namespace: namespace.into(),
            instance: None,
            conductor_addr: None,
            conductor_tls: None,
            leader_election: Some(lease::Durations::default()),
            access: crate::update::access::Access::default(),
        }
    }
}

/// How long a stop waits for the controller to finish the reconciles in hand.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The identity of this process in the Lease: the pod name, else `gluesync-operator-`, the host name
/// and a random suffix (as client-go's leader election does), so that two processes on one host never
/// share an identity and both believe they lead.
fn identity(settings: &Settings) -> String {
    settings.instance.clone().unwrap_or_else(|| {
        use std::hash::{BuildHasher, Hasher};
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let mut random = std::collections::hash_map::RandomState::new().build_hasher();
        random.write_u32(std::process::id());
        format!("gluesync-operator-{host}_{:016x}", random.finish())
    })
}

/// Runs GKO on one namespace until `shutdown` resolves: the Lease, the watches and the view they fill,
/// the background work, the Conductor API, then the controller; stopped in order.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = futures::FutureExt::shared(shutdown);
    // A deliberate bug asked for by a test is said at once (and an unknown one stops GKO here).
    #[cfg(all(not(test), feature = "test-hooks"))]
    crate::update::process_mutant();
    let ns = settings.namespace.as_str();
    let (leadership, elector) = match &settings.leader_election {
        Some(durations) => {
            let (l, e) = lease::start(client.clone(), ns, identity(&settings), durations.clone());
            (l, Some(e))
        }
        None => (Leadership::always(), None),
    };
    let (view, streams) = watch(&client, &settings, &metrics, &leadership);
    // Each watch backs off on its own; the controller's pause on any of their errors (30 s at most by
    // default, for every trigger at once) is kept as short.
    let controller = Controller::for_stream(streams.platforms, view.platforms.clone())
        .trigger_backoff(watches::watch_backoff());

    // Background work wakes the controller for its platform.
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let env = Arc::new(worker::Env {
        client: client.clone(),
        namespace: ns.to_string(),
        leadership: leadership.clone(),
        instance: settings.instance.clone(),
        metrics: metrics.clone(),
        stopping: Default::default(),
        access: settings.access.clone(),
    });
    let worker_env = env.clone();
    let corehub = Tasks::new(wake.clone(), move |input| {
        worker::run(worker_env.clone(), input)
    });
    let catalog = Tasks::new(wake, crate::catalog::poller::run);
    let ctx = Arc::new(Context::new(view.clone(), corehub, catalog));

    let stop_api = serve_conductor_api(&settings, &view).await;
    report_ready(&view);
    report_leadership(&leadership, &metrics);
    let forget = forget_deleted(&ctx);

    // Every platform is reconciled when a workload changes, when a pod a managed workload owns changes,
    // and when this GKO takes the Lease. (A workload's change may change which pods are watched: the
    // reconcile it triggers tells the pod watch, `View::pods_listed`.)
    let (for_sts, for_deploy) = (every_platform(&view), every_platform(&view));
    let acquired = futures::stream::unfold(leadership.subscribe(), |mut taken| async move {
        loop {
            taken.changed().await.ok()?;
            if *taken.borrow_and_update() {
                return Some(((), taken));
            }
        }
    });
    info!(
        namespace = ns,
        "watching GluesyncPlatforms, labelled workloads and their pods"
    );
    let running = controller
        .watches_stream(streams.statefulsets, move |_| for_sts())
        .watches_stream(streams.deployments, move |_| for_deploy())
        .watches_stream(streams.pods, owned_pods(&view))
        .watches_stream(streams.pre_pulls, |pod: Pod| {
            platform_of(&pod, crate::api::PRE_PULL_LABEL)
        })
        .watches_stream(streams.spilled, |cm: ConfigMap| {
            platform_of(&cm, crate::cluster::spill::LABEL)
        })
        .reconcile_on(woken)
        .reconcile_all_on(acquired)
        .graceful_shutdown_on(shutdown.clone())
        .run(controller::reconcile, controller::error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                match e {
                    kube::runtime::controller::Error::ReconcilerFailed(..) => {}
                    other => warn!(error = %Said(&other), "controller"),
                }
            }
        });
    // A graceful stop waits for the reconciles in hand; but a controller whose cache of GluesyncPlatforms
    // never filled (stopped as it started, or with the API server out of reach) waits for that cache
    // forever. So the stop is graceful for a few seconds at most, then the controller is dropped (its
    // reconciles cancelled, as a kill would): SIGTERM always ends GKO well inside a pod's grace period.
    tokio::select! {
        _ = running => {}
        _ = async {
            shutdown.await;
            tokio::time::sleep(STOP_GRACE).await;
        } => warn!(
            seconds = STOP_GRACE.as_secs(),
            "the controller had not stopped this long after the stop signal; stopping it"
        ),
    }
    forget.abort();
    let _ = stop_api.send(true);
    // The Core Hub calls in hand finish; then the Lease goes, so another GKO takes over at once.
    env.stopping.store(true, Ordering::Relaxed);
    ctx.corehub.stop(Duration::from_secs(5)).await;
    drop(ctx);
    if let Some(elector) = elector {
        elector.release().await;
    }
    info!("controller stopped");
}

/// The event streams of the watches, for the controller's triggers.
struct Streams<G, S, D, P, C, R> {
    platforms: G,
    statefulsets: S,
    deployments: D,
    pods: P,
    spilled: C,
    pre_pulls: R,
}

type Events<K> = Result<K, watcher::Error>;

/// The watches of the namespace and the view their caches make: the GluesyncPlatforms, the labelled
/// workloads, the pods their selectors match, the spilled lists and the pre-pull pods. (The streams'
/// types are opaque, one per watch: the return type names them all.)
#[allow(clippy::type_complexity)]
fn watch(
    client: &Client,
    settings: &Settings,
    metrics: &Arc<Metrics>,
    leadership: &Leadership,
) -> (
    Arc<View>,
    Streams<
        impl futures::Stream<Item = Events<DeserializeGuard<GluesyncPlatform>>> + Send + use<>,
        impl futures::Stream<Item = Events<StatefulSet>> + Send + use<>,
        impl futures::Stream<Item = Events<Deployment>> + Send + use<>,
        impl futures::Stream<Item = Events<Pod>> + Send + use<>,
        impl futures::Stream<Item = Events<ConfigMap>> + Send + use<>,
        impl futures::Stream<Item = Events<Pod>> + Send + use<>,
    >,
) {
    let ns = settings.namespace.as_str();
    let labelled = watcher::Config::default().labels(TYPE_LABEL).any_semantic();
    let (statefulsets, sts_stream) = cached(
        Api::<StatefulSet>::namespaced(client.clone(), ns),
        labelled.clone(),
        metrics,
    );
    let (deployments, deploy_stream) = cached(
        Api::<Deployment>::namespaced(client.clone(), ns),
        labelled,
        metrics,
    );
    // Only the pods the labelled workloads' selectors match (see `watches`).
    let pods_wanted = tokio::sync::watch::channel(PodSelector::Nothing).0;
    let (pods, pod_stream) = watches::pods(
        Api::<Pod>::namespaced(client.clone(), ns),
        pods_wanted.subscribe(),
        metrics,
    );
    let (spilled, spilled_stream) = cached(
        Api::<ConfigMap>::namespaced(client.clone(), ns),
        watcher::Config::default()
            .labels(crate::cluster::spill::LABEL)
            .any_semantic(),
        metrics,
    );
    // The pre-pull pods GKO makes before a drain (see `update::prepull`).
    let (pre_pulls, pre_pull_stream) = cached(
        Api::<Pod>::namespaced(client.clone(), ns),
        watcher::Config::default()
            .labels(crate::api::PRE_PULL_LABEL)
            .any_semantic(),
        metrics,
    );
    // One watch of the GluesyncPlatforms feeds the controller and the Conductor API's view; `changed`
    // moves on each of its events (what the Conductor API waits on).
    let changed = tokio::sync::watch::channel(0u64).0;
    let (platforms, gsp_stream) = cached(
        Api::<DeserializeGuard<GluesyncPlatform>>::namespaced(client.clone(), ns),
        watcher::Config::default().any_semantic(),
        metrics,
    );
    let bump = changed.clone();
    let gsp_stream = gsp_stream.inspect(move |_| bump.send_modify(|n| *n = n.wrapping_add(1)));
    let view = Arc::new(View {
        namespace: ns.to_string(),
        writer: Writer::new(
            client.clone(),
            metrics.clone(),
            settings.instance.clone(),
            leadership.clone(),
        ),
        metrics: metrics.clone(),
        platforms,
        statefulsets,
        deployments,
        pods,
        pods_wanted,
        spilled,
        pre_pulls,
        refused_pods: Default::default(),
        recent: Default::default(),
        written: Default::default(),
        changed,
        instance: settings.instance.clone(),
        access: settings.access.clone(),
    });
    let streams = Streams {
        platforms: gsp_stream,
        statefulsets: sts_stream,
        deployments: deploy_stream,
        pods: pod_stream,
        spilled: spilled_stream,
        pre_pulls: pre_pull_stream,
    };
    (view, streams)
}

/// Serves the Conductor API when it is asked for, bound before the controller starts (once GKO has
/// written a status, its API accepts connections); it stops when the answer is sent `true`.
async fn serve_conductor_api(
    settings: &Settings,
    view: &Arc<View>,
) -> tokio::sync::watch::Sender<bool> {
    let (stop_api, mut api_stopped) = tokio::sync::watch::channel(false);
    let Some(addr) = settings.conductor_addr else {
        return stop_api;
    };
    let bound = tokio::net::TcpListener::bind(addr).await;
    let tls = settings.conductor_tls.clone();
    let api_view = view.clone();
    tokio::spawn(async move {
        let stopped = async move {
            let _ = api_stopped.wait_for(|s| *s).await;
        };
        let metrics = api_view.metrics.clone();
        let served = match bound {
            Ok(listener) => crate::conductor::serve(listener, tls, api_view, stopped).await,
            Err(e) => Err(e),
        };
        if let Err(e) = served {
            // Not ready: the Core Hub UI could not reach GKO through this pod.
            metrics.conductor_down.store(true, Ordering::Relaxed);
            tracing::error!(error = %Said(&e), %addr, "the Conductor API cannot serve; /readyz fails");
        }
    });
    stop_api
}

/// Ready once every cache has listed the namespace; the Lease has nothing to do with it. (The pod cache
/// is ready once it listed any selector; the controller also waits for the one of the current
/// workloads, `View::pods_listed`.)
fn report_ready(view: &View) {
    let ready_metrics = view.metrics.clone();
    let (s, d, p, c, pp) = (
        view.statefulsets.clone(),
        view.deployments.clone(),
        view.pods.store.clone(),
        view.spilled.clone(),
        view.pre_pulls.clone(),
    );
    tokio::spawn(async move {
        if s.wait_until_ready().await.is_ok()
            && d.wait_until_ready().await.is_ok()
            && p.wait_until_ready().await.is_ok()
            && c.wait_until_ready().await.is_ok()
            && pp.wait_until_ready().await.is_ok()
        {
            ready_metrics.ready.store(true, Ordering::Relaxed);
        }
    });
}

/// `leader`: whether this process holds the Lease, as exactly as `is_leader` says it, every second.
fn report_leadership(leadership: &Leadership, metrics: &Arc<Metrics>) {
    let (lead, lead_metrics) = (leadership.clone(), metrics.clone());
    tokio::spawn(async move {
        loop {
            lead_metrics.leader.set(i64::from(lead.is_leader()));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

/// Every 5 s, the background work and what the controller keeps of deleted platforms are let go.
fn forget_deleted(ctx: &Arc<Context>) -> tokio::task::JoinHandle<()> {
    let cleanup = ctx.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let live: HashSet<String> = cleanup
                .view
                .platforms
                .state()
                .iter()
                .filter_map(|g| g.uid())
                .collect();
            cleanup.corehub.retain(|uid| live.contains(uid));
            cleanup.catalog.retain(|uid| live.contains(uid));
            cleanup.lists.retain(|uid| live.contains(uid));
            cleanup.retain(|uid| live.contains(uid));
        }
    })
}

type PlatformRef = ObjectRef<DeserializeGuard<GluesyncPlatform>>;

/// Every platform of the namespace, for a trigger that concerns them all.
fn every_platform(view: &View) -> impl Fn() -> Vec<PlatformRef> + Clone + use<> {
    let platforms = view.platforms.clone();
    move || {
        platforms
            .state()
            .iter()
            .map(|g| ObjectRef::from_obj(g.as_ref()))
            .collect::<Vec<_>>()
    }
}

/// A pod's change concerns every platform when a labelled workload owns it, else none.
fn owned_pods(view: &Arc<View>) -> impl Fn(Pod) -> Vec<PlatformRef> + use<> {
    let managed = view.clone();
    let every = every_platform(view);
    move |pod: Pod| {
        let owned = crate::update::workloads::owner_of(&pod).is_some_and(|(_, name)| {
            managed
                .statefulsets
                .state()
                .iter()
                .any(|s| s.name_any() == name)
                || managed
                    .deployments
                    .state()
                    .iter()
                    .any(|d| d.name_any() == name)
        });
        if owned { every() } else { vec![] }
    }
}

/// The platform an object names in its `label` (a pre-pull pod, a spilled list).
fn platform_of(object: &impl ResourceExt, label: &str) -> Option<PlatformRef> {
    let platform = object.labels().get(label).cloned()?;
    Some(PlatformRef::new(&platform).within(&object.namespace()?))
}
