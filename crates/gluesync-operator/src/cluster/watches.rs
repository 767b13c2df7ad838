//! GKO's watches of its namespace, made so that their cost follows what GKO manages, not the namespace:
//!
//! - each object is cut down to the fields GKO reads before it is cached ([`keep_pod`], [`keep_meta`]), and
//!   an update that leaves those fields as the cache holds them (a resourceVersion-only change, a field GKO
//!   never reads) is dropped before it reaches the cache or the controller: no reconcile;
//! - the pods are watched through a label selector the API server applies, built from the selectors of the
//!   labelled workloads ([`PodSelector`]): a pod of an unrelated workload never reaches GKO. When the
//!   labelled workloads change, the pod watch starts again with the new selector, and the controller waits
//!   until the pod cache holds the list of that selector ([`PodCache::covers`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{Stream, StreamExt, stream::BoxStream};
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, StatefulSet},
        core::v1::{
            Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
            ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
        },
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use kube::{
    Api, Resource,
    core::DeserializeGuard,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        utils::ResetTimerBackoff,
        watcher,
    },
};
use tokio::sync::watch;

use crate::metrics::{KindLabel, Metrics};

/// The pause after a failed list or watch: 250 ms, doubling up to 5 s, back to 250 ms after any success
/// (and after a minute without a failure). After a restart of kube-apiserver every watch fails a few
/// times (refused connections, then "too old resource version" once), and with the default 30 s ceiling,
/// applied to each watch and again to all of the controller's triggers, GKO stayed blind to its
/// GluesyncPlatforms for minutes.
pub fn watch_backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(WATCH_BACKOFF_FIRST)
        .with_max_delay(WATCH_BACKOFF_MAX)
        .with_factor(2.0)
        .without_max_times();
    ResetTimerBackoff::new(exponential.into(), WATCH_BACKOFF_RESET)
}

const WATCH_BACKOFF_FIRST: Duration = Duration::from_millis(250);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(5);
const WATCH_BACKOFF_RESET: Duration = Duration::from_secs(60);

/// Objects GKO caches: `keep` cuts one down to what GKO reads.
pub trait Kept:
    Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    fn keep(&mut self);

    /// The cache holds it as it is: an update that changes nothing GKO reads is dropped.
    fn same(&self, other: &Self) -> bool;
}

/// A GluesyncPlatform as the watch delivers it: one that does not parse (a hand edit the CRD's schema
/// let through, a field of a newer GKO) is held as what it is, with its metadata, and never fails the
/// watch of the others; the controller reports it with a Warning event.
impl Kept for DeserializeGuard<crate::api::GluesyncPlatform> {
    fn keep(&mut self) {
        if let Ok(gsp) = &mut self.0 {
            gsp.keep();
        }
    }

    fn same(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Ok(a), Ok(b)) => a.same(b),
            (Err(a), Err(b)) => a.error == b.error && a.metadata == b.metadata,
            _ => false,
        }
    }
}

impl Kept for crate::api::GluesyncPlatform {
    /// Everything but the managed fields: GKO writes with the resourceVersion it read.
    fn keep(&mut self) {
        self.metadata.managed_fields = None;
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }
}

impl Kept for StatefulSet {
    fn keep(&mut self) {
        keep_meta(&mut self.metadata);
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }
}

impl Kept for Deployment {
    fn keep(&mut self) {
        keep_meta(&mut self.metadata);
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }
}

impl Kept for k8s_openapi::api::core::v1::ConfigMap {
    /// The spilled lists' ConfigMaps: their names, labels and annotations (the digest), not their ids,
    /// which GKO reads with a GET when it does not remember the list (see `spill::Known`).
    fn keep(&mut self) {
        keep_meta(&mut self.metadata);
        self.data = None;
        self.binary_data = None;
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }
}

impl Kept for Pod {
    fn keep(&mut self) {
        keep_pod(self);
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }
}

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What GKO never reads of a workload or ConfigMap it caches: the managed fields, the resourceVersion
/// (GKO never writes them with one) and `kubectl apply`'s copy of the object.
pub fn keep_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.resource_version = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// A pod cut down to what [`crate::cluster`] reads of it: name, uid, controller ownerReference, the
/// `pod-template-hash` label, the disaster-recovery annotation, each container's name and image, the Ready
/// condition, and each container's readiness, restart count and waiting reason.
pub fn keep_pod(pod: &mut Pod) {
    let meta = std::mem::take(&mut pod.metadata);
    let only = |m: Option<BTreeMap<String, String>>, key: &str| {
        let kept: BTreeMap<String, String> = m
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k == key)
            .collect();
        (!kept.is_empty()).then_some(kept)
    };
    pod.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        labels: meta.labels.and_then(|l| {
            let kept: BTreeMap<String, String> = l
                .into_iter()
                .filter(|(k, _)| {
                    k == crate::update::workloads::POD_TEMPLATE_HASH_LABEL
                        || k == crate::api::PRE_PULL_LABEL
                })
                .collect();
            (!kept.is_empty()).then_some(kept)
        }),
        deletion_timestamp: meta.deletion_timestamp,
        annotations: only(meta.annotations, crate::api::DR_ANNOTATION),
        owner_references: meta.owner_references.map(|o| {
            o.into_iter()
                .filter(|o| o.controller == Some(true))
                .collect()
        }),
        ..ObjectMeta::default()
    };
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        containers: spec
            .containers
            .into_iter()
            .map(|c| Container {
                name: c.name,
                image: c.image,
                ..Container::default()
            })
            .collect(),
        node_name: spec.node_name,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|status| PodStatus {
        conditions: status.conditions.map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(|c| PodCondition {
                    type_: c.type_,
                    status: c.status,
                    ..PodCondition::default()
                })
                .collect()
        }),
        container_statuses: status.container_statuses.map(|cs| {
            cs.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    ready: c.ready,
                    restart_count: c.restart_count,
                    // Whether it runs or ran (not since when), and why it waits.
                    state: c.state.map(|s| ContainerState {
                        waiting: s.waiting.map(|w| ContainerStateWaiting {
                            reason: w.reason,
                            message: w.message,
                        }),
                        running: s.running.map(|_| ContainerStateRunning::default()),
                        terminated: s.terminated.map(|t| ContainerStateTerminated {
                            exit_code: t.exit_code,
                            reason: t.reason,
                            ..ContainerStateTerminated::default()
                        }),
                    }),
                    image_id: c.image_id,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        phase: status.phase,
        reason: status.reason,
        message: status.message,
        ..PodStatus::default()
    });
}

/// Drops the updates that leave an object as the cache holds it (once cut down by [`Kept::keep`]).
/// Only `Apply` is ever dropped: a list (`InitApply`) rebuilds the cache and must pass whole.
fn changed_only<K: Kept>(
    store: Store<K>,
) -> impl FnMut(&watcher::Result<watcher::Event<K>>) -> futures::future::Ready<bool> {
    move |event| {
        let same = match event {
            Ok(watcher::Event::Apply(obj)) => store
                .get(&ObjectRef::from_obj(obj))
                .is_some_and(|held| held.same(obj)),
            _ => false,
        };
        futures::future::ready(!same)
    }
}

/// The events of one watch, each object cut down to what GKO reads, backing off as [`watch_backoff`] says.
fn kept_events<K: Kept>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + use<K> {
    watcher(api, config)
        .modify(K::keep)
        .backoff(watch_backoff())
}

/// Keeps the `cached_objects` gauge of `K` at the cache's size.
fn count<K: Kept>(
    store: Store<K>,
    metrics: &Metrics,
) -> impl FnMut(&watcher::Result<watcher::Event<K>>) + Send + use<K> {
    let gauge = metrics
        .cached
        .get_or_create(&KindLabel {
            kind: K::kind(&()).to_string(),
        })
        .clone();
    move |_| {
        gauge.set(store.len() as i64);
    }
}

/// A watch of one kind in the namespace, into a cache of what GKO reads (see [`Kept`]); the stream gives
/// the objects that changed.
pub fn cached<K: Kept>(
    api: Api<K>,
    config: watcher::Config,
    metrics: &Metrics,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + use<K>,
) {
    let (store, writer) = reflector::store();
    let events = kept_events(api, config).filter(changed_only(store.clone()));
    let stream = reflector::reflector(writer, events)
        .inspect(count(store.clone(), metrics))
        .touched_objects();
    (store, stream)
}

/// Which pods GKO watches: the narrowest label selector that still matches every pod of every labelled
/// workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodSelector {
    /// No labelled workload: no pod to watch.
    Nothing,
    /// The pods that match this label selector (applied by the API server).
    Labels(String),
    /// Every pod of the namespace: the labelled workloads' selectors share no label key.
    Everything,
}

impl PodSelector {
    /// From the labelled workloads' `spec.selector`s. For each label key that every selector requires
    /// (with `matchLabels` or an `In` expression), the pod must carry one of the values any of them
    /// allows: `app.kubernetes.io/name in (core-hub,chronos)`. That matches each workload's pods and
    /// perhaps a few more, which the controller tells apart by their owner.
    pub fn of<'a>(selectors: impl IntoIterator<Item = &'a LabelSelector>) -> PodSelector {
        let mut common: Option<BTreeMap<String, BTreeSet<String>>> = None;
        for s in selectors {
            let mut own: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (k, v) in s.match_labels.iter().flatten() {
                own.entry(k.clone()).or_default().insert(v.clone());
            }
            for e in s.match_expressions.iter().flatten() {
                if e.operator == "In" {
                    own.entry(e.key.clone())
                        .or_default()
                        .extend(e.values.iter().flatten().cloned());
                }
            }
            common = Some(match common {
                None => own,
                Some(mut all) => {
                    all.retain(|k, _| own.contains_key(k));
                    for (k, values) in all.iter_mut() {
                        values.extend(own.remove(k).unwrap_or_default());
                    }
                    all
                }
            });
        }
        let Some(common) = common else {
            return PodSelector::Nothing;
        };
        if common.is_empty() {
            return PodSelector::Everything;
        }
        let terms: Vec<String> = common
            .into_iter()
            .map(|(k, values)| match values.len() {
                1 => format!("{k}={}", values.first().expect("one value")),
                _ => format!(
                    "{k} in ({})",
                    values.into_iter().collect::<Vec<_>>().join(",")
                ),
            })
            .collect();
        PodSelector::Labels(terms.join(","))
    }

    /// The selector for the labelled workloads held in these caches.
    pub fn of_workloads(
        statefulsets: &Store<StatefulSet>,
        deployments: &Store<Deployment>,
    ) -> Self {
        let sts = statefulsets.state();
        let deploy = deployments.state();
        PodSelector::of(
            sts.iter()
                .filter_map(|s| s.spec.as_ref().map(|s| &s.selector))
                .chain(
                    deploy
                        .iter()
                        .filter_map(|d| d.spec.as_ref().map(|d| &d.selector)),
                ),
        )
    }
}

/// The pods' cache and which selector its content was listed with.
#[derive(Clone)]
pub struct PodCache {
    pub store: Store<Pod>,
    listed: watch::Receiver<Option<PodSelector>>,
}

impl PodCache {
    /// An empty cache, as listed when no workload is labelled (for a view without watches).
    pub fn empty() -> PodCache {
        PodCache {
            store: reflector::store().0,
            listed: watch::channel(Some(PodSelector::Nothing)).1,
        }
    }

    /// The cache holds every pod `selector` matches (its last complete list was made with it).
    pub fn covers(&self, selector: &PodSelector) -> bool {
        self.listed.borrow().as_ref() == Some(selector)
    }
}

/// The watch of the pods `wanted` selects, into a cache; a new selector starts the watch again (its list
/// replaces the cache's content).
pub fn pods(
    api: Api<Pod>,
    wanted: watch::Receiver<PodSelector>,
    metrics: &Metrics,
) -> (
    PodCache,
    impl Stream<Item = Result<Pod, watcher::Error>> + Send + use<>,
) {
    let (store, writer) = reflector::store();
    let listed = Arc::new(watch::channel(None).0);
    // The selector of the watch whose events flow now, set before its first event.
    let current = Arc::new(Mutex::new(PodSelector::Nothing));
    let events = switching(api, wanted, current.clone(), listed.clone())
        .filter(changed_only(store.clone()))
        .boxed();
    let cache = PodCache {
        store: store.clone(),
        listed: listed.subscribe(),
    };
    let stream = reflector::reflector(writer, events)
        .inspect(count(store, metrics))
        .inspect(move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                let now = current.lock().expect("selector lock").clone();
                listed.send_replace(Some(now));
            }
        })
        .touched_objects();
    (cache, stream)
}

/// The events of a pod watch on the selector `wanted` holds, started again whenever it changes.
///
/// When a watch starts, the cache counts as listed with no selector until that watch's list is in: its
/// content is the previous selector's, or one a dropped watch stopped updating.
fn switching(
    api: Api<Pod>,
    wanted: watch::Receiver<PodSelector>,
    current: Arc<Mutex<PodSelector>>,
    listed: Arc<watch::Sender<Option<PodSelector>>>,
) -> impl Stream<Item = watcher::Result<watcher::Event<Pod>>> + Send {
    type Events = BoxStream<'static, watcher::Result<watcher::Event<Pod>>>;
    let open = move |selector: &PodSelector| -> Events {
        let config = watcher::Config::default().any_semantic();
        let config = match selector {
            // An empty list, so that the cache empties and counts as listed.
            PodSelector::Nothing => {
                return futures::stream::iter([
                    Ok(watcher::Event::Init),
                    Ok(watcher::Event::InitDone),
                ])
                .chain(futures::stream::pending())
                .boxed();
            }
            PodSelector::Labels(labels) => config.labels(labels),
            PodSelector::Everything => config,
        };
        kept_events(api.clone(), config).boxed()
    };
    struct State<F> {
        wanted: watch::Receiver<PodSelector>,
        open: F,
        events: Option<Events>,
        current: Arc<Mutex<PodSelector>>,
        listed: Arc<watch::Sender<Option<PodSelector>>>,
        closed: bool,
    }
    let state = State {
        wanted,
        open,
        events: None,
        current,
        listed,
        closed: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        loop {
            if s.events.is_none() {
                let selector = s.wanted.borrow_and_update().clone();
                s.listed.send_replace(None);
                *s.current.lock().expect("selector lock") = selector.clone();
                s.events = Some((s.open)(&selector));
            }
            let events = s.events.as_mut().expect("opened above");
            if s.closed {
                let next = events.next().await?;
                return Some((next, s));
            }
            tokio::select! {
                changed = s.wanted.changed() => match changed {
                    // A selector that went and came back while the watch ran needs no new one.
                    Ok(()) => {
                        let same = *s.wanted.borrow_and_update()
                            == *s.current.lock().expect("selector lock");
                        if !same {
                            s.events = None;
                        }
                    }
                    Err(_) => s.closed = true,
                },
                next = events.next() => return Some((next?, s)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    use super::*;
    use crate::update::observed::PodView;

    #[test]
    fn a_platform_that_does_not_parse_is_cached_with_its_metadata() {
        let parse = |spec: serde_json::Value| {
            serde_json::from_value::<DeserializeGuard<crate::api::GluesyncPlatform>>(json!({
                "apiVersion": "gluesync.molo17.com/v1alpha1", "kind": "GluesyncPlatform",
                "metadata": {"name": "gluesync", "namespace": "ns", "resourceVersion": "7"},
                "spec": spec,
            }))
            .expect("the guard always parses")
        };
        let good = parse(json!({"version": "2.3.2.1"}));
        assert!(good.0.is_ok());
        // A field of another shape (a newer GKO's, a CRD that drifted): held as invalid, named.
        let bad = parse(json!({"version": 7}));
        let Err(invalid) = &bad.0 else {
            panic!("a number is no version")
        };
        assert_eq!(invalid.metadata.name.as_deref(), Some("gluesync"));
        assert!(invalid.error.contains("string"), "{}", invalid.error);
        // The cache drops what changes nothing, whether it parsed or not.
        let mut kept = bad.clone();
        kept.keep();
        assert!(kept.same(&bad) && !kept.same(&good) && good.same(&good.clone()));
    }

    fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: None,
        }
    }

    #[test]
    fn the_pod_selector_asks_for_the_labels_every_workload_requires() {
        assert_eq!(PodSelector::of([]), PodSelector::Nothing);
        let hub = labels(&[("app", "core-hub"), ("instance", "gluesync")]);
        assert_eq!(
            PodSelector::of([&hub]),
            PodSelector::Labels("app=core-hub,instance=gluesync".into())
        );
        let chronos = labels(&[("app", "chronos"), ("instance", "gluesync"), ("tier", "x")]);
        assert_eq!(
            PodSelector::of([&hub, &chronos]),
            PodSelector::Labels("app in (chronos,core-hub),instance=gluesync".into())
        );
        // An `In` expression counts as the values it allows.
        let grafana = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "In".into(),
                values: Some(vec!["grafana".into(), "grafana-2".into()]),
            }]),
        };
        assert_eq!(
            PodSelector::of([&hub, &grafana]),
            PodSelector::Labels("app in (core-hub,grafana,grafana-2)".into())
        );
        // Selectors with no key in common: every pod is watched, and told apart by its owner.
        let other = labels(&[("name", "prometheus")]);
        assert_eq!(PodSelector::of([&hub, &other]), PodSelector::Everything);
    }

    fn full_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "core-hub-0", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "core-hub", "pod-template-hash": "abc", "controller-revision-hash": "r1"},
                "annotations": {"gluesync.molo17.com/disaster-recovery": "primary", "other": "x"},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "core-hub", "uid": "s-1", "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c-1"}
                ],
                "managedFields": [{"manager": "kubelet"}]
            },
            "spec": {
                "nodeName": "kwok-node",
                "containers": [
                    {"name": "core-hub", "image": "molo17/gluesync-core-hub:2.3.2.2", "env": [{"name": "A", "value": "b"}]},
                    {"name": "sidecar", "image": "busybox"}
                ]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"},
                    {"type": "PodScheduled", "status": "True"}
                ],
                "containerStatuses": [
                    {"name": "core-hub", "image": "x", "imageID": "y", "ready": true, "restartCount": 3,
                     "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}},
                    {"name": "sidecar", "image": "x", "imageID": "y", "ready": false, "restartCount": 0,
                     "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}
                ]
            }
        }))
        .expect("a pod")
    }

    #[test]
    fn a_kept_pod_reads_as_the_full_one() {
        let full = full_pod();
        let mut kept = full.clone();
        kept.keep();
        for container in ["core-hub", "sidecar"] {
            let view = PodView::from_pod(&full, container).expect("a view");
            assert_eq!(PodView::from_pod(&kept, container), Some(view));
        }
        let view = PodView::from_pod(&kept, "core-hub").expect("a view");
        assert_eq!(
            (view.ready, view.restarts, view.dr_mark.as_deref()),
            (true, 3, Some("primary"))
        );
        assert_eq!(
            view.waiting,
            Some(("CrashLoopBackOff".into(), "back-off".into()))
        );
        assert_eq!(
            crate::update::workloads::owner_of(&kept),
            crate::update::workloads::owner_of(&full)
        );
        assert!(crate::update::workloads::owner_of(&kept).is_some());
        // What it no longer holds.
        assert_eq!(kept.metadata.resource_version, None);
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(
            kept.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        // The node stays: the pre-pull pulls on the nodes Core Hub's pods run on.
        assert_eq!(
            kept.spec.as_ref().and_then(|s| s.node_name.clone()),
            Some("kwok-node".into())
        );
        assert_eq!(view.node.as_deref(), Some("kwok-node"));
        // A change GKO does not read leaves the kept pod as it was.
        let mut later = full.clone();
        later.metadata.resource_version = Some("43".into());
        later.status.as_mut().unwrap().pod_ip = Some("10.0.0.2".into());
        later.keep();
        assert_eq!(later, kept);
        // One it reads does not.
        let mut restarted = full;
        restarted
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .restart_count = 4;
        restarted.keep();
        assert_ne!(restarted, kept);
    }
}
