//! What GKO has read of its namespace, shared by the controller and the Conductor API: the watch caches
//! of the GluesyncPlatforms, the labelled workloads and their pods, the one writer, and a signal that
//! moves whenever a GluesyncPlatform changes in the cache (what the Conductor API waits on instead of
//! polling the API server).

use std::sync::{Arc, atomic::Ordering};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{ConfigMap, Pod, Secret},
};
use kube::{Api, ResourceExt, core::DeserializeGuard, runtime::reflector::Store};
use tokio::sync::watch;

use crate::{
    api::GluesyncPlatform,
    cluster::watches::{PodCache, PodSelector},
    cluster::writer::Writer,
    metrics::Metrics,
    update::observed::Workload,
};

pub struct View {
    pub namespace: String,
    pub writer: Writer,
    pub metrics: Arc<Metrics>,
    /// The GluesyncPlatforms, each as it parsed or did not (see [`Platform`]).
    pub platforms: Store<DeserializeGuard<GluesyncPlatform>>,
    pub statefulsets: Store<StatefulSet>,
    pub deployments: Store<Deployment>,
    /// The pods of the labelled workloads (see [`crate::cluster::watches`]).
    pub pods: PodCache,
    /// Which pods the pod watch should select; [`View::pods_listed`] keeps it current.
    pub pods_wanted: watch::Sender<PodSelector>,
    /// The ConfigMaps that hold long pipeline lists (see [`crate::cluster::spill`]).
    pub spilled: Store<ConfigMap>,
    /// The pre-pull pods (see [`crate::update::prepull`]).
    pub pre_pulls: Store<Pod>,
    /// The pre-pull pods the API server refused to create: name, then the platform, when and why.
    pub refused_pods: std::sync::Mutex<std::collections::BTreeMap<String, RefusedPod>>,
    /// The writes just made, which the watch caches may not show yet.
    pub recent: Recent,
    /// The workload generations this process's writes made, which the caches must show before a
    /// decision reads the workloads.
    pub written: Written,
    /// Moves whenever a GluesyncPlatform changes in the cache.
    pub changed: watch::Sender<u64>,
    /// This process's name (the pod name in a cluster).
    pub instance: Option<String>,
    /// The Secrets it may read and the Core Hub URLs it may call.
    pub access: crate::update::access::Access,
}

/// Writes this process just made, by the object they wrote (`StatefulSet/<name>/<container>`, a pod's
/// name) and what they wrote: a decision made before the watch cache shows a write would ask for it
/// again (an image set twice, a pod created twice), an API request that changes nothing, on the
/// update's way. The same write to the same object within [`RECENT`] is not made again; after that it
/// is (were it undone meanwhile, the next decision makes it again).
#[derive(Default)]
pub struct Recent(
    std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
);

/// How long a write counts as just made (far beyond a watch event's delay).
pub const RECENT: std::time::Duration = std::time::Duration::from_secs(2);

impl Recent {
    /// Was `what` just written to `object`?
    pub fn just_made(&self, object: &str, what: &str) -> bool {
        let all = self.0.lock().expect("recent writes lock");
        all.get(object)
            .is_some_and(|(w, at)| w == what && at.elapsed() < RECENT)
    }

    /// `what` was written to `object` now.
    pub fn made(&self, object: &str, what: &str) {
        let mut all = self.0.lock().expect("recent writes lock");
        all.retain(|_, (_, at)| at.elapsed() < RECENT);
        all.insert(
            object.to_string(),
            (what.to_string(), std::time::Instant::now()),
        );
    }

    /// `object` was written otherwise (deleted, say): what was made before no longer holds.
    pub fn forget(&self, object: &str) {
        self.0.lock().expect("recent writes lock").remove(object);
    }
}

/// The generation each workload write of this process answered with, by workload (`StatefulSet/<name>`):
/// a decision waits until the watch cache shows at least that generation. Decided on a copy from before
/// its own write, GKO would take the write for not made (a disaster-recovery teardown took a workload
/// whose setup the cache did not show yet for clean, and left the setup on it).
#[derive(Default)]
pub struct Written(std::sync::Mutex<std::collections::HashMap<String, (i64, std::time::Instant)>>);

/// How long a written generation is waited for at most (beyond it the decision goes ahead, and says so).
pub const WRITTEN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Written {
    /// `object` was written now, and is at `generation` after the write.
    pub fn wrote(&self, object: &str, generation: i64) {
        let mut all = self.0.lock().expect("written generations lock");
        all.insert(object.to_string(), (generation, std::time::Instant::now()));
    }

    /// A written object whose `cached` generation is behind the write, if any; the others are
    /// forgotten (caught up, no longer cached, or waited for longer than [`WRITTEN_WAIT`]: let go with
    /// a warning).
    pub fn lagging(&self, cached: impl Fn(&str) -> Option<i64>) -> Option<String> {
        let mut all = self.0.lock().expect("written generations lock");
        all.retain(|object, (generation, at)| {
            let seen = cached(object);
            let behind = seen.is_some_and(|c| c < *generation);
            if behind && at.elapsed() >= WRITTEN_WAIT {
                tracing::warn!(%object, generation, ?seen, "the watch cache did not show GKO's write in time; deciding on it as it is");
                return false;
            }
            behind
        });
        all.keys().next().cloned()
    }
}

/// A pre-pull pod the API server refused to create.
#[derive(Clone, Debug)]
pub struct RefusedPod {
    pub platform: String,
    pub owner: Option<String>,
    pub node: String,
    pub image: String,
    pub at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    pub message: String,
}

/// A cached GluesyncPlatform that parsed, shared with the cache (not copied).
/// Only [`Platform::parsed`] makes one.
#[derive(Clone, Debug)]
pub struct Platform(Arc<DeserializeGuard<GluesyncPlatform>>);

impl Platform {
    pub fn parsed(guard: Arc<DeserializeGuard<GluesyncPlatform>>) -> Option<Platform> {
        guard.0.is_ok().then_some(Platform(guard))
    }
}

impl std::ops::Deref for Platform {
    type Target = GluesyncPlatform;

    fn deref(&self) -> &GluesyncPlatform {
        match &self.0.0 {
            Ok(gsp) => gsp,
            // `parsed` made this Platform from a guard holding a platform.
            Err(_) => unreachable!("a Platform holds a GluesyncPlatform that parsed"),
        }
    }
}

impl AsRef<GluesyncPlatform> for Platform {
    fn as_ref(&self) -> &GluesyncPlatform {
        self
    }
}

/// Why a Secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("Secret {0} is not one this GKO may read")]
    NotAllowed(String),
    #[error("reading Secret {0}: {1}")]
    Read(String, #[source] kube::Error),
}

impl View {
    /// Secret `name` of the namespace, read from the API server only when this GKO's installation allows
    /// it (`Ok(None)`: it does not exist). A 403 is `NotAllowed` too.
    pub async fn secret(&self, name: &str) -> Result<Option<Secret>, SecretError> {
        secret(self.writer.client(), &self.namespace, &self.access, name).await
    }

    /// The GluesyncPlatform `name` as the API server has it now (not the cache).
    pub async fn read_platform(&self, name: &str) -> Result<GluesyncPlatform, kube::Error> {
        Api::<GluesyncPlatform>::namespaced(self.writer.client().clone(), &self.namespace)
            .get(name)
            .await
    }

    /// True once every cache has listed the namespace.
    pub fn ready(&self) -> bool {
        self.metrics.ready.load(Ordering::Relaxed)
    }

    /// A workload whose cached copy does not show this process's last write to it yet, if any. A
    /// workload no longer cached has nothing to wait for; one waited for longer than [`WRITTEN_WAIT`]
    /// is let go with a warning.
    pub fn lagging_write(&self) -> Option<String> {
        self.written.lagging(|object| self.generation_of(object))
    }

    /// The generation of a cached workload (`StatefulSet/<name>` or `Deployment/<name>`).
    fn generation_of(&self, object: &str) -> Option<i64> {
        fn in_store<K: kube::Resource + Clone>(store: &Store<K>, name: &str) -> Option<i64>
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            store
                .state()
                .iter()
                .find(|o| o.meta().name.as_deref() == Some(name))
                .and_then(|o| o.meta().generation)
        }
        let (kind, name) = object.split_once('/')?;
        match kind {
            "StatefulSet" => in_store(&self.statefulsets, name),
            "Deployment" => in_store(&self.deployments, name),
            _ => None,
        }
    }

    /// True when the pod cache holds every pod of the labelled workloads now cached. If their set
    /// changed, the pod watch is told the new selector, and this is false until its list is in.
    pub fn pods_listed(&self) -> bool {
        let want = PodSelector::of_workloads(&self.statefulsets, &self.deployments);
        let listed = self.pods.covers(&want);
        self.pods_wanted.send_if_modified(|w| {
            let new = *w != want;
            if new {
                match &want {
                    PodSelector::Everything => tracing::warn!(
                        "the labelled workloads' selectors share no label key: GKO watches every pod \
                         of the namespace and tells them apart by their owner"
                    ),
                    other => tracing::info!(pods = ?other, "watching the labelled workloads' pods"),
                }
                *w = want;
            }
            new
        });
        listed
    }

    /// The namespace's GluesyncPlatform (GKO manages one per namespace), from the cache; one that does
    /// not parse is none.
    pub fn platform(&self) -> Option<Platform> {
        let mut all: Vec<Platform> = self
            .platforms
            .state()
            .into_iter()
            .filter_map(Platform::parsed)
            .collect();
        all.sort_by_key(|g| g.name_any());
        all.into_iter().next()
    }

    /// The phase of GKO's own update while its new pod rolls out or back (`RollingOut`, `RollingBack`),
    /// from the platform's `status.selfUpdate` (the Deployment's annotation mirrors it).
    pub fn self_updating(&self) -> Option<String> {
        // The platform's status is the record (the Deployment's annotation mirrors it and may lag).
        let gsp = self.platform()?;
        let su = gsp.status.as_ref()?.self_update.as_ref()?;
        matches!(
            su.phase,
            crate::api::SelfUpdatePhase::RollingOut | crate::api::SelfUpdatePhase::RollingBack
        )
        .then(|| su.phase.as_str().to_string())
    }

    /// A number that changes whenever a labelled workload or one of its pods changes in the caches
    /// (each object's uid and resourceVersion, summed so the caches' order does not matter): what a
    /// reader of [`View::workloads`] can key a derived answer on, without building the workloads.
    pub fn workloads_version(&self) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        fn sum<K: kube::Resource>(tag: u8, objects: Vec<Arc<K>>) -> u64 {
            let hasher = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default();
            objects.iter().fold(objects.len() as u64, |acc, o| {
                let mut h = hasher.build_hasher();
                tag.hash(&mut h);
                o.meta().uid.hash(&mut h);
                o.meta().name.hash(&mut h);
                o.meta().resource_version.hash(&mut h);
                acc.wrapping_add(h.finish())
            })
        }
        sum(0, self.statefulsets.state())
            .wrapping_add(sum(1, self.deployments.state()))
            .wrapping_add(sum(2, self.pods.store.state()))
    }

    /// Remembers that the API server refused to create the pre-pull pod `pod`.
    pub fn refused_pod(&self, name: &str, pod: &Pod, message: String) {
        let Some(seen) = crate::update::prepull::observe(pod) else {
            return;
        };
        let refused = RefusedPod {
            platform: seen.platform,
            owner: seen.owner,
            node: seen.node,
            image: seen.image,
            at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            message,
        };
        let mut all = self.refused_pods.lock().expect("refusals lock");
        all.insert(name.to_string(), refused);
        // A handful at most: the refusals of pods that were never made, newest kept.
        while all.len() > 64 {
            let oldest = all
                .iter()
                .min_by_key(|(_, r)| r.at.0)
                .map(|(n, _)| n.clone())
                .expect("not empty");
            all.remove(&oldest);
        }
    }

    /// The pre-pull pods as the engine reads them: those that exist, and those refused that do not.
    pub fn pre_pull_pods(&self) -> Vec<crate::update::observed::PrePullPod> {
        use crate::update::observed::{PrePullPod, PullState};
        let mut seen: Vec<PrePullPod> = self
            .pre_pulls
            .state()
            .iter()
            .filter_map(|p| crate::update::prepull::observe(p))
            .collect();
        let refused = self.refused_pods.lock().expect("refusals lock");
        for (name, r) in refused.iter() {
            if !seen.iter().any(|p| &p.name == name) {
                seen.push(PrePullPod {
                    name: name.clone(),
                    platform: r.platform.clone(),
                    owner: r.owner.clone(),
                    node: r.node.clone(),
                    image: r.image.clone(),
                    state: PullState::Refused(r.at.clone(), r.message.clone()),
                });
            }
        }
        seen
    }

    /// The labelled workloads of the namespace with their pods, from the watch caches.
    pub fn workloads(&self) -> Vec<Workload> {
        let pods = self.pods.store.state();
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
}

/// Secret `name` of `namespace`, read only when `access` allows it: the one way GKO reads a Secret.
pub async fn secret(
    client: &kube::Client,
    namespace: &str,
    access: &crate::update::access::Access,
    name: &str,
) -> Result<Option<Secret>, SecretError> {
    if !access.secret_allowed(name) {
        return Err(SecretError::NotAllowed(name.to_string()));
    }
    match Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
    {
        Ok(found) => Ok(found),
        Err(kube::Error::Api(s)) if s.code == 403 => Err(SecretError::NotAllowed(name.to_string())),
        Err(e) => Err(SecretError::Read(name.to_string(), e)),
    }
}

#[cfg(test)]
mod tests {

    /// A decision waits until the cache shows the generation GKO's own write answered with; a workload
    /// no longer cached is not waited for.
    #[test]
    fn a_decision_waits_for_the_cache_to_show_gkos_own_workload_write() {
        let written = super::Written::default();
        written.wrote("StatefulSet/chronos", 7);
        let cache = std::cell::Cell::new(Some(6));
        assert_eq!(
            written.lagging(|_| cache.get()).as_deref(),
            Some("StatefulSet/chronos")
        );
        cache.set(Some(7));
        assert_eq!(written.lagging(|_| cache.get()), None);
        // Caught up once is forgotten: a later, older copy does not hold decisions.
        cache.set(Some(6));
        assert_eq!(written.lagging(|_| cache.get()), None);
        written.wrote("Deployment/gone", 3);
        assert_eq!(written.lagging(|_| None), None);
    }

    use super::Recent;

    #[test]
    fn a_write_just_made_is_not_made_again_but_any_other_is() {
        let r = Recent::default();
        let sts = "StatefulSet/gluesync-core-hub/core-hub";
        assert!(!r.just_made(sts, "2.3.2.2"));
        r.made(sts, "2.3.2.2");
        assert!(r.just_made(sts, "2.3.2.2"));
        // A rollback's image is written at once, and so is the way back after it.
        assert!(!r.just_made(sts, "2.3.2.1"));
        r.made(sts, "2.3.2.1");
        assert!(!r.just_made(sts, "2.3.2.2"));
        // A pod deleted is made again when asked.
        r.made("Pod/p", "");
        assert!(r.just_made("Pod/p", ""));
        r.forget("Pod/p");
        assert!(!r.just_made("Pod/p", ""));
    }
}
