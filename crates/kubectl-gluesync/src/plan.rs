//! `kubectl gluesync plan [VERSION]`: what an update to VERSION would do, decided by GKO's own engine
//! (`gluesync_engine::update::preview`) on the live objects, changing nothing. This module reads what
//! the engine reads (the labelled workloads and their pods, GKO's settings from its Deployment, Core Hub's
//! pipelines with those settings, the version catalog's answer) and says what the preview found.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use gluesync_engine::{
    api::{ComponentType, GluesyncPlatform, TYPE_LABEL, UpdatePolicy, UpdateStep},
    update::{
        Observed,
        access::Access,
        catalog::Answer,
        corehub::{Pipeline, Target},
        observed::Workload,
        preview::{Preview, Verdict, preview},
    },
};
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, StatefulSet},
        core::v1::Pod,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde_json::{Value, json};

use crate::screen::{self, human, name, table};

/// How long Core Hub and the catalog are given to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Where GKO's settings (the Secrets it may read, the Core Hub URLs it may call) were read from.
#[derive(Clone, Debug)]
pub enum Settings {
    /// From the environment of GKO's Deployment, named.
    Read(String),
    /// Not found: the checks of GKO's settings are not made, and the spec's Secret and URL are used.
    Unknown(String),
}

/// Everything the plan was made from, and what the engine made of it.
pub struct Plan {
    pub version: String,
    /// Where the version came from, when VERSION was not given.
    pub version_from: Option<String>,
    pub preview: Preview,
    pub settings: Settings,
    /// The catalog's answer, when the engine asked for it: `Err` why it could not be read from here.
    pub catalog: Option<Result<(), String>>,
}

/// The labelled workloads of the namespace with their pods, as GKO builds them.
async fn workloads(client: &Client, namespace: &str) -> anyhow::Result<Vec<Workload>> {
    let lp = ListParams::default().labels(TYPE_LABEL);
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let deploy: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let mut all: Vec<Workload> = sts
        .list(&lp)
        .await
        .context("listing the StatefulSets")?
        .items
        .iter()
        .filter_map(Workload::from_statefulset)
        .chain(
            deploy
                .list(&lp)
                .await
                .context("listing the Deployments")?
                .items
                .iter()
                .filter_map(Workload::from_deployment),
        )
        .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for w in &mut all {
        if w.selector.is_empty() {
            continue;
        }
        let selector = w
            .selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .context("listing the pods")?;
        w.attach_pods(list.items.iter());
    }
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

/// GKO's settings, from its Deployment's environment (as its chart sets them).
fn settings(gsp: &GluesyncPlatform, workloads: &[Workload]) -> (Access, Settings) {
    let gko = workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::Operator));
    let env = gko.and_then(|w| {
        let container = w.container.as_deref()?;
        let spec = w.template.spec.as_ref()?;
        let c = spec.containers.iter().find(|c| c.name == container)?;
        let value = |n: &str| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == n)
                .map(|e| e.value.clone())
        };
        match (
            value("GKO_ALLOWED_SECRETS"),
            value("GKO_ALLOWED_COREHUB_URLS"),
        ) {
            // A value GKO reads from elsewhere (valueFrom) cannot be told from here.
            (Some(None), _) | (_, Some(None)) => None,
            (s, u) => Some((
                s.flatten().unwrap_or_default(),
                u.flatten().unwrap_or_default(),
            )),
        }
    });
    match (gko, env) {
        (Some(w), Some((secrets, urls))) => (
            Access::from_lists(&secrets, &urls),
            Settings::Read(format!("{} {}", w.kind_name(), w.name)),
        ),
        (gko, _) => {
            let spec = &gsp.spec.core_hub;
            let access = Access {
                secrets: spec
                    .credentials_secret
                    .iter()
                    .chain(spec.ca_secret.iter())
                    .cloned()
                    .collect(),
                corehub_urls: spec.url.iter().cloned().collect(),
            };
            let why = match gko {
                Some(w) => format!(
                    "{} {} sets them in a way that cannot be read from here",
                    w.kind_name(),
                    w.name
                ),
                None => "no GKO Deployment is labelled in this namespace".into(),
            };
            (access, Settings::Unknown(why))
        }
    }
}

/// Core Hub's pipelines, read as GKO reads them (its client, the Secret the spec names).
async fn pipelines(
    client: &Client,
    namespace: &str,
    access: &Access,
    target: Option<&Target>,
) -> Result<Arc<Vec<Pipeline>>, String> {
    let target = target.ok_or("GKO may not call Core Hub (see the preflight check)")?;
    let hub = gluesync_operator::corehub::connect::connect(
        client,
        namespace,
        Some("kubectl-gluesync"),
        access,
        target,
    )
    .await?;
    match tokio::time::timeout(CALL_TIMEOUT, hub.pipelines()).await {
        Ok(Ok(list)) => Ok(Arc::new(list)),
        Ok(Err(e)) => Err(format!(
            "Core Hub at {} could not be listed: {}",
            target.url,
            gluesync_operator::cluster::wording::Said(&e)
        )),
        Err(_) => Err(format!(
            "Core Hub at {} did not answer within {} s",
            target.url,
            CALL_TIMEOUT.as_secs()
        )),
    }
}

/// The latest Core Hub on the platform's channel: the catalog's answer, else the last one GKO recorded.
async fn latest(
    gsp: &GluesyncPlatform,
    workloads: &[Workload],
) -> anyhow::Result<(String, String)> {
    let core_hub = workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    let channel = gsp.spec.release_channel;
    if !gsp.spec.catalog.offline
        && let Some(w) = core_hub
    {
        let check = gluesync_engine::update::catalog::check(
            gsp,
            std::slice::from_ref(w),
            String::new(),
            channel,
        );
        let asked = tokio::time::timeout(
            CALL_TIMEOUT,
            gluesync_operator::catalog::latest(&check.base, channel, &check.images),
        )
        .await;
        if let Ok(Ok(found)) = asked
            && let Some(v) = found.values().next()
        {
            return Ok((
                v.clone(),
                format!("the latest on the {} channel", channel.as_str()),
            ));
        }
    }
    match gsp.status.as_ref().and_then(|s| s.available.clone()) {
        Some(v) => Ok((
            v,
            format!(
                "the latest on the {} channel GKO last read from the catalog",
                channel.as_str()
            ),
        )),
        None => Err(crate::Refused(format!(
            "no VERSION given, and the latest Core Hub on the {} channel is not known (the catalog did \
             not answer, or the install is offline): name one, as in `kubectl gluesync plan 2.3.2.2`",
            channel.as_str()
        ))
        .into()),
    }
}

/// Makes the plan: reads the live objects, runs the engine's preview, and asks the catalog when it
/// wants its answer. Writes nothing.
pub async fn make(
    client: &Client,
    namespace: &str,
    gsp: &GluesyncPlatform,
    version: Option<&str>,
) -> anyhow::Result<Plan> {
    let workloads = workloads(client, namespace).await?;
    let (version, version_from) = match version {
        Some(v) => (v.to_string(), None),
        None => {
            let (v, from) = latest(gsp, &workloads).await?;
            (v, Some(from))
        }
    };
    let (access, settings) = settings(gsp, &workloads);
    let mut planned = gsp.clone();
    planned.spec.version = version.clone();
    let access_problem = access.problem(&planned, &workloads, namespace);
    let target = access_problem
        .is_none()
        .then(|| Target::of(&planned, &workloads, namespace))
        .flatten();
    let listed = Some(pipelines(client, namespace, &access, target.as_ref()).await);
    let now = Time(jiff::Timestamp::now());
    let report = Default::default();
    let mut answer: Option<Answer> = None;
    let mut catalog = None;
    loop {
        let obs = Observed {
            now: now.clone(),
            workloads: &workloads,
            corehub: &report,
            catalog: answer.as_ref(),
            target: target.clone(),
            access_problem: access_problem.clone(),
            me: None,
            dr: Default::default(),
            pre_pulls: &[],
        };
        let p = preview(gsp, &version, &obs, listed.clone());
        match &p.verdict {
            Verdict::NeedsCatalog(check) if answer.is_none() => {
                let result = match tokio::time::timeout(
                    CALL_TIMEOUT,
                    gluesync_operator::catalog::latest(&check.base, check.channel, &check.images),
                )
                .await
                {
                    Ok(r) => r,
                    Err(_) => Err(format!(
                        "the catalog did not answer within {} s",
                        CALL_TIMEOUT.as_secs()
                    )),
                };
                catalog = Some(result.as_ref().map(|_| ()).map_err(Clone::clone));
                answer = Some(Answer {
                    token: check.token.clone(),
                    at: now.clone(),
                    result,
                });
            }
            _ => {
                return Ok(Plan {
                    version,
                    version_from,
                    preview: p,
                    settings,
                    catalog,
                });
            }
        }
    }
}

/// Does the plan say the update would run?
pub fn runs(plan: &Plan) -> bool {
    matches!(plan.preview.verdict, Verdict::Runs { .. })
}

/// Would the update pause pipelines (it runs, and Core Hub changes)?
fn pauses(plan: &Plan) -> bool {
    matches!(
        plan.preview.verdict,
        Verdict::Runs {
            next: UpdateStep::Drain
        }
    )
}

/// The platform's past updates.
fn history(gsp: &GluesyncPlatform) -> &[gluesync_engine::api::HistoryEntry] {
    gsp.status
        .as_ref()
        .map(|s| s.history.as_slice())
        .unwrap_or(&[])
}

fn verdict_text(plan: &Plan) -> (String, String) {
    match &plan.preview.verdict {
        Verdict::Runs {
            next: UpdateStep::Drain,
        } => ("runs".into(), "the update would run".into()),
        Verdict::Runs { .. } => (
            "runs".into(),
            "the update would run (Core Hub stays: modules only, nothing paused)".into(),
        ),
        Verdict::Refused(why) => ("refused".into(), format!("refused by Preflight: {why}")),
        Verdict::NotStarted(why) => ("notStarted".into(), format!("no update would start: {why}")),
        Verdict::NeedsCatalog(_) => (
            "notStarted".into(),
            "no update would start: the catalog's answer was not had".into(),
        ),
    }
}

/// The checks that could refuse or hold the update, each in words.
fn checks(gsp: &GluesyncPlatform, plan: &Plan) -> Vec<String> {
    let mut out = vec![];
    let preflight = match &plan.preview.verdict {
        Verdict::Refused(why) => format!("preflight: refused: {why}"),
        Verdict::Runs { .. } => match &plan.catalog {
            Some(Err(e)) => format!(
                "preflight: passes without the version catalog, which could not be read from here \
                 ({e}); GKO waits up to 30 s for its answer"
            ),
            Some(Ok(())) => "preflight: passes (the version catalog knows the version)".into(),
            None => "preflight: passes (no catalog: an offline install)".into(),
        },
        _ => "preflight: not reached".into(),
    };
    out.push(preflight);
    out.push(match gsp.spec.update_policy {
        UpdatePolicy::Gitops => format!(
            "update policy gitops: Git owns spec.version; change it to {} in Git (`kubectl gluesync \
             update` and the Core Hub UI are refused)",
            plan.version
        ),
        UpdatePolicy::Ui => format!(
            "update policy ui: `kubectl gluesync update {}` or the Core Hub UI starts it",
            plan.version
        ),
    });
    let history = history(gsp);
    let (medians, n) = screen::step_medians(history);
    let last_drain = medians
        .get(&UpdateStep::Drain)
        .map(|d| {
            format!(
                "; the drain took {} in the median of {n} past updates",
                human(*d)
            )
        })
        .unwrap_or_default();
    if pauses(plan) {
        out.push(format!(
            "drain timeout: every running pipeline must reach maintenance mode within {} \
             (drainTimeoutSeconds), or the update is refused and they are resumed{last_drain}",
            human(gsp.spec.drain_timeout_seconds)
        ));
        out.push(format!(
            "stability: Core Hub must stay ready for {} with no restart, within {} (or it is rolled back)",
            human(gsp.spec.stability_window_seconds),
            human(gsp.spec.stability_timeout_seconds)
        ));
    }
    out.push(match &plan.settings {
        Settings::Read(from) => format!("GKO's settings: read from {from}"),
        Settings::Unknown(why) => format!(
            "GKO's settings: unknown ({why}): whether GKO may read the Secret and call the Core Hub URL \
             the spec names is not checked"
        ),
    });
    out
}

/// The plan for people.
pub fn text(gsp: &GluesyncPlatform, plan: &Plan) -> String {
    let p = &plan.preview;
    let mut s = String::new();
    let from = gsp
        .status
        .as_ref()
        .and_then(|st| st.version.clone())
        .unwrap_or_else(|| "-".into());
    let version_from = plan
        .version_from
        .as_ref()
        .map(|f| format!(" ({f})"))
        .unwrap_or_default();
    s.push_str(&format!(
        "Plan for gluesyncplatform/{} (namespace {}): Core Hub {from} -> {}{version_from}\n",
        gsp.name_any(),
        gsp.namespace().unwrap_or_default(),
        plan.version
    ));
    s.push_str(&format!("Verdict:    {}\n", verdict_text(plan).1));
    for w in &p.waits {
        s.push_str(&format!("Waits:      {w}\n"));
    }
    if let Some(u) = &p.update
        && !u.components.is_empty()
    {
        s.push_str(
            "\nIn the order GKO updates them (Core Hub and agents, then the modules one by one):\n",
        );
        let rows: Vec<[String; 5]> = u
            .components
            .iter()
            .map(|c| {
                [
                    c.name.clone(),
                    name(&c.component_type),
                    c.from_image.clone(),
                    c.to_image.clone().unwrap_or_else(|| "stays".into()),
                    c.message.clone().unwrap_or_default(),
                ]
            })
            .collect();
        s.push_str(&table(["COMPONENT", "TYPE", "FROM", "TO", "NOTE"], &rows));
        s.push('\n');
    }
    if runs(plan) {
        s.push_str(&match (&p.pause, p.kept) {
            (Ok(ids), _) if ids.is_empty() && p.kept.is_none() => {
                "Pipelines:  none paused (Core Hub stays)\n".to_string()
            }
            (Ok(ids), kept) => format!(
                "Pipelines:  {} running would be put into maintenance mode{}\n",
                ids.len(),
                kept.filter(|k| *k > 0)
                    .map(|k| format!(" ({k} already in maintenance mode: left as they are)"))
                    .unwrap_or_default()
            ),
            (Err(why), _) => format!("Pipelines:  unknown: {why}\n"),
        });
    }
    s.push_str("Checks:\n");
    for c in checks(gsp, plan) {
        s.push_str(&format!("  - {c}\n"));
    }
    if runs(plan) {
        let core_hub_changes = pauses(plan);
        let history = history(gsp);
        s.push_str(&match screen::estimate_update(history, core_hub_changes) {
            Some((whole, paused, n)) if core_hub_changes => format!(
                "Estimate:   about {}, pipelines paused about {} (the median time of each step over {n} \
                 past updates)\n",
                human(whole),
                human(paused)
            ),
            Some((whole, _, n)) => format!(
                "Estimate:   about {} (the median time of each step over {n} past updates)\n",
                human(whole)
            ),
            None => "Estimate:   none (no past update recorded its steps)\n".into(),
        });
    }
    s.push_str("Nothing was changed.\n");
    s
}

/// The plan for scripts.
pub fn json(gsp: &GluesyncPlatform, plan: &Plan) -> Value {
    let p = &plan.preview;
    let (result, message) = verdict_text(plan);
    let components: Vec<Value> = p
        .update
        .iter()
        .flat_map(|u| &u.components)
        .map(|c| {
            json!({
                "name": c.name, "type": c.component_type, "kind": c.kind, "container": c.container,
                "fromImage": c.from_image, "toImage": c.to_image, "note": c.message,
            })
        })
        .collect();
    let order: Vec<&str> = p
        .update
        .iter()
        .flat_map(|u| &u.components)
        .filter(|c| c.to_image.is_some())
        .map(|c| c.name.as_str())
        .collect();
    let history = history(gsp);
    let core_hub_changes = pauses(plan);
    let estimate = screen::estimate_update(history, core_hub_changes)
        .filter(|_| runs(plan))
        .map(|(whole, paused, n)| json!({"seconds": whole, "pausedSeconds": paused, "pastUpdates": n}));
    json!({
        "name": gsp.name_any(),
        "namespace": gsp.namespace(),
        "from": gsp.status.as_ref().and_then(|s| s.version.clone()),
        "version": plan.version,
        "versionFrom": plan.version_from,
        "verdict": {"result": result, "message": message},
        "components": components,
        "order": order,
        "pipelines": match (&p.pause, runs(plan)) {
            (Ok(ids), true) => json!({"toPause": ids.len(), "inMaintenanceAlready": p.kept}),
            (Err(why), true) => json!({"toPause": null, "unknown": why}),
            _ => Value::Null,
        },
        "checks": checks(gsp, plan),
        "updatePolicy": gsp.spec.update_policy,
        "drainTimeoutSeconds": gsp.spec.drain_timeout_seconds,
        "estimate": estimate,
        "messages": p.messages,
        "waits": p.waits,
        "changed": false,
    })
}
