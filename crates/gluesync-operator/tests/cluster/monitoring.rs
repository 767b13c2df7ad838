//! What the chart gives a platform team to watch GKO with: the alerts of its PrometheusRule, run through
//! Prometheus' own `promtool test rules` (tests/monitoring/rules-test.yaml: series that fire and series
//! that must not), each with a runbook in docs/troubleshooting.md; and the Grafana dashboard, whose every
//! query names a metric that a running GKO serves on its /metrics.

use crate::common;

use std::{collections::BTreeSet, path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, bail};
use common::*;
use gluesync_operator::api::UpdateResult;
use serde_json::{Value, json};

const RUNBOOKS: &str = "https://docs.test/troubleshooting.md";

fn chart() -> PathBuf {
    gko_test_support::repo_root().join("charts/gluesync-operator")
}

/// The objects `helm template gluesync` renders from GKO's chart in namespace gluesync with these values.
fn render(sets: &[&str]) -> anyhow::Result<Vec<Value>> {
    use serde::Deserialize;
    let mut cmd = gko_test_support::control_plane().command("helm");
    cmd.args(["template", "gluesync"]).arg(chart()).args([
        "--namespace",
        "gluesync",
        "--set",
        "platform.version=2.3.2.1",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("helm template: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut objects = vec![];
    for doc in serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout)) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

fn kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The PrometheusRule's rules, rendered with the test's runbook address and these values.
fn rules(sets: &[&str]) -> anyhow::Result<Vec<Value>> {
    let base = format!("prometheus.rules.runbookBaseURL={RUNBOOKS}");
    let mut all = vec!["prometheus.rules.enabled=true", base.as_str()];
    all.extend(sets);
    let objects = render(&all)?;
    let rule = kind(&objects, "PrometheusRule");
    anyhow::ensure!(rule.len() == 1, "one PrometheusRule, not {}", rule.len());
    Ok(rule[0]["spec"]["groups"]
        .as_array()
        .context("groups")?
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect())
}

/// Prometheus' promtool, built by the control plane's script into its cache.
fn promtool() -> anyhow::Result<PathBuf> {
    let script = gko_test_support::repo_root().join("hack/controlplane.sh");
    let out = Command::new("bash").arg(&script).arg("promtool").output()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    anyhow::ensure!(
        path.is_file(),
        "no promtool at {} (hack/controlplane.sh build builds it)",
        path.display()
    );
    Ok(path)
}

/// A Prometheus rule file of one group.
fn rule_file(group: &str, rules: &[Value]) -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(
        &json!({"groups": [{"name": group, "rules": rules}]}),
    )?)
}

/// Runs promtool with each of `runs` in a folder of its own holding `files`; panics with its output when
/// a run fails.
fn promtool_on(files: &[(&str, String)], runs: &[&[&str]]) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "gko-promtool-{}-{}",
        std::process::id(),
        files[0].0
    ));
    std::fs::create_dir_all(&dir)?;
    for (name, text) in files {
        std::fs::write(dir.join(name), text)?;
    }
    let promtool = promtool()?;
    for args in runs {
        let out = Command::new(&promtool)
            .args(*args)
            .current_dir(&dir)
            .output()?;
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// The metric names (gluesync_operator_*) a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("gluesync_operator_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to dashes, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn the_alerts_fire_on_what_they_say_and_only_then() -> anyhow::Result<()> {
    let rules = rules(&[])?;
    let spec = gko_test_support::repo_root()
        .join("crates/gluesync-operator/tests/monitoring/rules-test.yaml");
    promtool_on(
        &[
            ("rules.yaml", rule_file("gluesync-operator", &rules)?),
            ("rules-test.yaml", std::fs::read_to_string(&spec)?),
        ],
        &[
            &["check", "rules", "rules.yaml"],
            &["test", "rules", "rules-test.yaml"],
        ],
    )?;
    // Every alert has a case that fires and one that must not.
    let tests: Value = serde_yaml::from_str(&std::fs::read_to_string(&spec)?)?;
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .collect();
    let names: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(names.len(), 8, "{names:?}");
    for name in &names {
        let of: Vec<&&Value> = cases.iter().filter(|c| c["alertname"] == *name).collect();
        assert!(
            of.iter()
                .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty())),
            "{name}: no case where it fires"
        );
        assert!(
            of.iter()
                .any(|c| c["exp_alerts"].as_array().is_some_and(|a| a.is_empty())),
            "{name}: no case where it stays silent"
        );
    }
    Ok(())
}

#[test]
fn every_alert_has_a_runbook_and_the_values_tune_each() -> anyhow::Result<()> {
    let docs =
        std::fs::read_to_string(gko_test_support::repo_root().join("docs/troubleshooting.md"))?;
    let headings: Vec<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## ")))
        .collect();
    let monitoring =
        std::fs::read_to_string(gko_test_support::repo_root().join("docs/monitoring.md"))?;
    for rule in rules(&[])? {
        let name = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"].as_str().unwrap();
        assert_eq!(url, format!("{RUNBOOKS}#{}", name.to_lowercase()));
        // A section of its own, named as the alert.
        assert!(
            headings
                .iter()
                .any(|h| *h == name && anchor(h) == name.to_lowercase()),
            "{name}: no section `### {name}` in docs/troubleshooting.md"
        );
        assert!(
            monitoring.contains(&format!("| `{name}` |")),
            "{name}: not in docs/monitoring.md's table of alerts"
        );
        assert!(!rule["annotations"]["summary"].as_str().unwrap().is_empty());
        assert!(rule["labels"]["severity"].is_string(), "{name}");
        // Each reads the Lease holder's gauges, of this install's namespace only.
        let expr = rule["expr"].as_str().unwrap();
        assert!(
            expr.contains(r#"namespace="gluesync""#),
            "{name}: {expr} reads every install's series"
        );
    }
    // The defaults point at the docs of this release.
    let objects = render(&["prometheus.rules.enabled=true"])?;
    let url = kind(&objects, "PrometheusRule")[0]["spec"]["groups"][0]["rules"][0]["annotations"]
        ["runbook_url"]
        .as_str()
        .unwrap()
        .to_string();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        url.contains(&format!("/v{version}/docs/troubleshooting.md#")),
        "{url}"
    );
    // Off by default; an alert turned off, retuned, another selector, more labels.
    assert!(kind(&render(&[])?, "PrometheusRule").is_empty());
    let tuned = rules(&[
        "prometheus.rules.alerts.GluesyncStalled.enabled=false",
        "prometheus.rules.alerts.GluesyncPipelinesNotResumed.for=5m",
        "prometheus.rules.alerts.GluesyncPipelinesNotResumed.severity=page",
        "prometheus.rules.selector=job=\"gko\"",
        "prometheus.rules.additionalLabels.team=data",
    ])?;
    assert!(!tuned.iter().any(|r| r["alert"] == "GluesyncStalled"));
    let p = tuned
        .iter()
        .find(|r| r["alert"] == "GluesyncPipelinesNotResumed")
        .unwrap();
    assert_eq!(p["for"], "5m");
    assert_eq!(p["labels"]["severity"], "page");
    assert_eq!(p["labels"]["team"], "data");
    assert!(p["expr"].as_str().unwrap().contains(r#"{job="gko"}"#));
    // A `for` of 0s renders none (Prometheus' default, at once).
    let rolled = tuned
        .iter()
        .find(|r| r["alert"] == "GluesyncOperatorRolledBack")
        .unwrap();
    assert!(rolled.get("for").is_none());
    Ok(())
}

/// The dashboard as the chart renders it: its ConfigMap's JSON, checked for the sidecar's label.
fn dashboard() -> anyhow::Result<Value> {
    let objects = render(&["grafana.dashboard.enabled=true"])?;
    let maps: Vec<&Value> = kind(&objects, "ConfigMap")
        .into_iter()
        .filter(|m| m["metadata"]["name"] == "gluesync-gluesync-operator-dashboard")
        .collect();
    anyhow::ensure!(maps.len() == 1, "the dashboard's ConfigMap");
    assert_eq!(maps[0]["metadata"]["labels"]["grafana_dashboard"], "1");
    let text = maps[0]["data"]["gluesync-operator.json"]
        .as_str()
        .context("the dashboard's JSON")?;
    let file = std::fs::read_to_string(chart().join("dashboards/gluesync-operator.json"))?;
    assert_eq!(text, file, "the ConfigMap carries the file as it is");
    Ok(serde_json::from_str(text)?)
}

/// Every panel's queries, by panel title.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            p["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| {
                    (
                        title.clone(),
                        t["expr"].as_str().unwrap_or_default().to_string(),
                    )
                })
        })
        .collect()
}

#[test]
fn the_dashboard_shows_what_the_docs_promise() -> anyhow::Result<()> {
    let d = dashboard()?;
    assert_eq!(d["uid"], "gluesync-operator");
    let panels = d["panels"].as_array().unwrap();
    let ids: BTreeSet<i64> = panels.iter().filter_map(|p| p["id"].as_i64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "{}: the data source the user picks",
            p["title"]
        );
        assert!(
            !p["targets"].as_array().unwrap().is_empty(),
            "{}",
            p["title"]
        );
    }
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for t in [
        "Updates by result",
        "Step durations (mean)",
        "Paused pipelines",
        "Reconciles",
        "Core Hub call errors",
        "Conductor API requests by status",
    ] {
        assert!(titles.contains(&t), "no panel {t:?}: {titles:?}");
    }
    for (title, expr) in queries(&d) {
        assert!(
            expr.contains(r#"namespace=~"$namespace""#),
            "{title}: {expr} ignores the namespace picked"
        );
    }
    // Every query is PromQL that Prometheus parses: as recording rules (Grafana's variables filled in)
    // through promtool.
    let records: Vec<Value> = queries(&d)
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| {
            let expr = expr
                .replace("$namespace", ".*")
                .replace("$__rate_interval", "5m");
            json!({"record": format!("gluesync:dashboard_query_{i}"), "expr": expr})
        })
        .collect();
    promtool_on(
        &[("queries.yaml", rule_file("dashboard", &records)?)],
        &[&["check", "rules", "queries.yaml"]],
    )?;
    // Off by default.
    assert!(
        !render(&[])?
            .iter()
            .any(|o| o["metadata"]["name"] == "gluesync-gluesync-operator-dashboard")
    );
    Ok(())
}

/// The metric names a /metrics text serves samples of (counters with `_total`, histograms with
/// `_bucket`, `_sum` and `_count`).
fn served(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_read_metrics_a_running_gko_serves() -> anyhow::Result<()> {
    let ns = namespace("monitoring").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let port = gko_test_support::free_addr()?.port();
    let gko = Gko::spawn(
        &ns,
        GkoOptions {
            conductor_addr: Some(format!("127.0.0.1:{port}")),
            ..Default::default()
        },
    )?;
    wait_settled(&ns).await?;
    // An update (steps, results, Core Hub calls) and a call of the Conductor API.
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_finished_within(&ns, 1, Duration::from_secs(120)).await?;
    assert_eq!(
        g.status.unwrap().last_attempt.unwrap().result,
        UpdateResult::Succeeded
    );
    let health = reqwest::get(format!("http://127.0.0.1:{port}/health")).await?;
    assert!(health.status().is_success(), "{}", health.status());
    let mut read = BTreeSet::new();
    for (title, expr) in queries(&dashboard()?) {
        for name in metric_names(&expr) {
            read.insert((format!("dashboard panel {title:?}"), name));
        }
    }
    for rule in rules(&[])? {
        for name in metric_names(rule["expr"].as_str().unwrap()) {
            read.insert((format!("alert {}", rule["alert"]), name));
        }
    }
    let missing = |served: &BTreeSet<String>| -> Vec<(String, String)> {
        read.iter()
            .filter(|(_, n)| !served.contains(n))
            .cloned()
            .collect()
    };
    // GKO counts what it did once it has the answer of its write, which a reader of the API server can
    // see first (the update's result is counted after the status write that ended it): the metrics are
    // read until every name is served, for a few seconds, then once more for the verdict.
    let scrape = || async { anyhow::Ok(reqwest::get(&gko.metrics_url).await?.text().await?) };
    // (The Conductor API's answer above is among them: the dashboard reads its requests.)
    assert!(
        read.iter()
            .any(|(_, n)| n == "gluesync_operator_conductor_requests_total"),
        "{read:?}"
    );
    let text = match gko_test_support::eventually(
        "every metric the dashboard and the alerts read",
        Duration::from_secs(10),
        || async {
            let text = scrape().await?;
            Ok(missing(&served(&text)).is_empty().then_some(text))
        },
    )
    .await
    {
        Ok(text) => text,
        Err(_) => scrape().await?,
    };
    let served = served(&text);
    assert!(served.contains("gluesync_operator_leader"), "{served:?}");
    let missing = missing(&served);
    assert!(
        missing.is_empty(),
        "queries name metrics GKO does not serve: {missing:?}\nserved: {served:?}"
    );
    // The queries cover what they should (a check that the names were read at all).
    assert!(read.len() >= 15, "{read:?}");
    scraped_in_the_format_asked(&gko.metrics_url).await
}

/// `promtool check metrics` of a scrape: what it found wrong (empty when nothing).
fn promtool_check_metrics(text: &str) -> anyhow::Result<String> {
    use std::io::Write;
    let mut child = Command::new(promtool()?)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(if out.status.success() {
        String::new()
    } else {
        said
    })
}

/// `/metrics` answers the format its client asks for, as the Prometheus client libraries do: Prometheus'
/// text format to a client that names no OpenMetrics (curl, older agents, promtool: every family with its
/// HELP and TYPE under the names of its samples), OpenMetrics to one that asks for it (Prometheus).
async fn scraped_in_the_format_asked(url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let get = |accept: Option<&'static str>| {
        let mut request = http.get(url);
        if let Some(a) = accept {
            request = request.header("accept", a);
        }
        async move {
            let answer = request.send().await?.error_for_status()?;
            let kind = answer.headers()["content-type"].to_str()?.to_string();
            anyhow::Ok((kind, answer.text().await?))
        }
    };
    // Prometheus' own Accept header (v3), and two clients of the text format.
    let prometheus = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                      application/openmetrics-text;version=0.0.1;q=0.5,\
                      text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let (kind, text) = get(Some(prometheus)).await?;
    assert!(
        kind.starts_with("application/openmetrics-text; version=1.0.0"),
        "{kind}"
    );
    assert!(
        text.contains("# TYPE gluesync_operator_updates counter\n"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    for accept in [None, Some("text/plain;version=0.0.4"), Some("*/*")] {
        let (kind, text) = get(accept).await?;
        assert_eq!(
            kind, "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        assert!(
            text.contains("# HELP gluesync_operator_updates_total ")
                && text.contains("# TYPE gluesync_operator_updates_total counter\n"),
            "{accept:?}: {text}"
        );
        assert!(!text.contains("# EOF"), "{accept:?}: {text}");
        let wrong = promtool_check_metrics(&text)?;
        assert!(
            wrong.is_empty(),
            "{accept:?}: promtool check metrics: {wrong}\n{text}"
        );
    }
    // The check can fail: OpenMetrics read as the text format lacks the HELP of every counter's samples.
    let (_, open) = get(Some(prometheus)).await?;
    let wrong = promtool_check_metrics(&open)?;
    assert!(wrong.contains("no help text"), "{wrong}");
    Ok(())
}
