//! `kubectl gluesync` on the local control plane, during real updates of the simulator: what a person
//! reads (the screen, the piped progress lines), what a script reads (JSON against the status, exit
//! codes), and each refusal.

#[path = "../../gluesync-operator/tests/cluster/common/mod.rs"]
mod common;
mod support;

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use common::*;
use gko_test_support::TestNamespace;
use gluesync_operator::api::{Phase, UpdateResult};
use serde_json::json;
use support::{plugin, stderr, stdout};

/// `update VERSION` is refused: exit code 1, `says` on standard error, and the spec's version unchanged.
async fn refused(ns: &TestNamespace, version: &str, says: &str) -> anyhow::Result<String> {
    let before = platforms(ns).get("gluesync").await?.spec.version;
    let o = plugin(ns, &["update", version]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains(says), "{says:?} in {}", stderr(&o));
    let after = platforms(ns).get("gluesync").await?.spec.version;
    assert_eq!(
        after, before,
        "nothing written by a refused update to {version}"
    );
    Ok(stderr(&o))
}

/// The sample install at Core Hub 2.3.2.1 with the simulator and GKO, settled and with the catalog read
/// (phase UpdateAvailable: the screen's phase and "available" stay what the status says).
async fn install(
    hint: &str,
) -> anyhow::Result<(
    TestNamespace,
    gluesync_simulator::Simulator,
    Operator,
    gluesync_operator::api::GluesyncPlatform,
)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let gko = Operator::start_with_role(&ns).await?;
    let g = wait_available(&ns).await?;
    Ok((ns, sim, gko, g))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_follows_an_update_and_refuses_what_the_policy_forbids() -> anyhow::Result<()> {
    let (ns, sim, _gko, g) = install("plugin").await?;

    // The screen at rest: the phase, Core Hub and the modules.
    let o = plugin(&ns, &["status"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let screen = stdout(&o);
    let status = g.status.clone().unwrap_or_default();
    assert!(
        screen.contains(&format!("Phase:      {:?}", status.phase.unwrap())),
        "{screen}"
    );
    assert!(
        screen.contains("Core Hub:   2.3.2.1 (desired 2.3.2.1, available 2.3.2.2)"),
        "{screen}"
    );
    for c in &status.components {
        assert!(
            screen.contains(&c.name),
            "component {} on the screen: {screen}",
            c.name
        );
    }

    // The plan, before anything runs: GKO's engine on the live objects, nothing written.
    let before = platforms(&ns).get("gluesync").await?;
    let o = plugin(&ns, &["plan", "-o", "json"]);
    assert_eq!(o.status.code(), Some(0), "{} {}", stdout(&o), stderr(&o));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    assert_eq!(
        plan["version"], "2.3.2.2",
        "the latest on the channel: {plan}"
    );
    assert_eq!(plan["verdict"]["result"], "runs", "{plan}");
    assert_eq!(
        plan["pipelines"]["toPause"], 20,
        "the 20 running pipelines of the simulator: {plan}"
    );
    assert_eq!(plan["pipelines"]["inMaintenanceAlready"], 1, "{plan}");
    assert_eq!(
        plan["order"],
        json!(["gluesync-gluesync-core-hub", "gluesync-gluesync-chronos"]),
        "Core Hub first, then the module the catalog moves: {plan}"
    );
    let after = platforms(&ns).get("gluesync").await?;
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "a plan writes nothing"
    );
    let text = stdout(&plugin(&ns, &["plan", "2.3.2.2"]));
    for says in [
        "Verdict:    the update would run",
        "Pipelines:  20 running would be put into maintenance mode (1 already in maintenance mode: left as they are)",
        "update policy ui: `kubectl gluesync update 2.3.2.2`",
        "drain timeout: every running pipeline must reach maintenance mode within 5 min",
        "GKO's settings: unknown (no GKO Deployment is labelled in this namespace)",
        "Nothing was changed.",
    ] {
        assert!(text.contains(says), "{says:?} in {text}");
    }
    assert!(
        text.contains("molo17/gluesync-core-hub:2.3.2.1")
            && text.contains("molo17/gluesync-core-hub:2.3.2.2"),
        "{text}"
    );
    // A version the catalog does not know: refused by Preflight, exit code 1, nothing written.
    let o = plugin(&ns, &["plan", "2.9.0.0"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("refused by Preflight: Core Hub 2.9.0.0 is not in the version catalog"),
        "{}",
        stdout(&o)
    );
    let o = plugin(&ns, &["plan", "2.3.2.1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("no update would start: nothing to change"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        platforms(&ns)
            .get("gluesync")
            .await?
            .metadata
            .resource_version,
        before.metadata.resource_version
    );

    // A drain that lasts (each enter request lands 6 s late), followed from the start by `status -w`, piped.
    sim.set_faults(gluesync_simulator::Faults {
        enter_delay_ms: 6_000,
        ..Default::default()
    });
    let mut follow = Command::new(env!("CARGO_BIN_EXE_kubectl-gluesync"))
        .args(["-n", &ns.name, "status", "-w"])
        .env("KUBECONFIG", &ns.cp.kubeconfig)
        .stdout(Stdio::piped())
        .spawn()?;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let out = follow.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(l);
            }
        })
    };
    let o = plugin(&ns, &["update", "2.3.2.2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("asks for Core Hub 2.3.2.2 (was 2.3.2.1)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        platforms(&ns).get("gluesync").await?.spec.version,
        "2.3.2.2"
    );

    // Mid-drain: the JSON says what the status says.
    let g = wait_for_platform(&ns, "the drain to have asked its pipelines", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.update.as_ref())
            .is_some_and(|u| u.step.asked_pipelines().is_some_and(|a| !a.is_empty()))
    })
    .await?;
    let o = plugin(&ns, &["status", "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    let s = g.status.clone().unwrap();
    let u = s.update.as_ref().unwrap();
    assert_eq!(j["phase"], "Updating");
    assert_eq!(j["update"]["step"], "Drain", "{j}");
    assert_eq!(j["update"]["target"], "2.3.2.2");
    assert_eq!(
        j["update"]["pipelines"]["asked"],
        u.step.asked_pipelines().unwrap().len(),
        "{j}"
    );
    assert_eq!(j["update"]["pipelines"]["paused"], s.paused_pipelines.len());
    assert_eq!(j["status"]["update"]["step"], "Drain");
    let o = plugin(&ns, &["-o", "yaml", "status"]);
    assert!(stdout(&o).contains("step: Drain"), "{}", stdout(&o));
    let screen = stdout(&plugin(&ns, &["status"]));
    assert!(screen.contains("Step:       Drain (4 of 9)"), "{screen}");
    assert!(
        screen.contains("an update runs: a new version waits for its end"),
        "{screen}"
    );

    // A script that waits less than the update: exit code 2, still running.
    let o = plugin(&ns, &["status", "--wait", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(2), "{} {}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("still running after 1 s"),
        "{}",
        stderr(&o)
    );

    // Waiting for the end: exit code 0 and the result.
    let o = plugin(&ns, &["status", "--wait", "--timeout", "120"]);
    assert_eq!(o.status.code(), Some(0), "{} {}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("gluesync: Succeeded to 2.3.2.2"),
        "{}",
        stdout(&o)
    );
    let g = platforms(&ns).get("gluesync").await?;
    let s = g.status.clone().unwrap();
    assert_eq!(
        s.last_attempt.as_ref().unwrap().result,
        UpdateResult::Succeeded
    );
    assert_eq!(s.phase, Some(Phase::Current));
    // What the plan announced is what happened: the images, the order, the pipelines paused.
    let attempt = s.last_attempt.as_ref().unwrap();
    assert_eq!(attempt.paused_pipelines.len(), 20);
    for c in plan["components"].as_array().unwrap() {
        let kind = c["kind"].as_str().unwrap();
        let name = c["name"].as_str().unwrap();
        let now = image_of(&ns, kind, name).await?;
        let expected = c["toImage"].as_str().or(c["fromImage"].as_str()).unwrap();
        assert_eq!(now, expected, "{name}: the plan said {c}");
    }
    // The history records each step's time, and the history table the time the pipelines were paused.
    use gluesync_operator::api::UpdateStep::*;
    assert_eq!(
        s.history[0]
            .steps
            .iter()
            .map(|t| t.step)
            .collect::<Vec<_>>(),
        [
            Preflight, Snapshot, PrePull, Drain, CoreHub, Resume, Modules
        ]
    );
    let drain = s.history[0].steps.iter().find(|t| t.step == Drain).unwrap();
    assert!(drain.seconds >= 5, "each enter lands 6 s late: {drain:?}");

    // What `status -w` printed, piped: appended lines, each different from the one before it, through
    // the drain to the end.
    tokio::time::sleep(Duration::from_millis(500)).await;
    follow.kill()?;
    follow.wait()?;
    reader.join().unwrap();
    let lines = lines.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains("step 4/9 Drain")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Updating 2.3.2.1 -> 2.3.2.2")),
        "{lines:#?}"
    );
    assert!(
        lines.last().unwrap().starts_with("Current 2.3.2.2"),
        "{lines:#?}"
    );
    assert!(
        lines.windows(2).all(|w| w[0] != w[1]),
        "no line twice in a row: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.contains('\r') && !l.contains("\x1b[")),
        "no redraws in a pipe"
    );

    // A plan made after it estimates the next update from its steps.
    sim.set_catalog(
        "gluesync-core-hub",
        gluesync_simulator::CatalogEntry::all("2.3.2.3"),
    );
    let o = plugin(&ns, &["plan"]);
    assert_eq!(o.status.code(), Some(0), "{} {}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("Core Hub 2.3.2.2 -> 2.3.2.3 (the latest on the ga channel)"),
        "{text}"
    );
    assert!(
        text.contains("pipelines paused about") && text.contains("over 1 past updates"),
        "{text}"
    );
    assert!(
        text.contains("the drain took"),
        "the drain's time in its check: {text}"
    );
    sim.set_catalog(
        "gluesync-core-hub",
        gluesync_simulator::CatalogEntry::all("2.3.2.2"),
    );

    // The history and the events of that update.
    let h = stdout(&plugin(&ns, &["history"]));
    assert!(
        h.lines()
            .nth(1)
            .is_some_and(|r| r.contains("  2.3.2.1  2.3.2.2  Succeeded  ")),
        "{h}"
    );
    let o = plugin(&ns, &["history", "-o", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    assert_eq!(j, serde_json::to_value(&s.history)?);
    let e = stdout(&plugin(&ns, &["events"]));
    for reason in ["PipelinesPaused", "PipelinesResumed"] {
        assert!(e.contains(reason), "{reason} in the events: {e}");
    }

    // Refusals: the version asked already, a version the CRD refuses, and Git owning the version.
    refused(
        &ns,
        "2.3.2.2",
        "already asks for Core Hub 2.3.2.2; `retry` runs that update again",
    )
    .await?;
    let why = refused(&ns, "latest", "refused: ").await?;
    assert!(
        why.starts_with("refused: "),
        "the API server's reason, said as a refusal: {why}"
    );
    patch_spec(&ns, json!({"updatePolicy": "gitops"})).await?;
    refused(
        &ns,
        "2.3.2.3",
        "updatePolicy gitops, so Git owns spec.version",
    )
    .await?;
    assert!(
        stdout(&plugin(&ns, &["status"])).contains("updatePolicy gitops: Git owns spec.version")
    );

    // Retry and check write what GKO reads.
    let o = plugin(&ns, &["retry"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let g = platforms(&ns).get("gluesync").await?;
    assert!(
        g.spec
            .request_id
            .as_deref()
            .is_some_and(|r| r.starts_with("kubectl-")),
        "{:?}",
        g.spec.request_id
    );
    let o = plugin(&ns, &["check"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let g = platforms(&ns).get("gluesync").await?;
    let asked = g.metadata.annotations.unwrap_or_default()
        [gluesync_operator::api::CHECK_NOW_ANNOTATION]
        .clone();
    wait_for_platform(&ns, "GKO to act on the check-now annotation", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.catalog.as_ref())
            .and_then(|c| c.observed_check_now.as_deref())
            == Some(asked.as_str())
    })
    .await?;

    // kubectl's own columns: STEP and MESSAGE with -o wide only.
    let wide = ns.kubectl(&["get", "gsp", "-o", "wide"])?;
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PHASE",
            "VERSION",
            "DESIRED",
            "AVAILABLE",
            "STEP",
            "MESSAGE",
            "AGE"
        ],
        "{wide}"
    );
    let plain = ns.kubectl(&["get", "gsp"])?;
    let header: Vec<&str> = plain
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "VERSION", "DESIRED", "AVAILABLE", "AGE"],
        "{plain}"
    );

    // A namespace without a GluesyncPlatform, and a name that is not there.
    let o = plugin(&ns, &["status", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o).trim(),
        format!("no GluesyncPlatform nope in namespace {}", ns.name)
    );
    Ok(())
}

/// The text of a tmux pane.
fn capture(session: &str) -> String {
    let o = Command::new("tmux")
        .args(["capture-pane", "-p", "-t", session])
        .output()
        .expect("tmux runs");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_terminal_status_w_redraws_one_line() -> anyhow::Result<()> {
    let (ns, sim, _gko, _) = install("plugin-tty").await?;
    sim.set_faults(gluesync_simulator::Faults {
        enter_delay_ms: 4_000,
        ..Default::default()
    });
    // A terminal of 160 columns under tmux (narrower than the drain's line: it is cut, never wrapped), running `kubectl gluesync status -w`.
    let session = ns.name.clone();
    let command = format!(
        "KUBECONFIG={} {} -n {} status -w",
        ns.cp.kubeconfig.display(),
        env!("CARGO_BIN_EXE_kubectl-gluesync"),
        ns.name
    );
    let ok = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "160",
            "-y",
            "20",
            &command,
        ])
        .status()?
        .success();
    assert!(ok, "tmux starts the plugin");
    struct Kill(String);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .status();
        }
    }
    let _kill = Kill(session.clone());
    gko_test_support::eventually(
        "the plugin's first line",
        Duration::from_secs(20),
        || async {
            Ok(capture(&session)
                .contains("UpdateAvailable 2.3.2.1")
                .then_some(()))
        },
    )
    .await?;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    // In the drain: the line shows the step, with a bar, and it is the only line.
    let pane = gko_test_support::eventually(
        "the drain on the screen",
        Duration::from_secs(30),
        || async {
            let pane = capture(&session);
            // The drain's first frame may come before its requests: wait for the one that counts them.
            Ok((pane.contains("step 4/9 Drain")
                && pane.contains("pipelines asked into maintenance 20 of 20"))
            .then_some(pane))
        },
    )
    .await?;
    let lines: Vec<&str> = pane.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line, redrawn: {pane}");
    assert!(
        lines[0].chars().count() < 160,
        "cut to the terminal's width: {pane}"
    );
    assert!(
        lines[0].contains("pipelines asked into maintenance 20 of 20 [####################]"),
        "{pane}"
    );
    wait_for_platform(&ns, "the update's end", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.update.is_none() && s.version.as_deref() == Some("2.3.2.2"))
    })
    .await?;
    let pane =
        gko_test_support::eventually("the end on the screen", Duration::from_secs(10), || async {
            let pane = capture(&session);
            Ok(pane.contains("Current 2.3.2.2").then_some(pane))
        })
        .await?;
    let lines: Vec<&str> = pane.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "still one line at the end: {pane}");
    Ok(())
}

/// Runs the plugin in the test's namespace with the kubeconfig at `kubeconfig`.
fn plugin_with(
    ns: &TestNamespace,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-gluesync"))
        .args(["-n", &ns.name])
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("the plugin runs")
}

/// A copy of the control plane's kubeconfig, written to a file of the test's own: every user signs in
/// with `token` when one is given, and every cluster's server is `server` when one is given.
fn kubeconfig_of(
    ns: &TestNamespace,
    file: &str,
    token: Option<&str>,
    server: Option<&str>,
) -> anyhow::Result<std::path::PathBuf> {
    let mut config = kube::config::Kubeconfig::read_from(&ns.cp.kubeconfig)?;
    let dir = ns
        .cp
        .kubeconfig
        .parent()
        .unwrap_or(std::path::Path::new("."));
    for named in &mut config.clusters {
        if let Some(cluster) = named.cluster.as_mut() {
            // Paths relative to the original's folder still point at its files.
            if let Some(ca) = cluster.certificate_authority.as_mut() {
                *ca = dir.join(&*ca).display().to_string();
            }
            if let Some(s) = server {
                cluster.server = Some(s.to_string());
            }
        }
    }
    if let Some(t) = token {
        for named in &mut config.auth_infos {
            named.auth_info = Some(kube::config::AuthInfo {
                token: Some(t.to_string().into()),
                ..Default::default()
            });
        }
    }
    let path = std::env::temp_dir().join(format!("gko-plugin-{}-{file}.kubeconfig", ns.name));
    std::fs::write(&path, serde_json::to_vec(&config)?)?;
    Ok(path)
}

/// `events` counts a repeated event as many times as it happened and shows when it last did, as
/// `kubectl events` does: GKO's recorder (events.k8s.io/v1) records a repeat in the event's series and
/// leaves its first time and count alone. Refusals and an unreachable API server read as kubectl's: one
/// line, the API server's message once, the right the user lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_count_their_repeats_and_errors_read_as_kubectls() -> anyhow::Result<()> {
    use kube::{
        Resource,
        runtime::events::{Event, EventType, Recorder, Reporter},
    };
    let ns = namespace("plugin-words").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let gsp = platforms(&ns).get("gluesync").await?;
    // Events as GKO records them (cluster/writer.rs): the same recorder, the same reporter.
    let recorder = Recorder::new(
        ns.client.clone(),
        Reporter {
            controller: "gluesync-operator".into(),
            instance: None,
        },
    );
    let reference = gsp.object_ref(&());
    let event = |reason: &str, note: &str| Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note.into()),
        action: reason.into(),
        secondary: None,
    };
    let paused = event(
        "PipelinesPaused",
        "asked 20 running pipelines to enter maintenance mode",
    );
    recorder.publish(&paused, &reference).await?;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    recorder
        .publish(&event("CoreHubPatched", "Core Hub image set"), &reference)
        .await?;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        recorder.publish(&paused, &reference).await?;
    }
    let o = plugin(&ns, &["events"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    let row = |reason: &str| {
        table
            .lines()
            .position(|l| l.contains(reason))
            .map(|i| (i, table.lines().nth(i).unwrap().to_string()))
            .unwrap_or_else(|| panic!("{reason} in {table}"))
    };
    let (patched_at, patched) = row("CoreHubPatched");
    let (paused_at, paused_row) = row("PipelinesPaused");
    let count = |line: &str| line.split_whitespace().nth(5).map(str::to_string);
    assert_eq!(count(&paused_row).as_deref(), Some("4"), "{table}");
    assert_eq!(count(&patched).as_deref(), Some("1"), "{table}");
    // Oldest first by the last time: the repeated event last happened after the one between.
    assert!(patched_at < paused_at, "{table}");
    // Its time is the series' last one, ~3 s after its first.
    let api: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(ns.client.clone(), &ns.name);
    let recorded = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("PipelinesPaused"))
        .expect("the recorded event");
    let series = recorded.series.expect("a series of repeats");
    assert_eq!(series.count, 4);
    let last = series
        .last_observed_time
        .0
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string();
    assert!(paused_row.starts_with(&last), "{last} in {paused_row}");
    let first = recorded.event_time.expect("a first time").0;
    assert!(series.last_observed_time.0 > first, "{first} {last}");

    // A user who may read GluesyncPlatforms but not change them: a token of a ServiceAccount bound to a
    // Role of get, list and watch.
    ns.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: reader\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: reader\nrules:\n  \
         - apiGroups: [gluesync.molo17.com]\n    resources: [gluesyncplatforms]\n    verbs: [get, list, watch]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: reader\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}\n\
         subjects: [{{kind: ServiceAccount, name: reader, namespace: {}}}]\n",
        ns.name
    ))?;
    let token = ns.kubectl(&["create", "token", "reader"])?;
    let reader = kubeconfig_of(&ns, "reader", Some(token.trim()), None)?;
    let o = plugin_with(&ns, &reader, &["update", "2.3.2.2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let said = stderr(&o);
    let user = format!("system:serviceaccount:{}:reader", ns.name);
    assert_eq!(
        said.trim_end(),
        format!(
            "Error from server (Forbidden): gluesyncplatforms.gluesync.molo17.com \"gluesync\" is forbidden: \
             User \"{user}\" cannot patch resource \"gluesyncplatforms\" in API group \"gluesync.molo17.com\" \
             in the namespace \"{ns}\" - ask an administrator for a Role that grants patch on \
             gluesyncplatforms.gluesync.molo17.com in namespace {ns}",
            ns = ns.name
        ),
        "one line, the message once"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    assert_eq!(
        platforms(&ns).get("gluesync").await?.spec.version,
        "2.3.2.1"
    );
    // Its events: it may not list them.
    let o = plugin_with(&ns, &reader, &["events"]);
    let said = stderr(&o);
    assert!(
        said.starts_with("Error from server (Forbidden): events is forbidden: ")
            && said.contains("grants list on events in namespace"),
        "{said}"
    );
    // An API server out of reach: named, and why, in few words.
    let port = gko_test_support::free_addr()?.port();
    let server = format!("https://127.0.0.1:{port}");
    let nowhere = kubeconfig_of(&ns, "nowhere", None, Some(&server))?;
    let o = plugin_with(&ns, &nowhere, &["status"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o).trim_end(),
        format!("Unable to connect to the server {server}: connection refused")
    );
    for file in [reader, nowhere] {
        std::fs::remove_file(file).ok();
    }
    Ok(())
}

#[test]
fn completion_scripts_name_the_commands() {
    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-gluesync"))
        .args(["completion", "bash"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let script = String::from_utf8_lossy(&o.stdout);
    for c in ["status", "history", "events", "update", "retry", "check"] {
        assert!(script.contains(c), "{c}");
    }
}
