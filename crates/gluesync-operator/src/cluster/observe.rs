//! The snapshot a decision is made on: one owned value built from the caches, the background work's
//! reports and the few reads an update needs fresh (the GluesyncPlatform itself while an update runs,
//! its long lists, the disaster-recovery pair's Secret and Service). [`update::decide`] reads it; nothing
//! it holds changes while the decision is made.
//!
//! [`update::decide`]: crate::update::decide

use k8s_openapi::{
    api::core::v1::{ConfigMap, Service},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{Api, ResourceExt};
use tracing::warn;

use crate::{
    api::{DR_SECRET_KEY, DisasterRecoveryPhase, GluesyncPlatform, PLATFORM_LABEL, Problem},
    cluster::{
        spill::{Known, NotYet},
        view::{SecretError, View},
    },
    update::{
        Observed,
        catalog::Answer,
        corehub::{Report, Target},
        disaster::{self, DrObjects, SecretState},
        observed::Workload,
    },
};

/// A platform as this GKO last wrote it (or read it back).
#[derive(Clone, Debug)]
pub struct LastSeen {
    /// Its resourceVersion: a cache that holds it needs no read.
    pub version: String,
    /// Its status had an update: one not cached yet may be all the cache lacks (an update's first
    /// status written, its earlier decisions having gone unwritten).
    pub in_update: bool,
}

/// The GluesyncPlatform to decide on: the cached one, or the API server's latest unless the cache holds
/// the very version this GKO wrote or read last (`written`), when GKO knows of none yet (it just
/// started, or took the Lease), when the version it wrote last had an update, while it holds a decision
/// not written (`holding`: its update may not be in the status yet), while the cached status has an
/// update (an update acts on what it reads) or the platform is being deleted; with its long pipeline
/// lists joined back in, so the engine sees every id. `Ok(None)` while a list's ConfigMaps do not yet
/// hold what the status names (the cache lags a write): try again shortly.
pub async fn platform(
    view: &View,
    lists: &Known,
    cached: &GluesyncPlatform,
    written: Option<&LastSeen>,
    holding: bool,
) -> Result<Option<GluesyncPlatform>, kube::Error> {
    let mut gsp = cached.clone();
    let caught_up =
        written.is_some_and(|w| Some(w.version.as_str()) == cached.resource_version().as_deref());
    if !caught_up
        && (written.is_none_or(|w| w.in_update)
            || holding
            || gsp.status.as_ref().is_some_and(|s| s.update.is_some())
            || gsp.metadata.deletion_timestamp.is_some())
    {
        gsp = view.read_platform(&gsp.name_any()).await?;
    }
    if let Some(mut status) = gsp.status.take() {
        let missing = lists.missing(&gsp, &status);
        let mut read = vec![];
        if !missing.is_empty() {
            let configmaps: Api<ConfigMap> =
                Api::namespaced(view.writer.client().clone(), &view.namespace);
            for name in &missing {
                read.extend(configmaps.get_opt(name).await?);
            }
        }
        let refs: Vec<&ConfigMap> = read.iter().collect();
        if let Err(NotYet(what)) = lists.join(&gsp, &mut status, &refs) {
            warn!(%what, "waiting for the ConfigMaps of a long pipeline list to hold what the status names");
            return Ok(None);
        }
        gsp.status = Some(status);
    }
    Ok(Some(gsp))
}

/// Everything a decision reads besides the GluesyncPlatform, owned.
pub struct Snapshot {
    pub now: Time,
    pub workloads: Vec<Workload>,
    pub corehub: Report,
    pub catalog: Option<Answer>,
    pub target: Option<Target>,
    pub access_problem: Option<Problem>,
    pub me: Option<String>,
    pub dr: DrObjects,
    pub pre_pulls: Vec<crate::update::observed::PrePullPod>,
}

impl Snapshot {
    /// The snapshot of now: the cached workloads and their pods, what the background work reported, and
    /// the pair's objects as last read.
    pub fn take(
        view: &View,
        gsp: &GluesyncPlatform,
        corehub: Report,
        catalog: Option<Answer>,
        dr: &DrObjects,
    ) -> Snapshot {
        let workloads = view.workloads();
        let access_problem = view.access.problem(gsp, &workloads, &view.namespace);
        let target = access_problem
            .is_none()
            .then(|| Target::of(gsp, &workloads, &view.namespace))
            .flatten();
        // The image this GKO runs, read from its own pod.
        let me = view.instance.as_ref().and_then(|pod| {
            workloads
                .iter()
                .flat_map(|w| &w.pods)
                .find(|p| &p.name == pod)
                .map(|p| p.image.clone())
        });
        Snapshot {
            now: Time(jiff::Timestamp::now()),
            workloads,
            corehub,
            catalog,
            target,
            access_problem,
            me,
            dr: dr.clone(),
            pre_pulls: view.pre_pull_pods(),
        }
    }

    /// The snapshot as the engine reads it.
    pub fn observed(&self) -> Observed<'_> {
        Observed {
            now: self.now.clone(),
            workloads: &self.workloads,
            corehub: &self.corehub,
            catalog: self.catalog.as_ref(),
            target: self.target.clone(),
            access_problem: self.access_problem.clone(),
            me: self.me.clone(),
            dr: self.dr.clone(),
            pre_pulls: &self.pre_pulls,
        }
    }
}

/// The disaster-recovery Secret and Service, read when a setup is wanted or in place (never the
/// Secret's material: only whether it holds some).
pub async fn dr_objects(view: &View, gsp: &GluesyncPlatform) -> Result<DrObjects, kube::Error> {
    let wanted = gsp.spec.disaster_recovery.as_ref();
    let reached = gsp
        .status
        .as_ref()
        .and_then(|s| s.disaster_recovery.as_ref());
    let restoring = reached.is_some_and(|r| {
        matches!(
            r.phase,
            DisasterRecoveryPhase::RollingBack | DisasterRecoveryPhase::TearingDown
        )
    });
    let name = match (wanted, reached) {
        (_, Some(r)) if restoring => r.secret_name.clone(),
        (Some(w), _) => disaster::secret_name(gsp, w),
        (None, Some(r)) => r.secret_name.clone(),
        (None, None) => return Ok(DrObjects::default()),
    };
    let secret = match view.secret(&name).await {
        Err(SecretError::NotAllowed(_)) => SecretState::NotAllowed,
        Err(SecretError::Read(_, e)) => SecretState::Unreadable(e.to_string()),
        Ok(None) => SecretState::Missing,
        Ok(Some(secret)) => {
            let has_key = secret
                .data
                .as_ref()
                .and_then(|d| d.get(DR_SECRET_KEY))
                .is_some_and(|v| !v.0.is_empty());
            // Written by this platform's setup from the Core Hub UI (GKO 0.3 also owned it).
            let made_by_gko = secret
                .labels()
                .get(PLATFORM_LABEL)
                .is_some_and(|p| Some(p) == gsp.metadata.name.as_ref());
            // One GKO wrote is GKO's to empty, whatever it holds; one without the key is refused.
            if has_key {
                SecretState::Present { made_by_gko }
            } else {
                SecretState::NoKey { made_by_gko }
            }
        }
    };
    let service = Api::<Service>::namespaced(view.writer.client().clone(), &view.namespace)
        .get_opt(&disaster::service_name(gsp))
        .await?
        .is_some();
    Ok(DrObjects { secret, service })
}
