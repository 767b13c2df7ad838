//! `gko-bench`: GKO's figures on the local control plane, printed, never asserted.
//!
//! - reaction: a `spec.version` change to `status.phase=Updating`, p50 and p99 over 50 runs, beside the raw
//!   watch latency (a label patch on the GluesyncPlatform to a watch in this process seeing it, p50 and p99
//!   over the same 50 runs, interleaved) and the ratio reaction/watch;
//! - reaction while Core Hub hangs and the catalog is slow: the same `spec.version` change to
//!   `status.phase=Updating`, p50 and p99 over 50 runs, with Core Hub hanging (`Faults::hang`, pipelines
//!   left in the ledger so that GKO's calls to resume them hang) and the catalog answering after 60 s
//!   (`catalog_delay_ms`, a check-now catalog check in flight), set before each change; printed beside the
//!   normal reaction and the raw watch latency (measured in the same runs), with the ratio to the latter;
//! - reaction against the number of labelled workloads (4, 20, 100), beside the raw watch latency;
//! - GKO's own overhead in a whole update (stability window 0, pods ready at once): the update's wall time
//!   less the time the API server and kwok take to roll the same images out without GKO (a twin of Core
//!   Hub's StatefulSet that no GKO manages, rolled just before each update: each pair shares the
//!   machine's speed of the moment; the end of both seen through a watch, which loads the API server no
//!   more for one than the other), the median of the pairs;
//! - pipelines: for 1,000, 10,000 and 100,000 pipelines on the simulator, drain, resume and whole-update
//!   time, GKO's CPU seconds for the update, its resident memory idle and at the peak, and the
//!   GluesyncPlatform's size;
//! - unrelated pods: for 0 (the baseline), 500, 2,000 and 5,000 pods of a Deployment GKO does not manage
//!   in its namespace, GKO's resident memory, reconciles per minute and cached pods idle, then its peak
//!   memory and reconciles during a rollout of those pods, and the reconciles their deletion causes;
//! - the Conductor API's throughput (`GET /containers`) for manager sessions GKO knows, for a flood of bad
//!   tokens, and for both at once, in phases of equal length on one GKO: requests per second by answer
//!   (200, 401, 429, other), and the Core Hub identity checks each phase cost;
//! - strangers' unfinished request heads: 512 connections to the Conductor API and 64 to the metrics
//!   port, each sending 400 KiB of a head that never ends; GKO's resident memory idle and at its peak,
//!   what became of the connections, and a manager's request meanwhile.
//!
//! GKO runs as its release binary (`target/release/gluesync-operator`, built by `make bench`), the
//! simulator in this process. Run with `make bench`; `gko-bench NAME...` runs only the named figures
//! (`reaction`, `workloads`, `hang`, `overhead`, `prepull`, `pipelines`, `unrelated`, `conductor`,
//! `heads`); `gko-bench lease` compares GKO's elector with `kube-lease-manager` (see `lease.rs`).

mod lease;

use std::{
    collections::HashMap,
    os::unix::process::CommandExt as _,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use gko_test_support::TestNamespace;
use gluesync_engine::api::{
    CHECK_NOW_ANNOTATION, FIELD_MANAGER, GluesyncPlatform, Phase, UpdateResult, UpdateStep,
};
use gluesync_simulator::{CatalogEntry, Options, Simulator};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use strum::VariantNames as _;

const SAMPLE_INSTALL: &str = include_str!("../../../examples/sample/install.yaml");

struct Gko {
    child: Child,
    metrics_url: String,
}

impl Drop for Gko {
    fn drop(&mut self) {
        // The whole process group: a profiler of GKO_BENCH_WRAP and GKO under it (killing the profiler
        // alone left GKO running, answering the next point's metrics on the same port). GKO alone is
        // asked to stop first (by its process name), so that a profiler outlives it and writes what it
        // gathered; whatever still runs after 5 s is killed.
        let group = self.child.id().to_string();
        let _ = Command::new("pkill")
            .args(["-TERM", "-g", &group, "^gluesync-operat"])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gko {
    fn start(ns: &TestNamespace, port: u16) -> anyhow::Result<Gko> {
        Self::start_with(ns, port, "off")
    }

    fn start_with(ns: &TestNamespace, port: u16, conductor: &str) -> anyhow::Result<Gko> {
        let binary = ns.cp.repo_root.join("target/release/gluesync-operator");
        if !binary.exists() {
            bail!(
                "{} is missing: run `make bench`, which builds it",
                binary.display()
            );
        }
        // A profiler to run GKO under, for whoever looks into a figure (e.g. `heaptrack -o /tmp/gko`).
        let wrap = std::env::var("GKO_BENCH_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let mut command = match words.next() {
            Some(profiler) => {
                let mut c = Command::new(profiler);
                c.args(words).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        // GKO's log at info (or at GKO_BENCH_LOG_FILTER, a RUST_LOG filter), to a file, for whoever looks
        // into where a figure's time goes.
        let log = std::env::var("GKO_BENCH_LOG").ok();
        let filter =
            std::env::var("GKO_BENCH_LOG_FILTER").unwrap_or_else(|_| "info,kube=warn".into());
        let stdout = match &log {
            Some(path) => Stdio::from(std::fs::File::create(path)?),
            None => Stdio::null(),
        };
        let child = command
            .args([
                "run",
                "--namespace",
                &ns.name,
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "--conductor-addr",
                conductor,
            ])
            .env("KUBECONFIG", &ns.cp.kubeconfig)
            .env(
                "RUST_LOG",
                if log.is_some() {
                    filter.as_str()
                } else {
                    "warn"
                },
            )
            .env("GKO_ALLOWED_SECRETS", "corehub-credentials")
            .env("GKO_ALLOWED_COREHUB_URLS", "http://127.0.0.1:*")
            .stdout(stdout)
            .process_group(0)
            .spawn()?;
        Ok(Gko {
            child,
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
        })
    }

    /// Resident memory, from /proc.
    fn rss_kib(&self) -> u64 {
        rss_kib_of(self.child.id())
    }

    /// CPU seconds (user and system) the process has used, from /proc.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // The fields after the command name (which ends with ')'): utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // Clock ticks are 100 per second on Linux.
        (ticks(11) + ticks(12)) / 100.0
    }

    /// Samples its resident memory every 20 ms until the returned sampler is stopped; the peak.
    fn peak_rss(&self) -> Peak {
        let pid = self.child.id();
        let peak = Arc::new(AtomicU64::new(0));
        let running = Arc::new(AtomicBool::new(true));
        let (p, r) = (peak.clone(), running.clone());
        let task = tokio::spawn(async move {
            while r.load(Ordering::SeqCst) {
                p.fetch_max(rss_kib_of(pid), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Peak {
            peak,
            running,
            task,
        }
    }

    /// A counter or gauge from GKO's /metrics (0 when absent).
    async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let text = reqwest::get(&self.metrics_url).await?.text().await?;
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0))
    }

    /// Every sample of GKO's /metrics, by its name with labels.
    async fn samples(&self) -> anyhow::Result<HashMap<String, f64>> {
        let text = reqwest::get(&self.metrics_url).await?.text().await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect())
    }

    /// The sum of one step's durations, from GKO's /metrics.
    async fn step_seconds(&self, step: &str) -> anyhow::Result<f64> {
        self.metric(&format!(
            "gluesync_operator_update_step_duration_seconds_sum{{step=\"{step}\"}}"
        ))
        .await
    }
}

/// Resident memory of a process, from /proc.
fn rss_kib_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// A running sample of a process's peak resident memory.
struct Peak {
    peak: Arc<AtomicU64>,
    running: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Peak {
    /// Stops sampling; the peak in MiB.
    async fn mib(self) -> f64 {
        self.running.store(false, Ordering::SeqCst);
        let _ = self.task.await;
        self.peak.load(Ordering::SeqCst) as f64 / 1024.0
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn setup(hint: &str, sim: &Simulator, window: i64) -> anyhow::Result<TestNamespace> {
    setup_with(hint, sim, json!({"stabilityWindowSeconds": window})).await
}

/// The sample install with GKO's CRD, at 2.3.2.1, offline; `spec` replaces fields of the spec.
async fn setup_with(
    hint: &str,
    sim: &Simulator,
    spec: serde_json::Value,
) -> anyhow::Result<TestNamespace> {
    let ns = TestNamespace::new(hint).await?;
    gko_test_support::install_crd(&ns.client, &gluesync_operator::crd(), FIELD_MANAGER).await?;
    ns.apply(SAMPLE_INSTALL)?;
    ns.apply("apiVersion: v1\nkind: Secret\nmetadata:\n  name: corehub-credentials\nstringData:\n  username: admin\n  password: admin\n")?;
    let mut doc = json!({
        "apiVersion": "gluesync.molo17.com/v1alpha1",
        "kind": "GluesyncPlatform",
        "metadata": {"name": "gluesync"},
        "spec": {
            "version": "2.3.2.1",
            "coreHub": {"url": sim.url, "credentialsSecret": "corehub-credentials"},
            "catalog": {"offline": true},
            "stabilityWindowSeconds": 0,
            "stabilityTimeoutSeconds": 120,
            "drainTimeoutSeconds": 120,
        },
    });
    if let (Some(base), Some(extra)) = (doc["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    ns.apply(&doc.to_string())?;
    Ok(ns)
}

async fn wait_for(
    api: &Api<GluesyncPlatform>,
    what: &str,
    f: impl Fn(&GluesyncPlatform) -> bool,
) -> anyhow::Result<GluesyncPlatform> {
    wait_every(api, what, f, Duration::from_millis(20)).await
}

/// [`wait_for`], reading the platform every `every`.
async fn wait_every(
    api: &Api<GluesyncPlatform>,
    what: &str,
    f: impl Fn(&GluesyncPlatform) -> bool,
    every: Duration,
) -> anyhow::Result<GluesyncPlatform> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let g = api.get("gluesync").await?;
        if f(&g) {
            return Ok(g);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// A watch of the object `name`, open (its first list done) when this returns: the handle resolves with
/// the instant the watch first sees the object as `f` looks for it. Ends seen so cost the API server
/// nothing while they are waited for (a read every few ms of the GluesyncPlatform, larger than a
/// StatefulSet, loaded the API server during GKO's updates more than during the rollouts alone).
async fn watch_for<K>(
    api: &Api<K>,
    name: &str,
    f: impl Fn(&K) -> bool + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Instant>>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api.clone(), config).boxed();
    // The first list: what it holds is from before the change.
    loop {
        match stream.next().await {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("watching {name}: {e}"),
            None => bail!("the watch of {name} ended"),
        }
    }
    let seen = tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        loop {
            let ev = tokio::time::timeout_at(deadline, stream.next())
                .await
                .context("timed out waiting for the watch")?;
            match ev {
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) if f(&o) => {
                    return Ok(Instant::now());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => bail!("watch: {e}"),
                None => bail!("the watch ended"),
            }
        }
    });
    // The watch takes the connection its list used. A read now leaves the caller an open connection
    // for the change it times next: the first request on a new connection took 40 to 50 ms here,
    // which the change's time counted in some runs and not in others.
    api.get(name).await?;
    Ok(seen)
}

fn current(g: &GluesyncPlatform) -> bool {
    g.status
        .as_ref()
        .is_some_and(|s| s.phase == Some(Phase::Current))
}

/// The update of a generation after `generation` finished.
fn finished_after(generation: i64) -> impl Fn(&GluesyncPlatform) -> bool + Send + 'static {
    move |g| {
        g.status.as_ref().is_some_and(|s| {
            s.update.is_none()
                && s.last_attempt
                    .as_ref()
                    .and_then(|a| a.generation)
                    .is_some_and(|a| a > generation)
        })
    }
}

fn finished(generation: i64) -> impl Fn(&GluesyncPlatform) -> bool {
    move |g| {
        g.status.as_ref().is_some_and(|s| {
            s.update.is_none()
                && s.last_attempt.as_ref().and_then(|a| a.generation) == Some(generation)
        })
    }
}

async fn set_version(api: &Api<GluesyncPlatform>, version: &str) -> anyhow::Result<i64> {
    let g = api
        .patch(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": version}})),
        )
        .await?;
    Ok(g.metadata.generation.unwrap_or(0))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The label the bench patches on the GluesyncPlatform to measure the raw watch latency; GKO ignores it.
const MARK: &str = "gko-bench/mark";

/// What the bench's own watch of the platform saw, and when it first saw it.
#[derive(Default)]
struct Seen {
    /// Values of the label [`MARK`].
    marks: HashMap<String, Instant>,
    /// Generations of `status.update` seen with phase Updating.
    updating: HashMap<i64, Instant>,
}

type Shared = Arc<std::sync::Mutex<Seen>>;

/// Watches the platform from this process (a watch of its own, apart from GKO's).
fn watch_platform(api: &Api<GluesyncPlatform>) -> (Shared, tokio::task::JoinHandle<()>) {
    let seen: Shared = Arc::default();
    let (seen2, api) = (seen.clone(), api.clone());
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            let g = match ev {
                Ok(watcher::Event::Apply(g) | watcher::Event::InitApply(g)) => g,
                _ => continue,
            };
            let Ok(mut seen) = seen2.lock() else {
                return;
            };
            if let Some(mark) = g.labels().get(MARK) {
                seen.marks.entry(mark.clone()).or_insert(now);
            }
            if let Some(status) = g.status.as_ref()
                && status.phase == Some(Phase::Updating)
                && let Some(u) = status.update.as_ref()
            {
                seen.updating.entry(u.generation).or_insert(now);
            }
        }
    });
    (seen, task)
}

/// Waits until the bench's watch has seen what `f` looks for, and returns when it saw it.
async fn seen_at(
    seen: &Shared,
    what: &str,
    f: impl Fn(&Seen) -> Option<Instant>,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(at) = f(&*seen.lock().map_err(|_| anyhow::anyhow!("lock"))?) {
            return Ok(at);
        }
        if Instant::now() > deadline {
            bail!("the watch never saw {what}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The raw watch latency: a label patch on the platform to the bench's watch seeing it, in ms.
async fn watch_latency(
    api: &Api<GluesyncPlatform>,
    seen: &Shared,
    mark: &str,
) -> anyhow::Result<f64> {
    let sent = Instant::now();
    api.patch(
        "gluesync",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {MARK: mark}}})),
    )
    .await?;
    let at = seen_at(seen, "the label patch", |s| s.marks.get(mark).copied()).await?;
    Ok(at.duration_since(sent).as_secs_f64() * 1000.0)
}

/// A `spec.version` change to phase Updating seen by the bench's watch, in ms, and the new generation.
async fn reaction_once(
    api: &Api<GluesyncPlatform>,
    seen: &Shared,
    version: &str,
) -> anyhow::Result<(f64, i64)> {
    let sent = Instant::now();
    let generation = set_version(api, version).await?;
    let at = seen_at(seen, "phase Updating", |s| {
        s.updating.get(&generation).copied()
    })
    .await?;
    Ok((at.duration_since(sent).as_secs_f64() * 1000.0, generation))
}

/// p50 and p99 of a sample, in ms.
#[derive(Clone, Copy)]
struct Spread {
    p50: f64,
    p99: f64,
    max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        Spread {
            p50: percentile(&v, 0.5),
            p99: percentile(&v, 0.99),
            max: v.last().copied().unwrap_or(0.0),
        }
    }

    fn ratio(&self, to: &Spread) -> String {
        format!(
            "p50 {:.1}x, p99 {:.1}x",
            self.p50 / to.p50.max(f64::MIN_POSITIVE),
            self.p99 / to.p99.max(f64::MIN_POSITIVE)
        )
    }
}

/// The normal reaction and the raw watch latency, for the figures that compare with them.
struct Reaction {
    reaction: Spread,
    watch: Spread,
}

/// `runs` `spec.version` changes (each update let finish) to phase Updating, seen through a watch,
/// interleaved with as many label patches whose raw watch latency is measured.
async fn reactions(api: &Api<GluesyncPlatform>, runs: usize) -> anyhow::Result<Reaction> {
    let (seen, watching) = watch_platform(api);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut latencies, mut watches) = (vec![], vec![]);
    for i in 0..runs {
        watches.push(watch_latency(api, &seen, &format!("run-{i}")).await?);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let version = if i % 2 == 0 { "2.3.2.2" } else { "2.3.2.1" };
        let (ms, generation) = reaction_once(api, &seen, version).await?;
        latencies.push(ms);
        wait_for(api, "the update to finish", finished(generation)).await?;
    }
    watching.abort();
    Ok(Reaction {
        reaction: Spread::of(latencies),
        watch: Spread::of(watches),
    })
}

/// A `spec.version` change to phase Updating, seen through a watch; and, in the same runs, the raw
/// watch latency of a label patch.
async fn reaction(runs: usize) -> anyhow::Result<Reaction> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 20);
    let ns = setup("bench-reaction", &sim, 0).await?;
    let gko = Gko::start(&ns, 18181)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    let Reaction { reaction, watch } = reactions(&api, runs).await?;
    println!(
        "reaction (spec.version change -> phase Updating, {runs} runs): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        reaction.p50, reaction.p99, reaction.max
    );
    println!(
        "raw watch latency (label patch on the GluesyncPlatform -> seen by a watch in the bench, {runs} runs): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; reaction/watch: {}",
        watch.p50,
        watch.p99,
        watch.max,
        reaction.ratio(&watch)
    );
    drop(gko);
    Ok(Reaction { reaction, watch })
}

/// `count` labelled module Deployments beyond the sample's four workloads, one pod each.
fn extra_modules(count: usize) -> String {
    (0..count)
        .map(|i| {
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("gluesync-extra-{i:03}"), "labels": {"com.molo17.conductor.type": "module"}},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": format!("gluesync-extra-{i:03}")}},
                    "template": {
                        "metadata": {"labels": {"app.kubernetes.io/name": format!("gluesync-extra-{i:03}")}},
                        "spec": {"containers": [{"name": "extra", "image": "molo17/gluesync-extra:1.0.0"}]}
                    }
                }
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// The reaction against the number of labelled workloads (4, 20, 100): `runs` `spec.version` changes
/// each, beside the raw watch latency measured in the same runs.
async fn reaction_workloads(runs: usize) -> anyhow::Result<()> {
    println!(
        "labelled workloads | reaction p50 ms | reaction p99 ms | watch p50 ms | watch p99 ms | reaction/watch"
    );
    for (i, workloads) in [4usize, 20, 100].into_iter().enumerate() {
        let sim = Simulator::start(Options::default()).await?;
        sim.add_pipelines("p", 20);
        let ns = setup(&format!("bench-workloads-{workloads}"), &sim, 0).await?;
        if workloads > 4 {
            ns.apply(&extra_modules(workloads - 4))?;
        }
        let gko = Gko::start(&ns, 18200 + i as u16)?;
        let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
        wait_for(&api, "every workload ready", |g| {
            g.status.as_ref().is_some_and(|s| {
                s.phase == Some(Phase::Current)
                    && s.components.len() == workloads
                    && s.components.iter().all(|c| c.ready)
            })
        })
        .await?;
        let Reaction { reaction, watch } = reactions(&api, runs).await?;
        drop(gko);
        println!(
            "{workloads:>18} | {:>15.1} | {:>15.1} | {:>12.1} | {:>12.1} | {}",
            reaction.p50,
            reaction.p99,
            watch.p50,
            watch.p99,
            reaction.ratio(&watch)
        );
    }
    Ok(())
}

/// The reaction while Core Hub hangs and the catalog is slow: pipelines left in the ledger (their exits
/// failed), so GKO keeps calling Core Hub to resume them, and every such call hangs; a catalog check asked
/// for with check-now just before, which waits on a catalog that answers after 60 s. Each update then
/// waits for the catalog in Preflight; once measured, the catalog answers again (GKO's next attempt gets
/// its answer, about 5 s later) and Preflight refuses the version, newer than the catalog's latest.
async fn reaction_hung(runs: usize, normal: Option<&Reaction>) -> anyhow::Result<()> {
    const PIPELINES: usize = 20;
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", PIPELINES);
    sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.3.2.2"));
    let ns = setup_with(
        "bench-hung",
        &sim,
        json!({"catalog": {"url": sim.url}, "drainTimeoutSeconds": 1}),
    )
    .await?;
    let gko = Gko::start(&ns, 18186)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase UpdateAvailable", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| matches!(s.phase, Some(Phase::Current | Phase::UpdateAvailable)))
    })
    .await?;

    // Pipelines in the ledger: an update whose exits all fail leaves them paused.
    sim.update_faults(|f| {
        f.error_contains = "/commands/maintenance/exit".into();
        f.error_count = u32::MAX;
    });
    let generation = set_version(&api, "2.3.2.2").await?;
    let g = wait_for(
        &api,
        "the update that leaves pipelines paused",
        finished(generation),
    )
    .await?;
    let ledger = g.status.map_or(0, |s| s.paused_pipelines.len());

    // Core Hub hangs from now on; GKO's calls to resume the ledger hang with it.
    let core_hub_calls = || sim.calls().by_agent.values().sum::<u64>();
    let calls_before = core_hub_calls();
    sim.update_faults(|f| f.hang = true);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (seen, watching) = watch_platform(&api);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut latencies, mut watches) = (vec![], vec![]);
    for i in 0..runs {
        watches.push(watch_latency(&api, &seen, &format!("hung-{i}")).await?);
        // The catalog slow, and a check waiting on it.
        sim.update_faults(|f| f.catalog_delay_ms = 60_000);
        api.patch(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {CHECK_NOW_ANNOTATION: format!("hung-{i}")}}}),
            ),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Newer than the catalog's latest: Preflight refuses it once the catalog answers.
        let version = if i % 2 == 0 { "2.3.2.3" } else { "2.3.2.4" };
        let (ms, generation) = reaction_once(&api, &seen, version).await?;
        latencies.push(ms);
        sim.update_faults(|f| f.catalog_delay_ms = 0);
        wait_for(&api, "the update to finish", finished(generation)).await?;
    }
    watching.abort();
    let hung_calls = core_hub_calls() - calls_before;
    let (reaction, watch) = (Spread::of(latencies), Spread::of(watches));
    println!(
        "reaction while Core Hub hangs and the catalog is slow (spec.version change -> phase Updating, {ledger} pipelines in the ledger, {hung_calls} Core Hub calls hung, a catalog check in flight, {runs} runs): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        reaction.p50, reaction.p99, reaction.max
    );
    println!(
        "  raw watch latency in the same runs: p50 {:.1} ms, p99 {:.1} ms; hung reaction/watch: {}",
        watch.p50,
        watch.p99,
        reaction.ratio(&watch)
    );
    if let Some(n) = normal {
        println!(
            "  normal reaction: p50 {:.1} ms, p99 {:.1} ms (reaction/watch {}); normal raw watch latency: p50 {:.1} ms, p99 {:.1} ms; hung reaction/normal raw watch: {}; hung/normal reaction: {}",
            n.reaction.p50,
            n.reaction.p99,
            n.reaction.ratio(&n.watch),
            n.watch.p50,
            n.watch.p99,
            reaction.ratio(&n.watch),
            reaction.ratio(&n.reaction)
        );
    }
    drop(gko);
    Ok(())
}

/// How often the end of an update is looked for where its time is not the figure (the pre-pull's).
const ROLLOUT_POLL: Duration = Duration::from_millis(5);

/// The time the API server and kwok take to roll out Core Hub's new image, without GKO.
async fn rollout_without_gko(ns: &TestNamespace, image: &str) -> anyhow::Result<f64> {
    rollout_polled(ns, CORE_HUB, image).await
}

/// The StatefulSet `name` judged as Core Hub is (the twin carries no component label: GKO would manage
/// it).
fn rolled_out(s: &StatefulSet, image: &str) -> bool {
    let mut s = s.clone();
    s.labels_mut()
        .entry(gluesync_engine::api::TYPE_LABEL.into())
        .or_insert_with(|| "core-hub".into());
    gluesync_engine::update::observed::Workload::from_statefulset(&s)
        .is_some_and(|w| w.ready && w.image == image)
}

/// [`rollout_of`], its end seen as soon as the API server has it (a read every ROLLOUT_POLL): the
/// rollout's own time, the floor of the pipelines' paused time.
async fn rollout_polled(ns: &TestNamespace, name: &str, image: &str) -> anyhow::Result<f64> {
    let sts: Api<StatefulSet> = Api::namespaced(ns.client.clone(), &ns.name);
    let start = Instant::now();
    patch_image(&sts, name, image).await?;
    loop {
        if rolled_out(&sts.get(name).await?, image) {
            return Ok(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(ROLLOUT_POLL).await;
    }
}

async fn patch_image(sts: &Api<StatefulSet>, name: &str, image: &str) -> anyhow::Result<()> {
    sts.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "core-hub", "image": image}]}}}})),
    )
    .await?;
    Ok(())
}

/// Core Hub's StatefulSet in the sample install.
const CORE_HUB: &str = "gluesync-gluesync-core-hub";
/// Its twin, which no GKO manages (see [`make_twin`]).
const TWIN: &str = "gko-bench-core-hub-twin";

/// The StatefulSet `name` rolled out to `image` by a patch, as GKO's patch does, with nobody but the API
/// server and kwok at work; seconds until it is ready on the image, seen through a watch ([`watch_for`]).
async fn rollout_of(ns: &TestNamespace, name: &str, image: &str) -> anyhow::Result<f64> {
    let sts: Api<StatefulSet> = Api::namespaced(ns.client.clone(), &ns.name);
    let want = image.to_string();
    let done = watch_for(&sts, name, move |s: &StatefulSet| rolled_out(s, &want)).await?;
    let start = Instant::now();
    patch_image(&sts, name, image).await?;
    Ok(done.await??.duration_since(start).as_secs_f64())
}

/// A copy of Core Hub's StatefulSet that no GKO manages (no component label, its pods labelled apart from
/// every managed workload's), ready on Core Hub's image: its rollouts, run between GKO's updates, are the
/// same rollout without GKO on the machine as it is at that moment.
async fn make_twin(ns: &TestNamespace) -> anyhow::Result<()> {
    let sts: Api<StatefulSet> = Api::namespaced(ns.client.clone(), &ns.name);
    let core = sts.get(CORE_HUB).await?;
    let mut twin = StatefulSet {
        metadata: kube::api::ObjectMeta {
            name: Some(TWIN.into()),
            ..Default::default()
        },
        spec: core.spec.clone(),
        status: None,
    };
    let own = std::collections::BTreeMap::from([(
        "app.kubernetes.io/name".to_string(),
        TWIN.to_string(),
    )]);
    let spec = twin
        .spec
        .as_mut()
        .context("Core Hub's StatefulSet has a spec")?;
    spec.selector.match_labels = Some(own.clone());
    spec.selector.match_expressions = None;
    spec.service_name = Some(TWIN.into());
    spec.template.metadata.get_or_insert_default().labels = Some(own);
    sts.create(&kube::api::PostParams::default(), &twin).await?;
    let image = core
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.into_iter().next())
        .and_then(|c| c.image)
        .context("Core Hub's image")?;
    rollout_of(ns, TWIN, &image).await?;
    Ok(())
}

/// What GKO sent and did in one update: the difference of its counters over the update.
#[derive(Default)]
struct Tally {
    status_writes: f64,
    events: f64,
    workload_writes: f64,
    reconciles: f64,
    /// Requests to the API server by verb, watches left out.
    requests: Vec<(String, f64)>,
    /// Bytes of the request bodies sent to the API server.
    bytes: f64,
    /// Seconds in each step, in the order of the update.
    steps: Vec<(String, f64)>,
}

impl Tally {
    fn between(before: &HashMap<String, f64>, after: &HashMap<String, f64>) -> Tally {
        let delta = |name: &str| {
            after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0)
        };
        let prefix = "gluesync_operator_";
        let mut requests: Vec<(String, f64)> = after
            .keys()
            .filter_map(|k| {
                let verb = k
                    .strip_prefix("gluesync_operator_kubernetes_requests_total{verb=\"")?
                    .strip_suffix("\"}")?;
                (verb != "watch").then(|| (verb.to_string(), delta(k)))
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        requests.sort_by(|a, b| a.0.cmp(&b.0));
        let bytes = after
            .keys()
            .filter(|k| k.starts_with("gluesync_operator_kubernetes_request_bytes_total{"))
            .map(|k| delta(k))
            .sum();
        let steps = UpdateStep::VARIANTS
            .iter()
            .map(|s| {
                let key = format!("{prefix}update_step_duration_seconds_sum{{step=\"{s}\"}}");
                (s.to_string(), delta(&key))
            })
            .filter(|(_, t)| *t > 0.0)
            .collect();
        Tally {
            status_writes: delta(&format!("{prefix}status_writes_total")),
            events: delta(&format!("{prefix}events_total")),
            workload_writes: delta(&format!("{prefix}workload_writes_total")),
            reconciles: delta(&format!("{prefix}reconciles_total")),
            requests,
            bytes,
            steps,
        }
    }

    fn requests(&self) -> f64 {
        self.requests.iter().map(|(_, n)| n).sum()
    }

    /// The median of each figure over the runs, per step too.
    fn median(tallies: &[Tally]) -> Tally {
        let med = |f: &dyn Fn(&Tally) -> f64| {
            let mut v: Vec<f64> = tallies.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            percentile(&v, 0.5)
        };
        let mut verbs: Vec<String> = tallies
            .iter()
            .flat_map(|t| t.requests.iter().map(|(v, _)| v.clone()))
            .collect();
        verbs.sort();
        verbs.dedup();
        let of = |list: &[(String, f64)], name: &str| {
            list.iter()
                .find(|(n, _)| n == name)
                .map_or(0.0, |(_, x)| *x)
        };
        Tally {
            status_writes: med(&|t| t.status_writes),
            events: med(&|t| t.events),
            workload_writes: med(&|t| t.workload_writes),
            reconciles: med(&|t| t.reconciles),
            requests: verbs
                .iter()
                .map(|v| (v.clone(), med(&|t| of(&t.requests, v))))
                .collect(),
            bytes: med(&|t| t.bytes),
            steps: UpdateStep::VARIANTS
                .iter()
                .map(|s| (s.to_string(), med(&|t| of(&t.steps, s))))
                .filter(|(_, x)| *x > 0.0)
                .collect(),
        }
    }

    fn print(&self, indent: &str, whole: f64) {
        let verbs: Vec<String> = self
            .requests
            .iter()
            .map(|(v, n)| format!("{n:.0} {v}"))
            .collect();
        println!(
            "{indent}per update (median): {:.0} status writes, {:.0} workload writes, {:.0} events, {:.0} reconciles; {:.0} API requests ({}), {:.1} KiB sent",
            self.status_writes,
            self.workload_writes,
            self.events,
            self.reconciles,
            self.requests(),
            verbs.join(", "),
            self.bytes / 1024.0
        );
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(s, t)| format!("{s} {:.0} ms", t * 1000.0))
            .collect();
        let in_steps: f64 = self.steps.iter().map(|(_, t)| t).sum();
        println!(
            "{indent}time by step (median): {}; outside the steps (the change seen, the end seen): {:.0} ms",
            steps.join(", "),
            (whole - in_steps) * 1000.0
        );
    }
}

/// One status write of the platform as an update leaves it, two ways: a server-side apply under GKO's
/// field manager with the resourceVersion (what GKO sends), and a replace of the status subresource.
async fn status_write_kinds(api: &Api<GluesyncPlatform>) -> anyhow::Result<()> {
    let mut gsp = api.get("gluesync").await?;
    let (mut applied, mut replaced) = (vec![], vec![]);
    for i in 0..30 {
        let mut status = gsp.status.clone().unwrap_or_default();
        status.message = Some(format!("bench write {i}"));
        let patch = json!({
            "apiVersion": "gluesync.molo17.com/v1alpha1",
            "kind": "GluesyncPlatform",
            "metadata": {"resourceVersion": gsp.resource_version()},
            "status": status,
        });
        let start = Instant::now();
        gsp = api
            .patch_status(
                "gluesync",
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        applied.push(start.elapsed().as_secs_f64());
        let mut next = gsp.clone();
        if let Some(s) = next.status.as_mut() {
            s.message = Some(format!("bench replace {i}"));
        }
        let start = Instant::now();
        gsp = api
            .replace_status("gluesync", &Default::default(), &next)
            .await?;
        replaced.push(start.elapsed().as_secs_f64());
    }
    applied.sort_by(f64::total_cmp);
    replaced.sort_by(f64::total_cmp);
    println!(
        "  one status write (30 each): server-side apply median {:.1} ms, replace median {:.1} ms",
        percentile(&applied, 0.5) * 1000.0,
        percentile(&replaced, 0.5) * 1000.0
    );
    Ok(())
}

/// A whole update with 20 pipelines, window 0: GKO's time beyond the rollout's own, what it wrote and
/// asked, and where the time went.
async fn overhead(runs: usize) -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 20);
    let ns = setup("bench-overhead", &sim, 0).await?;
    let gko = Gko::start(&ns, 18182)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    let mut totals = vec![];
    let mut tallies = vec![];
    let mut corehub_calls = vec![];
    let mut paused = vec![];
    // Each update beside the same rollout without GKO (the twin's), run just before it: the machine's
    // speed drifts over a bench, and a pair shares it.
    make_twin(&ns).await?;
    let mut rollouts = vec![];
    let mut differences = vec![];
    for i in 0..runs {
        let version = if i % 2 == 0 { "2.3.2.2" } else { "2.3.2.1" };
        let rollout = rollout_of(&ns, TWIN, &format!("molo17/gluesync-core-hub:{version}")).await?;
        rollouts.push(rollout);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = gko.samples().await?;
        sim.take_paused_time();
        let calls = sim.calls().by_agent.values().sum::<u64>();
        // Its end is seen as the rollout's without GKO is: through a watch.
        let last = api.get("gluesync").await?.metadata.generation.unwrap_or(0);
        let done = watch_for(&api, "gluesync", finished_after(last)).await?;
        let start = Instant::now();
        set_version(&api, version).await?;
        let total = done.await??.duration_since(start).as_secs_f64();
        totals.push(total);
        differences.push(total - rollout);
        corehub_calls.push((sim.calls().by_agent.values().sum::<u64>() - calls) as f64);
        paused.push(
            sim.take_paused_time()
                .context("the update paused no pipeline")?
                .as_secs_f64(),
        );
        // The last writes of the update (its events) land just after the status says it finished.
        tokio::time::sleep(Duration::from_millis(300)).await;
        tallies.push(Tally::between(&before, &gko.samples().await?));
    }
    // The same updates without the pre-pull (the images are on the node: kwok pulls at once), for the
    // pre-pull's share of the overhead.
    api.patch(
        "gluesync",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"prePull": {"enabled": false}}})),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut unpulled = vec![];
    for i in 0..runs {
        let version = if i % 2 == 0 { "2.3.2.2" } else { "2.3.2.1" };
        let last = api.get("gluesync").await?.metadata.generation.unwrap_or(0);
        let done = watch_for(&api, "gluesync", finished_after(last)).await?;
        let start = Instant::now();
        set_version(&api, version).await?;
        unpulled.push(done.await??.duration_since(start).as_secs_f64());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    unpulled.sort_by(f64::total_cmp);
    drop(gko);
    status_write_kinds(&api).await?;
    // The floor of the pipelines' paused time: the rollout alone, its end seen as soon as the API server
    // has it.
    let mut floors = vec![];
    for i in 0..runs {
        let version = if i % 2 == 0 { "2.3.2.2" } else { "2.3.2.1" };
        floors
            .push(rollout_polled(&ns, TWIN, &format!("molo17/gluesync-core-hub:{version}")).await?);
    }
    floors.sort_by(f64::total_cmp);
    totals.sort_by(f64::total_cmp);
    rollouts.sort_by(f64::total_cmp);
    corehub_calls.sort_by(f64::total_cmp);
    paused.sort_by(f64::total_cmp);
    differences.sort_by(f64::total_cmp);
    let (t, r) = (percentile(&totals, 0.5), percentile(&rollouts, 0.5));
    println!(
        "whole update (20 pipelines, window 0, {runs} runs): median {:.0} ms; the same rollout without GKO (a twin StatefulSet, rolled just before each update): median {:.0} ms; GKO's overhead: median of the pairs {:.0} ms (p10 {:.0}, p90 {:.0}), of the medians {:.0} ms",
        t * 1000.0,
        r * 1000.0,
        percentile(&differences, 0.5) * 1000.0,
        percentile(&differences, 0.1) * 1000.0,
        percentile(&differences, 0.9) * 1000.0,
        (t - r) * 1000.0
    );
    Tally::median(&tallies).print("  ", t);
    let u = percentile(&unpulled, 0.5);
    println!(
        "  the same updates with prePull.enabled false: median {:.0} ms; GKO's overhead {:.0} ms (the pre-pull's share: {:.0} ms)",
        u * 1000.0,
        (u - r) * 1000.0,
        (t - u) * 1000.0
    );
    println!(
        "  Core Hub requests per update (median): {:.0}",
        percentile(&corehub_calls, 0.5)
    );
    print_paused(percentile(&paused, 0.5), percentile(&floors, 0.5), 0.0);
    Ok(())
}

/// The pipelines' paused time of a 20-pipeline update (window 0) to a Core Hub image the node has not
/// pulled, which takes 20 s to pull (the simulated node's image cache, hack/pullsim): with the pre-pull,
/// without it, and beside an update to an image already on the node.
async fn prepull() -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 20);
    let ns = setup("bench-prepull", &sim, 0).await?;
    let gko = Gko::start(&ns, 18189)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    // A tag no node has pulled, each time the bench runs.
    let fresh = |base: &str, what: &str| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{base}-{what}{nanos}-slow-pull")
    };
    let run = |version: String, pre_pull: bool| {
        let (api, sim, gko) = (api.clone(), &sim, &gko);
        async move {
            api.patch(
                "gluesync",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"prePull": {"enabled": pre_pull}}})),
            )
            .await?;
            sim.take_paused_time();
            let before = gko.step_seconds("PrePull").await?;
            let generation = set_version(&api, &version).await?;
            wait_every(&api, "the update", finished(generation), ROLLOUT_POLL).await?;
            let paused = sim
                .take_paused_time()
                .context("the update paused no pipeline")?
                .as_secs_f64();
            let pull = gko.step_seconds("PrePull").await? - before;
            anyhow::Ok((paused, pull))
        }
    };
    // The image is on the node (kwok's images pull at once), then one that takes 20 s, without and
    // with the pre-pull.
    let (on_node, _) = run("2.3.2.2".into(), true).await?;
    let (without, _) = run(fresh("2.3.2.1", "a"), false).await?;
    let (with, pull) = run(fresh("2.3.2.2", "b"), true).await?;
    drop(gko);
    println!(
        "pre-pull (20 pipelines, window 0, a Core Hub image that takes 20 s to pull): pipelines paused {:.0} ms with the image on the node; {:.0} ms without the pre-pull; {:.0} ms with it (its pull, {:.1} s, before the drain); with the pre-pull beyond the image on the node: {:.0} ms (target: within 2000)",
        on_node * 1000.0,
        without * 1000.0,
        with * 1000.0,
        pull,
        (with - on_node) * 1000.0
    );
    Ok(())
}

/// The pipelines' paused time (from the first maintenance request to the last pipeline running again,
/// as the simulated Core Hub saw them) beside its floor: Core Hub's own rollout plus the stability window.
fn print_paused(paused: f64, rollout: f64, window: f64) {
    let floor = rollout + window;
    println!(
        "  pipelines paused (median): {:.0} ms; floor (the rollout without GKO {:.0} ms + stability window {:.0} ms): {:.0} ms; beyond the floor: {:.0} ms",
        paused * 1000.0,
        rollout * 1000.0,
        window * 1000.0,
        floor * 1000.0,
        (paused - floor) * 1000.0
    );
}

/// One point of the pipelines curve.
struct PipelinesPoint {
    pipelines: usize,
    drain: f64,
    resume: f64,
    whole: f64,
    cpu: f64,
    idle_mib: f64,
    peak_mib: f64,
    /// The GluesyncPlatform's size as the API server serves it, in KiB.
    object_kib: f64,
    /// KiB GKO sent the API server during the update, and its status writes.
    sent_kib: f64,
    status_writes: f64,
    /// The pipelines' paused time, and the same rollout without GKO (window 0: the floor).
    paused: f64,
    rollout: f64,
}

/// A whole update with `n` pipelines (window 0): drain, resume and whole-update time, GKO's CPU seconds
/// for the update, its memory idle and at the peak, and the GluesyncPlatform's size after it.
async fn pipelines_point(n: usize, port: u16) -> anyhow::Result<PipelinesPoint> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", n);
    let ns = setup(&format!("bench-pipelines-{n}"), &sim, 0).await?;
    let gko = Gko::start(&ns, port)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = gko.rss_kib();

    let peak = gko.peak_rss();
    let cpu = gko.cpu_seconds();
    let before = gko.samples().await?;
    sim.take_paused_time();
    let start = Instant::now();
    let generation = set_version(&api, "2.3.2.2").await?;
    let g = wait_for(&api, "the update", finished(generation)).await?;
    let whole = start.elapsed().as_secs_f64();
    let cpu = gko.cpu_seconds() - cpu;
    let peak = peak.mib().await;
    let paused = sim
        .take_paused_time()
        .context("the update paused no pipeline")?;
    // The last writes of the update (its events) land just after the status says it finished.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = Tally::between(&before, &gko.samples().await?);
    let status = g.status.clone().context("no status")?;
    let attempt = status.last_attempt.clone().context("no last attempt")?;
    let resumed = status
        .spilled_lists
        .get("lastAttempt.resumedPipelines")
        .map_or(attempt.resumed_pipelines.len() as i64, |l| l.count);
    if attempt.result != UpdateResult::Succeeded
        || resumed != n as i64
        || !sim.in_maintenance().is_empty()
    {
        bail!(
            "the update did not succeed, pausing and resuming all {n} pipelines ({resumed} resumed): {:?}",
            attempt.result
        );
    }
    let raw = ns.kubectl(&["get", "gsp", "gluesync", "-o", "json"])?;
    let (drain, resume) = (
        gko.step_seconds("Drain").await?,
        gko.step_seconds("Resume").await?,
    );
    drop(gko);
    let rollout = rollout_without_gko(&ns, "molo17/gluesync-core-hub:2.3.2.1").await?;
    Ok(PipelinesPoint {
        pipelines: n,
        drain,
        resume,
        whole,
        cpu,
        idle_mib: mib(idle),
        peak_mib: peak,
        object_kib: raw.len() as f64 / 1024.0,
        sent_kib: tally.bytes / 1024.0,
        status_writes: tally.status_writes,
        paused: paused.as_secs_f64(),
        rollout,
    })
}

/// The pipelines curve: 1,000, 10,000 and 100,000 pipelines, each on a GKO of its own.
async fn pipelines() -> anyhow::Result<()> {
    println!(
        "pipelines | drain s | resume s | whole update s | GKO CPU s | RSS idle MiB | RSS peak MiB | GluesyncPlatform KiB | status writes | KiB sent | paused s | floor s"
    );
    println!(
        "  (KiB sent: every request body GKO sent the API server during the update; paused: first maintenance request to the last pipeline running again; floor: the same rollout without GKO, window 0)"
    );
    // `GKO_BENCH_PIPELINES=100000` measures one point only.
    let points: Vec<usize> = std::env::var("GKO_BENCH_PIPELINES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000]);
    for (i, n) in points.into_iter().enumerate() {
        let p = pipelines_point(n, 18183 + i as u16 * 10).await?;
        println!(
            "{:>9} | {:>7.2} | {:>8.2} | {:>14.2} | {:>9.2} | {:>12.1} | {:>12.1} | {:>20.1} | {:>13.0} | {:>8.1} | {:>8.2} | {:>7.2}",
            p.pipelines,
            p.drain,
            p.resume,
            p.whole,
            p.cpu,
            p.idle_mib,
            p.peak_mib,
            p.object_kib,
            p.status_writes,
            p.sent_kib,
            p.paused,
            p.rollout
        );
    }
    Ok(())
}

/// The Deployment of unrelated pods the unrelated curve creates, on the image `image`.
fn unrelated_deployment(replicas: usize, image: &str) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "unrelated"},
        "spec": {
            "replicas": replicas,
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "selector": {"matchLabels": {"app.kubernetes.io/name": "unrelated"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "unrelated", "app.kubernetes.io/instance": "gluesync"}},
                "spec": {"containers": [{"name": "web", "image": image}]}
            }
        }
    })
    .to_string()
}

/// Waits until the Deployment `unrelated` has `replicas` ready pods of its latest template.
async fn unrelated_rolled_out(ns: &TestNamespace, replicas: usize) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    let deadline = Instant::now() + Duration::from_secs(900);
    let want = Some(replicas as i32);
    loop {
        let d = api.get("unrelated").await?;
        let s = d.status.unwrap_or_default();
        if s.observed_generation == d.metadata.generation
            && s.replicas == want
            && s.updated_replicas == want
            && s.ready_replicas == want
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the unrelated Deployment did not roll out {replicas} pods");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One point of the unrelated-pods curve.
struct UnrelatedPoint {
    pods: usize,
    idle_mib: f64,
    idle_per_minute: f64,
    cached_pods: f64,
    rollout_s: f64,
    rollout_peak_mib: f64,
    rollout_reconciles: f64,
    deletion_reconciles: f64,
}

const RECONCILES: &str = "gluesync_operator_reconciles_total";
const CACHED_PODS: &str = "gluesync_operator_cached_objects{kind=\"Pod\"}";

/// GKO idle on the sample install with `pods` unrelated pods in its namespace: memory and reconciles
/// over an idle minute, then during a rollout of those pods to a new image.
async fn unrelated_point(pods: usize, port: u16) -> anyhow::Result<UnrelatedPoint> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 20);
    let ns = setup(&format!("bench-unrelated-{pods}"), &sim, 0).await?;
    let gko = Gko::start(&ns, port)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    if pods > 0 {
        ns.apply(&unrelated_deployment(pods, "nginx:1.27"))?;
        unrelated_rolled_out(&ns, pods).await?;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_window = Duration::from_secs(60);
    let before = gko.metric(RECONCILES).await?;
    tokio::time::sleep(idle_window).await;
    let idle_reconciles = gko.metric(RECONCILES).await? - before;
    let idle_mib = mib(gko.rss_kib());
    let cached_pods = gko.metric(CACHED_PODS).await?;

    let (mut rollout_s, mut rollout_peak_mib, mut rollout_reconciles) = (0.0, idle_mib, 0.0);
    if pods > 0 {
        let peak = gko.peak_rss();
        let before = gko.metric(RECONCILES).await?;
        let start = Instant::now();
        ns.apply(&unrelated_deployment(pods, "nginx:1.28"))?;
        unrelated_rolled_out(&ns, pods).await?;
        rollout_s = start.elapsed().as_secs_f64();
        rollout_reconciles = gko.metric(RECONCILES).await? - before;
        rollout_peak_mib = peak.mib().await;
    }
    // Deleted, and every pod gone.
    let mut deletion_reconciles = 0.0;
    if pods > 0 {
        let before = gko.metric(RECONCILES).await?;
        ns.kubectl(&["delete", "deployment", "unrelated", "--wait=false"])?;
        let deadline = Instant::now() + Duration::from_secs(900);
        while !ns
            .kubectl(&[
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/name=unrelated",
                "-o",
                "name",
            ])?
            .trim()
            .is_empty()
        {
            if Instant::now() > deadline {
                bail!("the unrelated pods were not deleted");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        deletion_reconciles = gko.metric(RECONCILES).await? - before;
    }
    Ok(UnrelatedPoint {
        pods,
        idle_mib,
        idle_per_minute: idle_reconciles * 60.0 / idle_window.as_secs_f64(),
        cached_pods,
        rollout_s,
        rollout_peak_mib,
        rollout_reconciles,
        deletion_reconciles,
    })
}

/// The unrelated-pods curve: 0 (the baseline), 500, 2,000 and 5,000 pods of a Deployment GKO does not
/// manage in its namespace, each point on a GKO and namespace of its own.
async fn unrelated() -> anyhow::Result<()> {
    println!(
        "unrelated pods | RSS idle MiB (vs 0) | reconciles/min idle | pods cached | rollout s | RSS peak in rollout MiB (vs 0) | reconciles in rollout | reconciles in deletion"
    );
    let mut baseline: Option<f64> = None;
    for (i, n) in [0, 500, 2_000, 5_000].into_iter().enumerate() {
        let p = unrelated_point(n, 18190 + i as u16).await?;
        let base = *baseline.get_or_insert(p.idle_mib);
        println!(
            "{:>14} | {:>8.1} ({:+.1}) | {:>19.1} | {:>11} | {:>9.1} | {:>10.1} ({:+.1}) | {:>21} | {:>22}",
            p.pods,
            p.idle_mib,
            p.idle_mib - base,
            p.idle_per_minute,
            p.cached_pods,
            p.rollout_s,
            p.rollout_peak_mib,
            p.rollout_peak_mib - base,
            p.rollout_reconciles,
            p.deletion_reconciles
        );
    }
    Ok(())
}

/// The Conductor API of the GKO the conductor figure starts.
const CONDUCTOR_URL: &str = "http://127.0.0.1:18185/conductor/api/containers";
/// Manager sessions, and connections for each kind of caller.
const SESSIONS: usize = 16;
const CONNECTIONS: usize = 32;
/// Each phase of the Conductor load runs this long before it is measured.
const WARM_UP: Duration = Duration::from_secs(1);

/// How many requests of one kind of caller got each answer.
#[derive(Default)]
struct Answers {
    ok: AtomicU64,
    unauthorized: AtomicU64,
    limited: AtomicU64,
    /// Any other status, and requests that got no answer.
    other: AtomicU64,
}

impl Answers {
    fn count(&self, status: Option<u16>) {
        let counter = match status {
            Some(200) => &self.ok,
            Some(401) => &self.unauthorized,
            Some(429) => &self.limited,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Who calls the Conductor API in a phase of the load.
#[derive(Clone)]
enum Callers {
    /// Manager sessions Core Hub knows, already in GKO's identity cache: connection `i` uses session
    /// `i % len`, as a browser keeps its own session.
    Managers(Arc<Vec<String>>),
    /// A new random token on every request.
    Strangers,
    /// New logins: each request a token GKO has not seen, of one of [`LOGIN_USERS`] managers (as users
    /// opening the UI), from the same address as everyone else; a 429 is waited out as `Retry-After`
    /// says, as the UI would.
    Logins(Arc<Vec<String>>, Arc<std::sync::atomic::AtomicUsize>),
}

/// Managers whose new logins the load makes, and the loops that make them.
const LOGIN_USERS: usize = 8;
const LOGIN_CONNECTIONS: usize = 4;

/// [`CONNECTIONS`] loops of `GET /containers` as `callers` until `until`; the answers that arrive from
/// `from` on are counted.
fn load(
    callers: Callers,
    from: Instant,
    until: Instant,
) -> (Arc<Answers>, Vec<tokio::task::JoinHandle<()>>) {
    use std::hash::{BuildHasher, Hasher};
    let answers = Arc::new(Answers::default());
    // One client, and so one pool of connections, for this kind of caller.
    let http = reqwest::Client::new();
    let connections = match callers {
        Callers::Logins(..) => LOGIN_CONNECTIONS,
        _ => CONNECTIONS,
    };
    let tasks = (0..connections)
        .map(|connection| {
            let (http, callers, answers) = (http.clone(), callers.clone(), answers.clone());
            tokio::spawn(async move {
                let mut random = std::hash::RandomState::new().build_hasher();
                while Instant::now() < until {
                    let token = match &callers {
                        Callers::Managers(sessions) => {
                            sessions[connection % sessions.len()].clone()
                        }
                        Callers::Strangers => {
                            random.write_u8(0);
                            format!("{:016x}{connection:04x}", random.finish())
                        }
                        Callers::Logins(tokens, next) => {
                            tokens[next.fetch_add(1, Ordering::Relaxed) % tokens.len()].clone()
                        }
                    };
                    let mut wait = None;
                    let status = match http.get(CONDUCTOR_URL).bearer_auth(token).send().await {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            if matches!(callers, Callers::Logins(..)) && status == 429 {
                                wait = r
                                    .headers()
                                    .get("retry-after")
                                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                            }
                            let _ = r.bytes().await;
                            Some(status)
                        }
                        Err(_) => None,
                    };
                    let now = Instant::now();
                    if now >= from && now < until {
                        answers.count(status);
                    }
                    if let Some(secs) = wait {
                        tokio::time::sleep(Duration::from_secs(secs)).await;
                    }
                }
            })
        })
        .collect();
    (answers, tasks)
}

/// One phase of the Conductor load: what each kind of caller got, and the identity checks Core Hub
/// answered (known sessions) and refused (bad tokens) while it was measured.
struct PhaseFigures {
    managers: Option<Arc<Answers>>,
    strangers: Option<Arc<Answers>>,
    logins: Option<Arc<Answers>>,
    checks_answered: u64,
    checks_refused: u64,
}

async fn conductor_phase(
    sim: &Simulator,
    managers: Option<&Callers>,
    strangers: bool,
    measured: Duration,
) -> PhaseFigures {
    let from = Instant::now() + WARM_UP;
    let until = from + measured;
    let mut tasks = vec![];
    let mut start = |callers: Callers| {
        let (answers, t) = load(callers, from, until);
        tasks.extend(t);
        answers
    };
    let (logins, managers): (Vec<&Callers>, Vec<&Callers>) = managers
        .into_iter()
        .partition(|c| matches!(c, Callers::Logins(..)));
    let managers = managers.first().map(|m| start((*m).clone()));
    let logins = logins.first().map(|m| start((*m).clone()));
    let strangers = strangers.then(|| start(Callers::Strangers));
    tokio::time::sleep_until(from.into()).await;
    let before = sim.calls();
    tokio::time::sleep_until(until.into()).await;
    let after = sim.calls();
    for t in tasks {
        let _ = t.await;
    }
    let refused = after.me_refused - before.me_refused;
    PhaseFigures {
        managers,
        strangers,
        logins,
        checks_answered: (after.me - before.me) - refused,
        checks_refused: refused,
    }
}

/// The Conductor API (`GET /containers`) on one GKO in three phases of equal length: manager sessions
/// GKO already knows, then a flood of bad tokens, then both at once. For each, requests per second by
/// answer, and the Core Hub identity checks it cost (known sessions answered, bad tokens refused).
async fn conductor_load(measured: Duration) -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    let ns = setup("bench-conductor", &sim, 0).await?;
    let gko = Gko::start_with(&ns, 18184, "127.0.0.1:18185")?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;

    // Distinct manager sessions, each checked with Core Hub once here, before anything is measured.
    let sessions: Vec<String> = (0..SESSIONS).map(|_| sim.token_for("manager")).collect();
    let http = reqwest::Client::new();
    for token in &sessions {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = http.get(CONDUCTOR_URL).bearer_auth(token).send().await?;
            match r.status().as_u16() {
                200 => break,
                429 if Instant::now() < deadline => {
                    let wait = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse().ok())
                        .unwrap_or(1);
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                }
                status => bail!("GET /containers as a manager answered {status}"),
            }
        }
    }
    let managers = Callers::Managers(Arc::new(sessions));
    let fresh = |sim: &Simulator| {
        let tokens: Vec<String> = (0..2_000)
            .map(|i| sim.token_for(&format!("login-{}", i % LOGIN_USERS)))
            .collect();
        Callers::Logins(Arc::new(tokens), Arc::default())
    };
    for i in 0..LOGIN_USERS {
        sim.add_user(&format!("login-{i}"), "login", "MANAGER");
    }

    let alone = conductor_phase(&sim, Some(&managers), false, measured).await;
    let flood = conductor_phase(&sim, None, true, measured).await;
    let both = conductor_phase(&sim, Some(&managers), true, measured).await;
    let logins_alone = conductor_phase(&sim, Some(&fresh(&sim)), false, measured).await;
    let logins_flooded = conductor_phase(&sim, Some(&fresh(&sim)), true, measured).await;
    drop(gko);

    let secs = measured.as_secs_f64();
    println!(
        "Conductor API GET /containers, five phases of {:.0} s each (after {:.0} s unmeasured) on one GKO: {SESSIONS} manager sessions GKO knows on {CONNECTIONS} connections; bad tokens, a new random one per request, on {CONNECTIONS} connections; identity checks: the Core Hub calls (GET /authentication/me) each caller cost",
        secs,
        WARM_UP.as_secs_f64()
    );
    println!(
        "  {:<18} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>15} {:>8}",
        "phase",
        "caller",
        "200/s",
        "401/s",
        "429/s",
        "other/s",
        "total/s",
        "identity checks",
        "checks/s"
    );
    let row = |phase: &str, caller: &str, a: &Answers, checks: u64| {
        let rate = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / secs;
        let (ok, unauthorized, limited, other) = (
            rate(&a.ok),
            rate(&a.unauthorized),
            rate(&a.limited),
            rate(&a.other),
        );
        println!(
            "  {phase:<18} {caller:<10} {ok:>8.0} {unauthorized:>8.0} {limited:>8.0} {other:>8.0} {:>8.0}  {:>15} {:>8.1}",
            ok + unauthorized + limited + other,
            checks,
            checks as f64 / secs
        );
    };
    for (phase, figures) in [
        ("managers alone", &alone),
        ("bad tokens alone", &flood),
        ("both at once", &both),
        ("new logins alone", &logins_alone),
        ("logins and flood", &logins_flooded),
    ] {
        if let Some(a) = &figures.managers {
            row(phase, "managers", a, figures.checks_answered);
        }
        if let Some(a) = &figures.logins {
            row(phase, "new logins", a, figures.checks_answered);
        }
        if let Some(a) = &figures.strangers {
            let phase = if figures.managers.is_some() || figures.logins.is_some() {
                ""
            } else {
                phase
            };
            row(phase, "bad tokens", a, figures.checks_refused);
        }
    }
    let per_session = |f: &PhaseFigures| {
        f.managers.as_ref().map_or(0.0, |a| {
            a.ok.load(Ordering::Relaxed) as f64 / secs / SESSIONS as f64
        })
    };
    println!(
        "  answered 200 per manager session: {:.1}/s alone, {:.1}/s while flooded",
        per_session(&alone),
        per_session(&both)
    );
    let logins = |f: &PhaseFigures| {
        f.logins
            .as_ref()
            .map_or(0.0, |a| a.ok.load(Ordering::Relaxed) as f64 / secs)
    };
    println!(
        "  new manager logins (a token GKO never saw, {LOGIN_USERS} managers, same address as the flood) answered 200: {:.1}/s alone, {:.1}/s while flooded",
        logins(&logins_alone),
        logins(&logins_flooded)
    );
    Ok(())
}

/// What became of a stranger's connection that sent an unfinished request head.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum HeadOutcome {
    /// GKO answered 431 (the head passed its bound) and closed it.
    TooLarge,
    /// GKO closed it without an answer (its header timeout, or to make room for a new connection).
    Closed,
    /// Some other answer.
    Answered,
    /// Still open when the client gave up.
    Open,
}

/// One stranger: a connection that sends up to `size` bytes of a request head that never ends, then
/// waits for GKO to answer or close.
async fn unfinished_head(addr: &'static str, size: usize) -> HeadOutcome {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return HeadOutcome::Closed;
    };
    let chunk = vec![b'a'; 4096];
    let mut sent = 0;
    if s.write_all(b"GET /conductor/api/containers HTTP/1.1\r\nHost: gko\r\nX-Pad: ")
        .await
        .is_ok()
    {
        while sent < size && s.write_all(&chunk).await.is_ok() {
            sent += chunk.len();
        }
    }
    let mut answer = [0u8; 12];
    match tokio::time::timeout(Duration::from_secs(15), s.read(&mut answer)).await {
        Ok(Ok(n)) if n >= 12 && &answer[9..12] == b"431" => HeadOutcome::TooLarge,
        Ok(Ok(n)) if n > 0 => HeadOutcome::Answered,
        Ok(_) => HeadOutcome::Closed,
        Err(_) => HeadOutcome::Open,
    }
}

/// Strangers' unfinished request heads (no credentials needed): 512 connections to the Conductor API and
/// 64 to the metrics port, each sending 400 KiB of a head that never ends. GKO's resident memory idle
/// and at its peak under the load, and what became of the connections; a manager's request meanwhile.
async fn heads() -> anyhow::Result<()> {
    const CONDUCTOR: &str = "127.0.0.1:18187";
    const METRICS: &str = "127.0.0.1:18186";
    let sim = Simulator::start(Options::default()).await?;
    let ns = setup("bench-heads", &sim, 0).await?;
    let gko = Gko::start_with(&ns, 18186, CONDUCTOR)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = mib(gko.rss_kib());
    let peak = gko.peak_rss();
    let mut strangers = vec![];
    for (addr, count) in [(CONDUCTOR, 512), (METRICS, 64)] {
        for _ in 0..count {
            strangers.push(tokio::spawn(unfinished_head(addr, 400 * 1024)));
        }
    }
    // A manager meanwhile, on a new connection.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let token = sim.token_for("manager");
    let manager = reqwest::Client::new()
        .get(format!("http://{CONDUCTOR}/conductor/api/containers"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map(|r| r.status().as_u16());
    let mut outcomes: HashMap<HeadOutcome, usize> = HashMap::new();
    for s in strangers {
        *outcomes
            .entry(s.await.unwrap_or(HeadOutcome::Closed))
            .or_default() += 1;
    }
    let peak = peak.mib().await;
    drop(gko);
    let count = |o| outcomes.get(&o).copied().unwrap_or(0);
    println!(
        "Strangers' unfinished request heads: 512 connections to the Conductor API and 64 to the metrics port, each sending 400 KiB of a head that never ends"
    );
    println!(
        "  GKO RSS idle {idle:.1} MiB, peak under the load {peak:.1} MiB; connections: {} answered 431, {} closed unanswered, {} answered otherwise, {} still open after 15 s; a manager's GET /containers meanwhile: {}",
        count(HeadOutcome::TooLarge),
        count(HeadOutcome::Closed),
        count(HeadOutcome::Answered),
        count(HeadOutcome::Open),
        manager.map_or_else(|e| format!("failed ({e})"), |c| c.to_string())
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let which: Vec<String> = std::env::args().skip(1).collect();
    let all = which.is_empty();
    let wants = |name: &str| all || which.iter().any(|w| w == name);
    gko_test_support::control_plane();
    let normal = if wants("reaction") {
        Some(reaction(50).await?)
    } else {
        None
    };
    if wants("workloads") {
        reaction_workloads(20).await?;
    }
    if wants("hang") {
        reaction_hung(50, normal.as_ref()).await?;
    }
    if wants("overhead") {
        overhead(20).await?;
    }
    if wants("prepull") {
        prepull().await?;
    }
    if wants("pipelines") {
        pipelines().await?;
    }
    if wants("unrelated") {
        unrelated().await?;
    }
    if wants("conductor") {
        conductor_load(Duration::from_secs(5)).await?;
    }
    if wants("heads") {
        heads().await?;
    }
    // Not part of `make bench`: the measure behind docs/development/benchmarks.md's word on why GKO keeps its own elector.
    if which.iter().any(|w| w == "lease") {
        lease::compare().await?;
    }
    Ok(())
}
