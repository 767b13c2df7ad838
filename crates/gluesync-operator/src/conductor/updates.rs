//! An update asked through the API: the spec change it becomes (written with a fresh `requestID`), the
//! refusals, the wait for its end (answered from `status.lastAttempt`), and `/services/{id}/version`.

use super::*;

/// How long an update request waits for the update to end before it answers with the outcome so far.
pub(super) const UPDATE_WAIT: Duration = Duration::from_secs(900);

/// How often a request's spec write is tried again after a conflict (GKO's own status write, or any
/// other write, landed between the read and the write): each time re-read and re-decided.
pub(super) const REQUEST_WRITE_TRIES: usize = 5;

/// How long a request waits for its turn to decide (another request deciding and writing).
pub(super) const REQUEST_TURN: Duration = Duration::from_secs(10);

/// What an update request comes to once checked against the platform.
pub(super) enum Asked {
    /// Nothing new: the request asks what runs, or what is asked already, or what the last attempt
    /// of this generation reached; it gets that update's answer, and nothing is written.
    Join(Option<String>),
    /// New versions (or a retry of what did not succeed) to write into the spec.
    Write {
        version: String,
        modules: std::collections::BTreeMap<String, String>,
    },
}

/// Checks an update request and writes it into the spec unless it asks nothing new; the request id
/// whose attempt answers it. Requests decide one at a time (the turn is held while checking and writing,
/// never while the update runs), and a write that conflicts with another write is re-read and re-decided.
pub(super) async fn accept_update(
    api: &Api,
    caller: &Caller,
    ids: Vec<String>,
    channel: ReleaseChannel,
) -> Result<Option<String>, Response> {
    let gsp = api.platform()?;
    let workloads = api.view.workloads();
    refuse(&gsp, &workloads, &ids)?;
    // Versions to ask for: the latest on the request's channel, from the catalog.
    let latest = if gsp.spec.catalog.offline {
        return Err(failure(
            StatusCode::CONFLICT,
            "No version catalog",
            "this install is offline: set spec.version and spec.modules in the GluesyncPlatform",
        ));
    } else {
        let check = crate::update::catalog::check(&gsp, &workloads, String::new(), channel);
        match crate::catalog::latest(&check.base, channel, &check.images).await {
            Ok(l) => l,
            Err(e) => {
                return Err(failure(
                    StatusCode::BAD_GATEWAY,
                    "Unable to retrieve agent version",
                    e,
                ));
            }
        }
    };
    // The turn is taken once the catalog has answered: a slow catalog never holds other requests back.
    let Ok(_turn) = tokio::time::timeout(REQUEST_TURN, api.updating.lock()).await else {
        return Err(failure(
            StatusCode::CONFLICT,
            "An update is already running",
            "another update request is being written; wait for it to end, then ask again",
        ));
    };
    let mut gsp = api.platform()?;
    for attempt in 0..REQUEST_WRITE_TRIES {
        if attempt > 0 {
            gsp = api
                .view
                .read_platform(&kube::ResourceExt::name_any(&gsp))
                .await
                .map_err(|e| {
                    tracing::warn!(error = %Said(&e), "reading the GluesyncPlatform again failed");
                    failure(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Failed to do containers action",
                        "GKO could not read the GluesyncPlatform; nothing was changed, try again",
                    )
                })?;
        }
        let (version, modules) = match asked(&gsp, &workloads, &latest, &ids)? {
            Asked::Join(id) => return Ok(id),
            Asked::Write { version, modules } => (version, modules),
        };
        let request_id = format!("ui-{}", jiff::Timestamp::now().as_millisecond());
        let written = api
            .view
            .writer
            .write_update_request(
                &gsp,
                &version,
                &modules,
                &crate::api::UiRequest {
                    id: request_id.clone(),
                    channel,
                    ids: ids.clone(),
                    username: Some(caller.username.to_string()),
                    role: Some(caller.role.to_string()),
                },
            )
            .await;
        match written {
            Ok(_) => {}
            Err(e) if crate::cluster::writer::is_conflict(&e) => {
                tracing::debug!(%request_id, "the GluesyncPlatform changed before the request was written; deciding again");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %Said(&e), "writing an update request failed");
                return Err(failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Failed to do containers action",
                    "GKO could not write the request into the GluesyncPlatform; nothing was changed, try again",
                ));
            }
        }
        tracing::info!(
            gsp = %gsp.metadata.name.clone().unwrap_or_default(),
            %version,
            %request_id,
            username = %caller.username,
            role = %caller.role,
            "update requested from the Core Hub UI"
        );
        // The next request decides from a cache that holds this one.
        let mut changed = api.view.changed.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while api
                .view
                .platform()
                .is_none_or(|g| g.spec.request_id.as_deref() != Some(request_id.as_str()))
            {
                if changed.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
        return Ok(Some(request_id));
    }
    Err(failure(
        StatusCode::SERVICE_UNAVAILABLE,
        "Failed to do containers action",
        "the GluesyncPlatform kept changing while the request was written; nothing was changed, try again",
    ))
}

/// The refusals that do not depend on the catalog: updates managed in Git, GKO's own Deployment asked
/// for with self-update off, an unknown component.
#[allow(clippy::result_large_err)]
pub(super) fn refuse(
    gsp: &GluesyncPlatform,
    workloads: &[crate::update::observed::Workload],
    ids: &[String],
) -> Result<(), Response> {
    if gsp.spec.update_policy == UpdatePolicy::Gitops
        && !crate::update::mutated(crate::update::Mutant::UiUnderGitops)
    {
        return Err(failure(
            StatusCode::CONFLICT,
            "Updates of this install are managed in Git",
            "the GluesyncPlatform's updatePolicy is gitops: commit the new version to Git; nothing was changed",
        ));
    }
    for id in ids {
        if workloads
            .iter()
            .any(|w| &w.name == id && w.component_type == Some(ComponentType::Operator))
            && !gsp.spec.self_update.enabled
        {
            return Err(failure(
                StatusCode::CONFLICT,
                "GKO does not update itself here",
                format!(
                    "{id} is GKO's own Deployment and spec.selfUpdate.enabled is false: change its image with Helm"
                ),
            ));
        }
        if !workloads.iter().any(|w| &w.name == id) {
            return Err(failure(
                StatusCode::NOT_FOUND,
                "Unknown container",
                format!("no managed workload is named {id}"),
            ));
        }
    }
    Ok(())
}

/// What a request for `ids` (empty: every component) comes to on `gsp`, with the catalog's `latest`.
#[allow(clippy::result_large_err)]
pub(super) fn asked(
    gsp: &GluesyncPlatform,
    workloads: &[crate::update::observed::Workload],
    latest: &std::collections::BTreeMap<String, String>,
    ids: &[String],
) -> Result<Asked, Response> {
    // Checked again on every try: the platform may have changed since the request was first read.
    refuse(gsp, workloads, ids)?;
    // The latest version of a workload's image, when it is newer than the one that runs: the UI's update
    // never takes a component back (a beta that runs stays when GA is asked for).
    let latest_of = |w: &crate::update::observed::Workload| {
        let candidate = latest.get(ImageRef::parse(&w.image).name())?;
        let running = crate::api::version::image_version(&w.image).ok()?;
        let newer = candidate
            .parse::<crate::api::version::Version>()
            .is_ok_and(|c| c > running);
        newer.then(|| candidate.clone())
    };
    let core_hub = workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    let everything = ids.is_empty();
    let mut version = gsp.spec.version.clone();
    let mut modules = gsp.spec.modules.clone();
    for w in workloads {
        if !everything && !ids.contains(&w.name) {
            continue;
        }
        match w.component_type {
            Some(ComponentType::CoreHub | ComponentType::Agent) => {
                if let Some(v) = core_hub.and_then(latest_of) {
                    version = v;
                }
            }
            Some(ComponentType::Module) if everything => {
                // Unpinned modules follow the catalog with Core Hub; pinned ones move to the latest.
                if modules.contains_key(&w.name)
                    && let Some(v) = latest_of(w)
                {
                    modules.insert(w.name.clone(), v);
                }
            }
            Some(ComponentType::Module | ComponentType::ThirdParty) => {
                if let Some(v) = latest_of(w) {
                    modules.insert(w.name.clone(), v);
                }
            }
            // GKO itself, asked for by name: pinned, it updates itself alone, last (see update::selfupdate).
            // Under Update all, the catalog's latest is taken at the end of the update without a pin, and a
            // pin left from an earlier request moves to the latest too.
            Some(ComponentType::Operator) if !everything || modules.contains_key(&w.name) => {
                if let Some(v) = latest_of(w) {
                    modules.insert(w.name.clone(), v);
                }
            }
            _ => {}
        }
    }
    let status = gsp.status.clone().unwrap_or_default();
    let nothing_new = version == gsp.spec.version && modules == gsp.spec.modules;
    // A request of the UI written into the spec that no update has answered yet is one running.
    let answered = status
        .last_attempt
        .as_ref()
        .and_then(|a| a.request_id.as_ref());
    let attempt_generation = status.last_attempt.as_ref().and_then(|a| a.generation);
    let pending_ui_request = gsp
        .spec
        .request_id
        .as_ref()
        .is_some_and(|id| id.starts_with("ui-") && Some(id) != answered)
        && gsp.metadata.generation != attempt_generation;
    if status.update.is_some() || pending_ui_request {
        return match (&gsp.spec.request_id, nothing_new) {
            // The same request again: it gets the answer of the update that runs for it.
            (Some(id), true) => Ok(Asked::Join(Some(id.clone()))),
            _ => Err(failure(
                StatusCode::CONFLICT,
                "An update is already running",
                "wait for it to end, then ask again",
            )),
        };
    }
    // What the last attempt of this generation reached is asked again: its answer, no new update.
    if nothing_new
        && let Some(last) = &status.last_attempt
        && last.generation == gsp.metadata.generation
        && last.result == crate::api::UpdateResult::Succeeded
    {
        return Ok(Asked::Join(last.request_id.clone()));
    }
    Ok(Asked::Write { version, modules })
}

/// The answer for an update that waits, once GKO has seen the spec that asked for it: for a maintenance
/// window (`Scheduled`, with when), or for its approval.
pub(super) fn waiting(
    gsp: &crate::api::GluesyncPlatform,
    request_id: Option<&str>,
) -> Option<Response> {
    use crate::update::gate::{WAITING_FOR_APPROVAL, WAITING_FOR_WINDOW};
    let status = gsp.status.as_ref()?;
    if status.observed_generation != gsp.metadata.generation {
        return None;
    }
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Reconciling" && c.status == "True")
        .map(|c| c.reason.as_str())?;
    let ours = status
        .update
        .as_ref()
        .is_none_or(|u| u.request_id.as_deref() == request_id);
    let result = match reason {
        WAITING_FOR_WINDOW if ours => "Scheduled",
        WAITING_FOR_APPROVAL if ours && status.update.is_some() => "WaitingForApproval",
        _ => return None,
    };
    Some(
        (
            StatusCode::ACCEPTED,
            Json(json!({"success": true, "data": {
                "result": result,
                "scheduledAt": status.next_window,
                "approvalID": status.update.as_ref().and_then(|u| u.approval_id.clone()),
                "message": status.message,
            }})),
        )
            .into_response(),
    )
}

/// Waits until the update of `request_id` has ended, and answers per component from `status.lastAttempt`.
/// It reads the watch cache each time the GluesyncPlatform changes; it never polls the API server.
pub(super) async fn wait_for_attempt(
    api: &Api,
    request_id: Option<&str>,
) -> Result<Response, Response> {
    let deadline = tokio::time::Instant::now() + UPDATE_WAIT;
    let mut changed = api.view.changed.subscribe();
    loop {
        let gsp = api.platform()?;
        if let Some(answer) = waiting(&gsp, request_id) {
            return Ok(answer);
        }
        let status = gsp.status.unwrap_or_default();
        if let Some(attempt) = status
            .last_attempt
            .filter(|a| a.request_id.as_deref() == request_id)
            && status.update.is_none()
        {
            let containers: Vec<Value> = attempt
                .results
                .iter()
                .map(|r| {
                    let ok = matches!(r.status, ComponentResultStatus::Ok | ComponentResultStatus::Skipped | ComponentResultStatus::Scheduled);
                    let message = match (&r.message, &r.from, &r.to) {
                        (Some(m), _, _) => m.clone(),
                        (None, Some(f), Some(t)) => format!("{} updated from {f} to {t}", r.name),
                        _ => format!("{} {:?}", r.name, r.status),
                    };
                    json!({"id": r.name, "status": if ok { "OK" } else { "ERROR" }, "message": message})
                })
                .collect();
            return Ok(success(json!({
                "result": attempt.result,
                "message": attempt.message,
                "containers": containers,
            })));
        }
        match tokio::time::timeout_at(deadline, changed.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => {
                // The outcome so far: the update goes on, and the UI can ask again later.
                let u = status.update.as_ref();
                return Ok((
                    StatusCode::ACCEPTED,
                    Json(json!({"success": true, "data": {
                        "result": "Updating",
                        "step": u.map(|u| format!("{:?}", u.step.name())),
                        "message": status.message,
                        "details": "the update is still running; follow it with kubectl get gsp -w",
                    }})),
                )
                    .into_response());
            }
        }
    }
}

pub(super) async fn refuse_services() -> Response {
    failure(
        StatusCode::CONFLICT,
        "Services are not managed here on Kubernetes",
        "Helm owns the workloads: add or change modules in the Helm values; GKO changes only their image",
    )
}

pub(super) async fn service_version(
    State(api): State<Api>,
    Path(params): Path<Vec<(String, String)>>,
) -> Response {
    let id = params
        .iter()
        .find(|(k, _)| k == "id")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let channel = params
        .iter()
        .find(|(k, _)| k == "channel")
        .map(|(_, v)| v.clone());
    let channel = match channel.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("ga") => ReleaseChannel::Ga,
        Some("beta") => ReleaseChannel::Beta,
        Some("alpha") => ReleaseChannel::Alpha,
        Some(_) => {
            return failure(
                StatusCode::BAD_REQUEST,
                "Invalid releaseChannel",
                "Allowed values: alpha, beta, ga",
            );
        }
    };
    let gsp = match api.platform() {
        Ok(g) => g,
        Err(resp) => return resp,
    };
    let workloads = api.view.workloads();
    let Some(w) = workloads.iter().find(|w| w.name == id) else {
        return failure(
            StatusCode::NOT_FOUND,
            &format!("Service {id} not found"),
            "no managed workload has that name",
        );
    };
    if gsp.spec.catalog.offline {
        return failure(
            StatusCode::BAD_GATEWAY,
            "Unable to retrieve agent version",
            "this install is offline",
        );
    }
    let base = gsp
        .spec
        .catalog
        .url
        .as_deref()
        .unwrap_or(crate::update::catalog::DEFAULT_URL);
    let entry = match crate::catalog::CatalogClient::new(base) {
        Ok(c) => c.entry(ImageRef::parse(&w.image).name()).await,
        Err(e) => {
            return failure(
                StatusCode::BAD_GATEWAY,
                "Unable to retrieve agent version",
                e.to_string(),
            );
        }
    };
    let entry = match entry {
        Ok(e) => e,
        Err(e) => {
            return failure(
                StatusCode::BAD_GATEWAY,
                "Unable to retrieve agent version",
                e.to_string(),
            );
        }
    };
    let current = w.version();
    let mut to_update = vec![];
    let check = crate::update::catalog::check(&gsp, &workloads, String::new(), channel);
    if w.component_type == Some(ComponentType::CoreHub)
        && let Ok(latest) = crate::catalog::latest(&check.base, channel, &check.images).await
    {
        // GKO's own Deployment is offered like a module when it would update itself.
        let gko_updates =
            gsp.spec.self_update.enabled && gsp.spec.update_policy == crate::api::UpdatePolicy::Ui;
        for m in workloads.iter().filter(|m| {
            m.component_type == Some(ComponentType::Module)
                || (gko_updates && m.component_type == Some(ComponentType::Operator))
        }) {
            if let (Some(l), Some(c)) = (latest.get(ImageRef::parse(&m.image).name()), m.version())
                && l.parse::<crate::api::version::Version>().ok()
                    > c.parse::<crate::api::version::Version>().ok()
            {
                to_update.push(m.name.clone());
            }
        }
    }
    success(json!({
        "currentVersion": current,
        "latestVersionGA": entry.latest_version_ga,
        "latestVersionBeta": entry.latest_version_beta,
        "latestVersionAlpha": entry.latest_version_alpha,
        "releaseChannel": channel.as_str(),
        "mandatoryUpdate": !to_update.is_empty(),
        "servicesToUpdate": to_update,
    }))
}
