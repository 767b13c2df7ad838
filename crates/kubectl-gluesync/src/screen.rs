//! What `kubectl gluesync` prints, computed from a GluesyncPlatform alone (no cluster calls): the status
//! screen, the one-line progress of `status -w`, the summary `-o json|yaml` prints, and the history table.

use std::collections::BTreeMap;

use gluesync_engine::api::{
    ComponentState, GluesyncPlatform, GluesyncPlatformStatus, HistoryEntry, PipelineList,
    UpdateStatus, UpdateStep,
};
use gluesync_engine::update::gate;
use jiff::Timestamp;
use serde_json::{Value, json};

/// An enum's name as the status spells it.
pub fn name<T: serde::Serialize>(t: &T) -> String {
    match serde_json::to_value(t) {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => String::new(),
    }
}

/// How many ids a status list has: the spilled count when the list went to ConfigMaps.
fn count(status: &GluesyncPlatformStatus, list: &str, ids: &PipelineList) -> i64 {
    status
        .spilled_lists
        .get(list)
        .map_or(ids.len() as i64, |s| s.count)
}

/// Seconds from `a` to `b`, rounded down.
fn seconds(a: Timestamp, b: Timestamp) -> i64 {
    b.duration_since(a).as_secs()
}

/// `95 s`, `4 min 5 s`, `2 h 3 min`.
pub fn human(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => match s % 60 {
            0 => format!("{} min", s / 60),
            r => format!("{} min {r} s", s / 60),
        },
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// Which of the steps that run only sometimes this update's spec has: `Waiting` (a gate: an approval,
/// maintenance windows), `PrePull` (`prePull.enabled`).
#[derive(Clone, Copy, Debug)]
pub struct Optional {
    pub gated: bool,
    pub pre_pull: bool,
}

impl Optional {
    pub fn of(gsp: &gluesync_engine::api::GluesyncPlatform) -> Optional {
        Optional {
            gated: gate::gated(gsp),
            pre_pull: gsp.spec.pre_pull.enabled,
        }
    }
}

/// A step's name, and its place among the steps of an update (1-based) and their number. `Waiting` is
/// one of them only when the spec has a gate or the update waits; `PrePull` only when the spec pulls
/// first or the update pulls.
fn place(step: UpdateStep, optional: Optional) -> (String, usize, usize) {
    use strum::VariantNames;
    let name = format!("{step:?}");
    let all: Vec<&str> = UpdateStep::VARIANTS
        .iter()
        .copied()
        .filter(|s| optional.gated || step == UpdateStep::Waiting || *s != "Waiting")
        .filter(|s| optional.pre_pull || step == UpdateStep::PrePull || *s != "PrePull")
        .collect();
    let at = all.iter().position(|s| *s == name).map_or(0, |i| i + 1);
    (name, at, all.len())
}

/// The progress of the update that runs, as numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub step: String,
    pub step_number: usize,
    pub steps: usize,
    pub step_seconds: i64,
    pub update_seconds: i64,
    pub deadline_seconds: Option<i64>,
    /// Drain: the pipelines asked into maintenance mode so far.
    pub asked: Option<i64>,
    /// The ledger: pipelines GKO put into maintenance mode and has not resumed yet.
    pub paused: i64,
    /// Taken out of maintenance mode so far in this update.
    pub resumed: i64,
}

pub fn progress(
    status: &GluesyncPlatformStatus,
    u: &UpdateStatus,
    now: Timestamp,
    optional: Optional,
) -> Progress {
    let (step, step_number, steps) = place(u.step.name(), optional);
    Progress {
        step,
        step_number,
        steps,
        step_seconds: seconds(u.step.since().0, now),
        update_seconds: seconds(u.started_at.0, now),
        deadline_seconds: u.step.deadline().map(|d| seconds(now, d.0)),
        asked: u
            .step
            .asked_pipelines()
            .map(|l| count(status, "update.askedPipelines", l)),
        paused: count(status, "pausedPipelines", &status.paused_pipelines),
        resumed: count(status, "update.resumedPipelines", &u.resumed_pipelines),
    }
}

/// How long the finished updates took, newest first: the estimate of the next one's time.
fn typical_seconds(history: &[HistoryEntry]) -> Option<i64> {
    median(
        history
            .iter()
            .filter_map(|h| Some(seconds(h.started_at.as_ref()?.0, h.finished_at.0)))
            .collect(),
    )
}

use gluesync_engine::update::estimate::{median, steps_from};
pub use gluesync_engine::update::estimate::{step_medians, update_seconds as estimate_update};

/// How the end of the running update is estimated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Basis {
    /// The median time of each step left, over this many past updates.
    Steps(usize),
    /// The median time of this many past updates.
    Updates(usize),
}

/// The end of the running update, estimated from the times of the same steps in past updates (the
/// step that runs counts for what is left of its median), else from their whole times.
pub fn estimate_end(gsp: &GluesyncPlatform, now: Timestamp) -> Option<(i64, Timestamp, Basis)> {
    let status = gsp.status.as_ref()?;
    let u = status.update.as_ref()?;
    let (medians, n) = step_medians(&status.history);
    let (left, basis) = if n > 0 {
        let step = u.step.name();
        let in_step = seconds(u.step.since().0, now);
        let core_hub_changes = u.target.is_some();
        let left: i64 = steps_from(step, core_hub_changes)
            .iter()
            .map(|s| {
                let m = medians.get(s).copied().unwrap_or(0);
                if *s == step { (m - in_step).max(0) } else { m }
            })
            .sum();
        (left, Basis::Steps(n))
    } else {
        let typical = typical_seconds(&status.history)?;
        (
            (typical - seconds(u.started_at.0, now)).max(0),
            Basis::Updates(status.history.len()),
        )
    };
    Some((left, now + jiff::SignedDuration::from_secs(left), basis))
}

/// The replicas of a workload as its controller reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Replicas {
    pub desired: i64,
    pub updated: i64,
    pub ready: i64,
}

/// The replicas of the workloads an update rolls, by name, as read when the screen was drawn.
pub type Live = BTreeMap<String, Replicas>;

/// Is this component rolling now (a new image written, or an old one put back, and not yet stable)?
pub fn is_rolling(c: &gluesync_engine::api::PlannedComponent) -> bool {
    matches!(
        c.state,
        ComponentState::Patched | ComponentState::RollingBack
    )
}

/// The components rolling now (a new image written, or an old one put back, and not yet stable), each
/// with its replicas when known and the seconds left of its stability window once it began.
pub fn rolling(gsp: &GluesyncPlatform, now: Timestamp, live: &Live) -> Vec<String> {
    let Some(u) = gsp.status.as_ref().and_then(|s| s.update.as_ref()) else {
        return vec![];
    };
    let window = gsp.spec.stability_window_seconds;
    u.components
        .iter()
        .filter(|c| is_rolling(c))
        .map(|c| {
            let mut parts = vec![c.name.clone()];
            if let Some(r) = live.get(&c.name) {
                parts.push(format!(
                    "{} of {} replicas updated, {} ready",
                    r.updated, r.desired, r.ready
                ));
            }
            parts.push(match &c.stable {
                Some(st) => {
                    let held = seconds(st.since.0, now);
                    format!(
                        "stable for {} of {window} s ({} left)",
                        held.min(window),
                        human(window - held)
                    )
                }
                None => "waiting for every replica to run the image and be ready".into(),
            });
            parts.join(": ")
        })
        .collect()
}

/// A bar of `width` cells, `done` of `all` filled.
pub fn bar(done: i64, all: i64, width: usize) -> String {
    let filled = if all <= 0 {
        0
    } else {
        ((done.clamp(0, all) as f64 / all as f64) * width as f64).round() as usize
    };
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

/// The pipelines part of the progress line, with a bar when there are pipelines to count.
fn pipelines_part(p: &Progress, bars: bool) -> Option<String> {
    let (what, done, all) = match p.step.as_str() {
        "Drain" => ("asked into maintenance", p.asked?, p.paused.max(p.asked?)),
        "Resume" => ("resumed", p.resumed, p.resumed + p.paused),
        _ => return None,
    };
    if all == 0 {
        return None;
    }
    let b = if bars {
        format!(" {}", bar(done, all, 20))
    } else {
        String::new()
    };
    Some(format!("pipelines {what} {done} of {all}{b}"))
}

/// The one line `status -w` prints per change: phase, versions, step and progress, the message.
pub fn line(gsp: &GluesyncPlatform, now: Timestamp, bars: bool, live: &Live) -> String {
    let Some(status) = &gsp.status else {
        return format!("{}: no status yet (is GKO running?)", name_or(gsp));
    };
    let phase = status
        .phase
        .as_ref()
        .map(name)
        .unwrap_or_else(|| "-".into());
    let version = status.version.as_deref().unwrap_or("-");
    let mut parts = vec![format!("{phase} {version}")];
    if let Some(u) = &status.update {
        let p = progress(status, u, now, Optional::of(gsp));
        let to = u.target.as_deref().unwrap_or("modules");
        parts[0] = format!("{phase} {} -> {to}", u.from.as_deref().unwrap_or(version));
        let mut step = format!(
            "step {}/{} {} {}",
            p.step_number,
            p.steps,
            p.step,
            human(p.step_seconds)
        );
        if let Some(d) = p.deadline_seconds {
            step.push_str(&format!(" (deadline in {})", human(d)));
        }
        parts.push(step);
        parts.extend(pipelines_part(&p, bars));
        parts.extend(rolling(gsp, now, live));
        if let Some((left, _, _)) = estimate_end(gsp, now) {
            parts.push(format!("about {} left (estimate)", human(left)));
        }
    }
    if let Some(m) = &status.message {
        parts.push(m.clone());
    }
    parts.join(" | ")
}

fn name_or(gsp: &GluesyncPlatform) -> String {
    gsp.metadata.name.clone().unwrap_or_default()
}

/// What would hold up or refuse the next update, as the status tells it.
pub fn blockers(gsp: &GluesyncPlatform) -> Vec<String> {
    let mut out = vec![];
    let Some(status) = &gsp.status else {
        return vec!["GKO has not written a status yet".into()];
    };
    if status.update.is_some() {
        out.push("an update runs: a new version waits for its end".into());
    }
    if let Some(c) = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled" && c.status == "True")
    {
        out.push(format!("Stalled ({}): {}", c.reason, c.message));
    }
    let paused = count(status, "pausedPipelines", &status.paused_pipelines);
    if status.update.is_none() && paused > 0 {
        out.push(format!(
            "{paused} pipelines GKO paused are not resumed yet (GKO keeps resuming them)"
        ));
    }
    if let Some(e) = status.catalog.as_ref().and_then(|c| c.error.as_ref()) {
        out.push(format!("the version catalog could not be read: {e}"));
    }
    if status.self_update.is_some() {
        out.push("GKO's own update runs".into());
    }
    if let Some(t) = &status.next_window {
        out.push(format!(
            "an update waits for the maintenance window at {}",
            gate::when(t.0)
        ));
    }
    if let Some(u) = &status.update
        && !gate::approved(gsp, u)
        && let Some(id) = &u.approval_id
    {
        out.push(format!(
            "the update waits for its approval: `kubectl gluesync approve` (approvalID {id})"
        ));
    }
    if gsp.spec.update_policy == gluesync_engine::api::UpdatePolicy::Gitops {
        out.push(
            "updatePolicy gitops: Git owns spec.version (the Core Hub UI and `update` are refused)"
                .into(),
        );
    }
    out
}

/// The status screen.
pub fn screen(gsp: &GluesyncPlatform, now: Timestamp, live: &Live) -> String {
    let mut s = String::new();
    let ns = gsp.metadata.namespace.as_deref().unwrap_or("");
    s.push_str(&format!(
        "GluesyncPlatform {} (namespace {ns})\n",
        name_or(gsp)
    ));
    let Some(status) = &gsp.status else {
        s.push_str(
            "No status yet: GKO has not seen this resource (is it running in this namespace?)\n",
        );
        return s;
    };
    let phase = status
        .phase
        .as_ref()
        .map(name)
        .unwrap_or_else(|| "-".into());
    s.push_str(&format!(
        "Phase:      {phase}\nCore Hub:   {} (desired {}, available {})\n",
        status.version.as_deref().unwrap_or("-"),
        gsp.spec.version,
        status.available.as_deref().unwrap_or("-")
    ));
    if let Some(m) = &status.message {
        s.push_str(&format!("Message:    {m}\n"));
    }
    if let Some(t) = &status.next_window {
        s.push_str(&format!(
            "Window:     the update waits for the maintenance window at {}\n",
            gate::when(t.0)
        ));
    }
    if let Some(u) = &status.update {
        let p = progress(status, u, now, Optional::of(gsp));
        let request = u
            .request_id
            .as_deref()
            .map(|r| format!(" (request {r})"))
            .unwrap_or_default();
        s.push_str(&format!(
            "Update:     {} -> {}{request}, running {}\n",
            u.from.as_deref().unwrap_or("-"),
            u.target.as_deref().unwrap_or("modules only"),
            human(p.update_seconds)
        ));
        s.push_str(&format!(
            "Step:       {} ({} of {}), for {}",
            p.step,
            p.step_number,
            p.steps,
            human(p.step_seconds)
        ));
        if let Some(d) = p.deadline_seconds {
            s.push_str(&format!(", deadline in {}", human(d)));
        }
        s.push('\n');
        let mut pipes = format!("Pipelines:  {} paused by GKO", p.paused);
        if let Some(a) = p.asked {
            pipes.push_str(&format!(", {a} asked into maintenance"));
        }
        pipes.push_str(&format!(", {} resumed", p.resumed));
        if let Some(part) = pipelines_part(&p, true) {
            pipes.push_str(&format!("  {}", part.rsplit(' ').next().unwrap_or("")));
        }
        s.push_str(&pipes);
        s.push('\n');
        for r in rolling(gsp, now, live) {
            s.push_str(&format!("Rolling:    {r}\n"));
        }
        if let Some(id) = u.approval_id.as_ref().filter(|_| !gate::approved(gsp, u)) {
            s.push_str(&format!(
                "Approval:   waiting (nothing paused or changed): `kubectl gluesync approve` writes {}={id}\n",
                gluesync_engine::api::APPROVE_ANNOTATION
            ));
        }
        match estimate_end(gsp, now) {
            Some((left, at, basis)) => s.push_str(&format!(
                "Estimate:   about {} left, ending near {} ({})\n",
                human(left),
                at.strftime("%H:%M:%S UTC"),
                match basis {
                    Basis::Steps(n) =>
                        format!("the median time of each step left, over {n} past updates"),
                    Basis::Updates(n) => format!("the median of {n} past updates"),
                }
            )),
            None => s.push_str("Estimate:   none (no finished update in the history)\n"),
        }
    }
    if !status.components.is_empty() {
        s.push('\n');
        let rows: Vec<[String; 5]> = status
            .components
            .iter()
            .map(|c| {
                [
                    c.name.clone(),
                    name(&c.component_type),
                    c.version.clone().unwrap_or_else(|| "-".into()),
                    c.available.clone().unwrap_or_else(|| "-".into()),
                    if c.ready { "yes" } else { "no" }.into(),
                ]
            })
            .collect();
        s.push_str(&table(
            ["COMPONENT", "TYPE", "VERSION", "AVAILABLE", "READY"],
            &rows,
        ));
    }
    if let Some(a) = &status.last_attempt {
        s.push_str(&format!(
            "\nLast attempt: {} to {} at {}: {}\n",
            name(&a.result),
            a.target.as_deref().unwrap_or("modules"),
            a.finished_at.0.strftime("%Y-%m-%d %H:%M:%S UTC"),
            a.message
        ));
    }
    if status.last_attempt.is_none() {
        s.push('\n');
    }
    let b = blockers(gsp);
    if b.is_empty() {
        s.push_str("Next update: nothing holds it up\n");
    } else {
        s.push_str("Next update:\n");
        for x in b {
            s.push_str(&format!("  - {x}\n"));
        }
    }
    s
}

/// What `status -o json|yaml` prints: the figures of the screen, and the status itself.
pub fn summary(gsp: &GluesyncPlatform, now: Timestamp, live: &Live) -> Value {
    let status = gsp.status.as_ref();
    let update = status.and_then(|st| {
        st.update.as_ref().map(|u| {
            let p = progress(st, u, now, Optional::of(gsp));
            json!({
                "from": u.from, "target": u.target, "requestID": u.request_id,
                "step": p.step, "stepNumber": p.step_number, "steps": p.steps,
                "stepSeconds": p.step_seconds, "updateSeconds": p.update_seconds,
                "deadlineSeconds": p.deadline_seconds,
                "pipelines": {"paused": p.paused, "asked": p.asked, "resumed": p.resumed},
                "estimatedSecondsLeft": estimate_end(gsp, now).map(|(l, _, _)| l),
                "rolling": rolling(gsp, now, live),
            })
        })
    });
    json!({
        "name": gsp.metadata.name,
        "namespace": gsp.metadata.namespace,
        "desired": gsp.spec.version,
        "phase": status.and_then(|s| s.phase.as_ref()).map(name),
        "version": status.and_then(|s| s.version.clone()),
        "available": status.and_then(|s| s.available.clone()),
        "message": status.and_then(|s| s.message.clone()),
        "update": update,
        "blockers": blockers(gsp),
        "status": gsp.status,
    })
}

/// Columns as wide as their widest cell, two spaces apart; the last one as it is.
pub fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut width = header.map(str::len);
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let cells = std::iter::once(header.map(String::from)).chain(rows.iter().cloned());
    for r in cells {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == N {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `history`: newest first, with durations.
pub fn history(gsp: &GluesyncPlatform) -> String {
    let rows: Vec<[String; 8]> = gsp
        .status
        .iter()
        .flat_map(|s| s.history.iter())
        .map(|h| {
            let took = h
                .started_at
                .as_ref()
                .map_or("-".into(), |st| human(seconds(st.0, h.finished_at.0)));
            let by = h
                .requested_by
                .as_ref()
                .map(|r| match &r.username {
                    Some(u) => format!("{} ({u})", name(&r.via)),
                    None => name(&r.via),
                })
                .unwrap_or_else(|| "-".into());
            let paused = estimate_update(std::slice::from_ref(h), true)
                .filter(|_| h.steps.iter().any(|t| t.step == UpdateStep::Drain))
                .map_or("-".into(), |(_, p, _)| human(p));
            [
                h.finished_at
                    .0
                    .strftime("%Y-%m-%d %H:%M:%S UTC")
                    .to_string(),
                h.from.clone().unwrap_or_else(|| "-".into()),
                h.to.clone().unwrap_or_else(|| "-".into()),
                name(&h.result),
                took,
                paused,
                by,
                h.message.clone(),
            ]
        })
        .collect();
    table(
        [
            "FINISHED", "FROM", "TO", "RESULT", "DURATION", "PAUSED", "BY", "MESSAGE",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform(status: serde_json::Value) -> GluesyncPlatform {
        serde_json::from_value(json!({
            "apiVersion": "gluesync.molo17.com/v1alpha1", "kind": "GluesyncPlatform",
            "metadata": {"name": "gluesync", "namespace": "demo", "generation": 2},
            "spec": {"version": "2.3.2.2"},
            "status": status,
        }))
        .unwrap()
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_drain_shows_its_step_its_pipelines_and_an_estimate() {
        let gsp = platform(json!({
            "phase": "Updating", "version": "2.3.2.1", "message": "waiting for 10 of 300 pipelines",
            "pausedPipelines": ["a", "b", "c"],
            "spilledLists": {"update.askedPipelines": {"count": 300, "digest": "x", "configMaps": 1}},
            "update": {"step": "Drain", "since": "2026-12-03T10:00:10Z", "deadline": "2026-12-03T10:05:10Z",
                       "askedPipelines": ["a"], "generation": 2, "startedAt": "2026-12-03T10:00:00Z",
                       "from": "2.3.2.1", "target": "2.3.2.2"},
            "history": [
                {"result": "Succeeded", "message": "", "startedAt": "2026-12-01T10:00:00Z", "finishedAt": "2026-12-01T10:01:00Z"},
                {"result": "Succeeded", "message": "", "startedAt": "2026-11-01T10:00:00Z", "finishedAt": "2026-11-01T10:02:00Z"},
                {"result": "Failed", "message": "", "startedAt": "2026-10-01T10:00:00Z", "finishedAt": "2026-10-01T10:00:30Z"}
            ],
        }));
        let now = t("2026-12-03T10:00:40Z");
        let line = line(&gsp, now, true, &Live::new());
        assert!(
            line.starts_with(
                "Updating 2.3.2.1 -> 2.3.2.2 | step 4/9 Drain 30 s (deadline in 4 min 30 s)"
            ),
            "{line}"
        );
        assert!(
            line.contains("pipelines asked into maintenance 300 of 300 [####################]"),
            "{line}"
        );
        assert!(
            line.contains("about 20 s left (estimate)"),
            "the median of 30, 60 and 120 s, less 40 s: {line}"
        );
        let screen = screen(&gsp, now, &Live::new());
        assert!(
            screen.contains("Step:       Drain (4 of 9), for 30 s, deadline in 4 min 30 s"),
            "{screen}"
        );
        assert!(
            screen.contains("Pipelines:  3 paused by GKO, 300 asked into maintenance, 0 resumed"),
            "{screen}"
        );
        assert!(screen.contains("  - an update runs"), "{screen}");
        let j = summary(&gsp, now, &Live::new());
        assert_eq!(j["update"]["pipelines"]["asked"], 300);
        assert_eq!(j["update"]["pipelines"]["paused"], 3);
        assert_eq!(j["update"]["estimatedSecondsLeft"], 20);
        assert_eq!(j["status"]["phase"], "Updating");
    }

    #[test]
    fn resume_counts_what_is_left() {
        let gsp = platform(json!({
            "phase": "Updating", "pausedPipelines": ["a"],
            "update": {"step": "Resume", "since": "2026-12-03T10:00:10Z", "deadline": "2026-12-03T10:05:10Z",
                       "resumedPipelines": ["b", "c", "d"], "generation": 2, "startedAt": "2026-12-03T10:00:00Z"},
        }));
        let line = line(&gsp, t("2026-12-03T10:00:20Z"), false, &Live::new());
        assert!(line.contains("step 7/9 Resume 10 s"), "{line}");
        assert!(line.contains("pipelines resumed 3 of 4"), "{line}");
        assert!(!line.contains('['), "no bar when asked for none: {line}");
        assert!(
            !line.contains("estimate"),
            "no history, no estimate: {line}"
        );
    }

    #[test]
    fn idle_shows_the_last_attempt_and_what_holds_the_next_up() {
        let gsp = platform(json!({
            "phase": "Current", "version": "2.3.2.2", "pausedPipelines": ["a", "b"],
            "catalog": {"error": "no route to host"},
            "lastAttempt": {"result": "Degraded", "message": "2 pipelines not resumed", "target": "2.3.2.2",
                            "finishedAt": "2026-12-03T10:00:00Z"},
        }));
        let s = screen(&gsp, t("2026-12-03T10:10:00Z"), &Live::new());
        assert!(s.contains("Last attempt: Degraded to 2.3.2.2 at 2026-12-03 10:00:00 UTC: 2 pipelines not resumed"), "{s}");
        assert!(
            s.contains("2 pipelines GKO paused are not resumed yet"),
            "{s}"
        );
        assert!(
            s.contains("the version catalog could not be read: no route to host"),
            "{s}"
        );
        assert_eq!(
            line(&gsp, t("2026-12-03T10:10:00Z"), true, &Live::new()),
            "Current 2.3.2.2"
        );
    }

    #[test]
    fn history_has_durations() {
        let gsp = platform(
            json!({"history": [{"from": "2.3.2.1", "to": "2.3.2.2", "result": "Succeeded", "message": "ok",
            "requestedBy": {"via": "ui", "username": "anna"},
            "startedAt": "2026-12-01T10:00:00Z", "finishedAt": "2026-12-01T10:01:05Z"}]}),
        );
        let h = history(&gsp);
        let row = h.lines().nth(1).unwrap();
        assert_eq!(
            row,
            "2026-12-01 10:01:05 UTC  2.3.2.1  2.3.2.2  Succeeded  1 min 5 s  -       ui (anna)  ok",
            "{h}"
        );
    }

    #[test]
    fn the_estimate_adds_the_steps_left_and_a_rollout_shows_its_replicas_and_window() {
        let steps = |drain: i64, core: i64| {
            json!([{"step": "Preflight", "seconds": 1}, {"step": "Snapshot", "seconds": 0},
                   {"step": "Drain", "seconds": drain}, {"step": "CoreHub", "seconds": core},
                   {"step": "Resume", "seconds": 5}, {"step": "Modules", "seconds": 30}])
        };
        let mut gsp = platform(json!({
            "phase": "Updating",
            "update": {"step": "CoreHub", "since": "2026-12-03T10:00:10Z", "deadline": "2026-12-03T10:10:10Z",
                       "generation": 2, "startedAt": "2026-12-03T10:00:00Z", "from": "2.3.2.1", "target": "2.3.2.2",
                       "components": [{"name": "core-hub", "type": "core-hub", "kind": "StatefulSet",
                                       "container": "c", "fromImage": "x:2.3.2.1", "toImage": "x:2.3.2.2",
                                       "state": "Patched", "stable": {"since": "2026-12-03T10:00:30Z"}}]},
            "history": [
                {"result": "Succeeded", "message": "", "startedAt": "2026-12-01T10:00:00Z",
                 "finishedAt": "2026-12-01T10:02:00Z", "steps": steps(10, 60)},
                {"result": "Succeeded", "message": "", "startedAt": "2026-11-01T10:00:00Z",
                 "finishedAt": "2026-11-01T10:03:00Z", "steps": steps(20, 90)},
                {"result": "Succeeded", "message": "", "startedAt": "2026-10-01T10:00:00Z",
                 "finishedAt": "2026-10-01T10:03:00Z", "steps": steps(30, 120)},
            ],
        }));
        gsp.spec.stability_window_seconds = 60;
        let now = t("2026-12-03T10:00:50Z");
        // CoreHub's median is 90 s, 40 s of it gone; then Resume 5 s and Modules 30 s.
        let (left, _, basis) = estimate_end(&gsp, now).unwrap();
        assert_eq!((left, basis), (50 + 5 + 30, Basis::Steps(3)));
        let live = Live::from([(
            "core-hub".to_string(),
            Replicas {
                desired: 3,
                updated: 3,
                ready: 2,
            },
        )]);
        let screen = screen(&gsp, now, &live);
        assert!(
            screen.contains(
                "Rolling:    core-hub: 3 of 3 replicas updated, 2 ready: stable for 20 of 60 s (40 s left)"
            ),
            "{screen}"
        );
        assert!(
            screen.contains("the median time of each step left, over 3 past updates"),
            "{screen}"
        );
        // A whole update of the same kind, and the time its pipelines stay paused.
        let h = &gsp.status.as_ref().unwrap().history;
        assert_eq!(
            estimate_update(h, true),
            Some((1 + 20 + 90 + 5 + 30, 20 + 90 + 5, 3))
        );
        assert_eq!(estimate_update(h, false), Some((31, 0, 3)));
        let row = history(&gsp).lines().nth(1).unwrap().to_string();
        assert!(
            row.contains("Succeeded  2 min     1 min 15 s"),
            "the newest update's Drain, CoreHub and Resume: {row}"
        );
    }

    #[test]
    fn bars_and_durations_read_well() {
        assert_eq!(bar(5, 10, 10), "[#####-----]");
        assert_eq!(bar(0, 0, 4), "[----]");
        assert_eq!(bar(12, 10, 4), "[####]");
        assert_eq!(human(59), "59 s");
        assert_eq!(human(120), "2 min");
        assert_eq!(human(3725), "1 h 2 min");
        assert_eq!(human(-3), "0 s");
    }
}
