//! Every write GKO makes to the cluster goes through [`Writer`], and only while this GKO holds the Lease:
//! a GKO that is not the leader, or lost the Lease, writes nothing.

use crate::cluster::wording::Said;
use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{ConfigMap, ObjectReference, Pod, Secret, Service},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    core::NamespaceResourceScope,
    core::Status,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use serde_json::json;

use crate::{
    api::{
        FIELD_MANAGER, FINALIZER, GluesyncPlatform, GluesyncPlatformStatus, Made,
        REQUEST_ANNOTATION, UiRequest, WorkloadKind,
    },
    cluster::lease::Leadership,
    metrics::Metrics,
};

/// How many events may wait to be published; past it, a new one is dropped (and said in the log).
const EVENT_QUEUE: usize = 1024;

/// An event waiting to be published.
struct Queued {
    reference: ObjectReference,
    event: Event,
}

/// Every write GKO makes to the cluster, gated by the Lease.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    /// Events go to one task that publishes them in order, off the update's path: an update does not
    /// wait for its events, and they are published in the order they were recorded.
    events: tokio::sync::mpsc::Sender<Queued>,
    metrics: Arc<Metrics>,
    leadership: Leadership,
}

/// How many times a pre-pull pod an admission policy refuses is asked for (see [`Writer::create_pod`]).
pub const POLICY_TRIES: u32 = 10;

/// A write refused by the API server because the object changed since it was read.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

/// A write this GKO did not make because it does not hold the Lease.
pub fn is_not_leader(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.reason == "NotLeader")
}

impl Writer {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: Option<String>,
        leadership: Leadership,
    ) -> Writer {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance,
        };
        let recorder = Recorder::new(client.clone(), reporter);
        let (events, queue) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        tokio::spawn(publish_events(recorder, leadership.clone(), queue));
        Writer {
            events,
            client,
            metrics,
            leadership,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// Refuses when this GKO does not hold the Lease.
    fn gate(&self) -> Result<(), kube::Error> {
        if self.leadership.is_leader() || crate::update::mutated(crate::update::Mutant::IgnoreLease)
        {
            Ok(())
        } else {
            Err(kube::Error::Api(
                Status::failure("this GKO does not hold the Lease", "NotLeader")
                    .with_code(503)
                    .boxed(),
            ))
        }
    }

    /// Writes the whole status, owned by GKO's field manager. The object's `resourceVersion` goes with it,
    /// so a status computed from a stale read is refused (409) instead of undoing a newer one.
    pub async fn write_status(
        &self,
        gsp: &GluesyncPlatform,
        status: &GluesyncPlatformStatus,
    ) -> Result<GluesyncPlatform, kube::Error> {
        self.gate()?;
        let result = self
            .apply_to_platform(gsp, "status", json!(status), true)
            .await;
        self.metrics.status_writes.inc();
        result
    }

    /// Sets the image of one container of a managed workload, and nothing else. Server-side apply under
    /// GKO's field manager, forced: GKO owns the images it writes. Answers the workload's generation
    /// after the write.
    pub async fn set_image(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
        container: &str,
        image: &str,
    ) -> Result<Option<i64>, kube::Error> {
        self.gate()?;
        let kind_name = match kind {
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Deployment => "Deployment",
        };
        let mut patch = json!({
            "apiVersion": "apps/v1",
            "kind": kind_name,
            "metadata": { "name": name },
            "spec": { "template": { "spec": { "containers": [ { "name": container, "image": image } ] } } },
        });
        if crate::update::mutated(crate::update::Mutant::PullPolicy) {
            patch["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        }
        self.patch_kind(
            namespace,
            kind,
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    }

    /// GKO's own Deployment: the image of `container` (when given) and the `gluesync.molo17.com/self-update`
    /// annotation (removed when `phase` is `None`), in one strategic merge patch.
    pub async fn self_update(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
        image: Option<&str>,
        phase: Option<crate::api::SelfUpdatePhase>,
    ) -> Result<Option<i64>, kube::Error> {
        self.gate()?;
        let mut patch = json!({
            "metadata": { "annotations": {
                crate::api::SELF_UPDATE_ANNOTATION: phase.map(|p| p.as_str()),
            } },
        });
        if let Some(image) = image {
            patch["spec"] = json!({ "template": { "spec": { "containers": [ { "name": container, "image": image } ] } } });
        }
        self.metrics.workload_writes.inc();
        Api::<Deployment>::namespaced(self.client.clone(), namespace)
            .patch(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                },
                &Patch::Strategic(&patch),
            )
            .await
            .map(|d| d.metadata.generation)
    }

    /// Deletes a pod (a stuck pod of a failed StatefulSet revision, so the rollback can proceed).
    pub async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        self.metrics.workload_writes.inc();
        self.delete::<Pod>(namespace, name).await
    }

    /// Creates a pod (a pre-pull pod); one of that name already there is fine. The chart's admission
    /// policy reads the pod's entry in the platform's status (`status.update.prePulls`) from the API
    /// server's cache, which may be a moment behind the status write just made: a refusal by an admission
    /// policy is tried again, [`POLICY_TRIES`] times in all, 100 ms apart, before it counts.
    pub async fn create_pod(&self, pod: &Pod) -> Result<(), kube::Error> {
        self.gate()?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace);
        let params = kube::api::PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let mut tries = 1;
        loop {
            self.metrics.workload_writes.inc();
            match api.create(&params, pod).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
                Err(kube::Error::Api(s))
                    if tries < POLICY_TRIES && s.message.contains("ValidatingAdmissionPolicy") =>
                {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes a namespaced object; one already gone is fine.
    async fn delete<K>(&self, namespace: &str, name: &str) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.gate()?;
        match Api::<K>::namespaced(self.client.clone(), namespace)
            .delete(name, &Default::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes a ConfigMap that holds part of a long pipeline list (server-side apply, GKO's field manager).
    pub async fn apply_configmap(&self, cm: &ConfigMap) -> Result<(), kube::Error> {
        self.apply(cm).await
    }

    /// Changes a managed workload's pod template with a strategic merge patch (a disaster-recovery
    /// setup, or putting one back).
    pub async fn patch_workload(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Option<i64>, kube::Error> {
        self.gate()?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.patch_kind(namespace, kind, name, &params, &Patch::Strategic(patch))
            .await
    }

    /// One patch of a managed StatefulSet or Deployment.
    async fn patch_kind(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
        params: &PatchParams,
        patch: &Patch<&serde_json::Value>,
    ) -> Result<Option<i64>, kube::Error> {
        self.metrics.workload_writes.inc();
        match kind {
            WorkloadKind::StatefulSet => {
                Api::<StatefulSet>::namespaced(self.client.clone(), namespace)
                    .patch(name, params, patch)
                    .await
                    .map(|o| o.metadata.generation)
            }
            WorkloadKind::Deployment => {
                Api::<Deployment>::namespaced(self.client.clone(), namespace)
                    .patch(name, params, patch)
                    .await
                    .map(|o| o.metadata.generation)
            }
        }
    }

    /// Writes the disaster-recovery Service (server-side apply, GKO's field manager, forced).
    pub async fn apply_service(&self, service: &Service) -> Result<(), kube::Error> {
        self.apply(service).await
    }

    /// Writes the pair's shared secret into the disaster-recovery Secret, which the chart (or
    /// deploy/rbac.yaml) creates empty: GKO's Role has no `create` on Secrets, so that whoever holds its
    /// token cannot make the cluster fill a ServiceAccount token into a Secret GKO may read. A merge
    /// patch of an existing Secret; the label marks it as written by this platform's setup. The
    /// material is never logged.
    pub async fn write_pair_secret(
        &self,
        namespace: &str,
        name: &str,
        platform: &str,
        shared_secret: &str,
    ) -> Result<(), kube::Error> {
        self.gate()?;
        let patch = json!({
            "metadata": {"labels": {crate::api::PLATFORM_LABEL: platform}},
            "data": {crate::api::DR_SECRET_KEY: k8s_openapi::ByteString(shared_secret.as_bytes().to_vec())},
        });
        self.patch_secret(namespace, name, &patch).await
    }

    /// Writes `spec.disasterRecovery` (the whole of it, or removes it with `None`) only if the platform
    /// is still at the resourceVersion it was read at: a JSON patch whose first operation tests it. A
    /// failed test answers 422, as does a setup the API server refuses (read the platform again to tell
    /// them apart).
    pub async fn write_disaster_recovery_spec(
        &self,
        gsp: &GluesyncPlatform,
        spec: Option<&crate::api::DisasterRecoverySpec>,
    ) -> Result<GluesyncPlatform, kube::Error> {
        self.gate()?;
        let mut ops = vec![
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": gsp.resource_version()}),
        ];
        match spec {
            Some(spec) => {
                ops.push(json!({"op": "add", "path": "/spec/disasterRecovery", "value": spec}))
            }
            None if gsp.spec.disaster_recovery.is_some() => {
                ops.push(json!({"op": "remove", "path": "/spec/disasterRecovery"}))
            }
            None => return Ok(gsp.clone()),
        }
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
            .map_err(kube::Error::SerdeError)?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let ns = gsp.namespace().unwrap_or_default();
        Api::<GluesyncPlatform>::namespaced(self.client.clone(), &ns)
            .patch(&gsp.name_any(), &params, &Patch::<()>::Json(patch))
            .await
    }

    /// One merge patch of a Secret GKO may patch by name.
    async fn patch_secret(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), kube::Error> {
        self.metrics.workload_writes.inc();
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
    }

    /// Server-side apply of a whole namespaced object GKO owns, under its field manager, forced.
    async fn apply<K>(&self, object: &K) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.gate()?;
        let mut body = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        body["apiVersion"] = json!(K::api_version(&()));
        body["kind"] = json!(K::kind(&()));
        if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("managedFields");
        }
        self.metrics.workload_writes.inc();
        Api::<K>::namespaced(self.client.clone(), &object.namespace().unwrap_or_default())
            .patch(
                &object.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map(|_| ())
    }

    /// Removes what a disaster-recovery setup made: deletes the Service, empties the pair's Secret; one
    /// already gone is fine.
    pub async fn remove_made(
        &self,
        namespace: &str,
        kind: Made,
        name: &str,
    ) -> Result<(), kube::Error> {
        match kind {
            Made::Service => self.delete::<Service>(namespace, name).await,
            // The Secret is the chart's: emptied, never deleted (GKO could not create it again).
            Made::Secret => {
                self.gate()?;
                let patch = json!({
                    "metadata": {"labels": {crate::api::PLATFORM_LABEL: null}},
                    "data": {crate::api::DR_SECRET_KEY: null},
                });
                match self.patch_secret(namespace, name, &patch).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    other => other,
                }
            }
        }
    }

    /// Deletes a ConfigMap of a pipeline list no status names any more.
    pub async fn delete_configmap(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        self.delete::<ConfigMap>(namespace, name).await
    }

    /// Puts GKO's finalizer on the platform (`on`), or takes it off, keeping every other finalizer.
    /// The platform as written, or `None` when nothing was to change or it is gone.
    pub async fn set_finalizer(
        &self,
        gsp: &GluesyncPlatform,
        on: bool,
    ) -> Result<Option<GluesyncPlatform>, kube::Error> {
        self.gate()?;
        let mut finalizers: Vec<String> = gsp
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        if on {
            finalizers.push(FINALIZER.to_string());
        }
        if finalizers.len() == gsp.finalizers().len()
            && gsp.finalizers().iter().any(|f| f == FINALIZER) == on
        {
            return Ok(None);
        }
        // A merge patch replaces the whole list; the resourceVersion makes it fail (409) if the list
        // changed since it was read.
        let patch = json!({
            "metadata": { "resourceVersion": gsp.resource_version(), "finalizers": finalizers },
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.metrics.workload_writes.inc();
        let api: Api<GluesyncPlatform> =
            Api::namespaced(self.client.clone(), &gsp.namespace().unwrap_or_default());
        match api
            .patch(&gsp.name_any(), &params, &Patch::Merge(&patch))
            .await
        {
            Ok(written) => Ok(Some(written)),
            // Already gone: nothing holds it any more.
            Err(kube::Error::Api(s)) if s.code == 404 && !on => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes an update request from the Core Hub UI into the spec: `version`, `modules` and a fresh
    /// `requestID`, under GKO's field manager, with the request's release channel and who asked in the
    /// annotation `gluesync.molo17.com/request`. The controller then runs it like any other spec change.
    ///
    /// Not gated by the Lease: it relays a user's request, and the Conductor API answers on every replica
    /// (the Lease holder then runs the update).
    pub async fn write_update_request(
        &self,
        gsp: &GluesyncPlatform,
        version: &str,
        modules: &BTreeMap<String, String>,
        request: &UiRequest,
    ) -> Result<GluesyncPlatform, kube::Error> {
        let request_id = &request.id;
        let request = request.to_annotation();
        let ns = gsp.namespace().unwrap_or_default();
        let api: Api<GluesyncPlatform> = Api::namespaced(self.client.clone(), &ns);
        let patch = json!({
            "apiVersion": GluesyncPlatform::api_version(&()),
            "kind": GluesyncPlatform::kind(&()),
            "metadata": {
                "resourceVersion": gsp.resource_version(),
                "annotations": { REQUEST_ANNOTATION: request },
            },
            "spec": { "version": version, "modules": modules, "requestID": request_id },
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&gsp.name_any(), &params, &Patch::Apply(&patch))
            .await
    }

    /// Server-side apply of one part (`spec` or `status`) of a GluesyncPlatform under GKO's field manager,
    /// with the resourceVersion it was read at: a write computed from a stale read is refused (409).
    async fn apply_to_platform(
        &self,
        gsp: &GluesyncPlatform,
        part: &str,
        value: serde_json::Value,
        subresource: bool,
    ) -> Result<GluesyncPlatform, kube::Error> {
        let ns = gsp.namespace().unwrap_or_default();
        let api: Api<GluesyncPlatform> = Api::namespaced(self.client.clone(), &ns);
        let mut patch = json!({
            "apiVersion": GluesyncPlatform::api_version(&()),
            "kind": GluesyncPlatform::kind(&()),
            "metadata": { "resourceVersion": gsp.resource_version() },
        });
        patch[part] = value;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if subresource {
            api.patch_status(&gsp.name_any(), &params, &Patch::Apply(&patch))
                .await
        } else {
            api.patch(&gsp.name_any(), &params, &Patch::Apply(&patch))
                .await
        }
    }

    /// Records an event on the GluesyncPlatform: queued at once, published in order by the events task.
    /// Events with the same reason and message form one series (a count that grows); a new message starts
    /// a new event (see [`series_action`]).
    pub fn event<K: Resource<DynamicType = ()>>(
        &self,
        gsp: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        self.gate()?;
        let note = fit_note(note);
        let queued = Queued {
            reference: gsp.object_ref(&()),
            event: Event {
                type_,
                reason: reason.into(),
                action: series_action(reason, &note),
                note: Some(note),
                secondary: None,
            },
        };
        self.events.try_send(queued).map_err(|_| {
            kube::Error::Api(
                Status::failure("too many events wait to be published", "EventsQueueFull")
                    .with_code(503)
                    .boxed(),
            )
        })?;
        self.metrics.events.inc();
        Ok(())
    }
}

/// Publishes the queued events one after the other, while this GKO holds the Lease. A failure is said
/// in the log; the event is not tried again (the recorder's series carry on with the next one).
async fn publish_events(
    recorder: Recorder,
    leadership: Leadership,
    mut queue: tokio::sync::mpsc::Receiver<Queued>,
) {
    while let Some(q) = queue.recv().await {
        if !leadership.is_leader() {
            continue;
        }
        if let Err(e) = recorder.publish(&q.event, &q.reference).await {
            tracing::warn!(error = %Said(&e), reason = %q.event.reason, "recording an event failed");
        }
    }
}

/// The `action` of an event: the recorder makes one series of events that share their action (with the
/// reason and the object) and keeps the first one's message, so the action carries the message. Without
/// it, the second update's `UpdateStarted` would show the first one's message with a count of 2.
/// The API server refuses an event whose note is over 1024 bytes: a longer one is cut, and says so.
fn fit_note(note: String) -> String {
    const MAX: usize = 1024;
    if note.len() <= MAX {
        return note;
    }
    let mut end = MAX - " [...]".len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [...]", &note[..end])
}

fn series_action(reason: &str, note: &str) -> String {
    // A stable hash (FNV-1a, the same in every build and release, unlike `DefaultHasher`): the same
    // message maps to the same series across restarts and upgrades.
    let digest = crate::api::ids::digest(&[note]);
    // The API server allows 128 characters.
    format!("{reason}/{digest}").chars().take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::{fit_note, series_action};

    #[test]
    fn a_long_note_is_cut_to_what_the_api_server_takes() {
        let long = "é".repeat(700);
        let cut = fit_note(long.clone());
        assert!(cut.len() <= 1024, "{}", cut.len());
        assert!(cut.ends_with(" [...]"));
        assert!(long.starts_with(cut.trim_end_matches(" [...]")));
        assert_eq!(fit_note("short".into()), "short");
    }

    #[test]
    fn a_new_message_is_a_new_series() {
        let a = series_action("UpdateStarted", "update to 2.3.2.2 asked by alice");
        assert_eq!(
            a,
            series_action("UpdateStarted", "update to 2.3.2.2 asked by alice")
        );
        assert_ne!(
            a,
            series_action("UpdateStarted", "update to 2.3.2.3 asked by bob")
        );
        assert!(series_action(&"R".repeat(200), "x").len() <= 128);
        // The same in every build and release: a restarted or upgraded GKO continues the series.
        assert_eq!(series_action("R", "x"), "R/08f0de07b58d2b17");
    }
}
