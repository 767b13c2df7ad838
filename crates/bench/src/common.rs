//! What every benchmark uses: GKO as a child process (its resident memory, its metrics), the sample
//! install on a namespace of its own, the waits on the GluesyncPlatform, and percentiles.

use super::*;

pub(super) const SAMPLE_INSTALL: &str = include_str!("../../../examples/sample/install.yaml");

pub(super) struct Gko {
    child: Child,
    metrics_url: String,
}

impl Gko {
    pub(crate) fn start(ns: &TestNamespace, port: u16) -> anyhow::Result<Gko> {
        Self::start_with(ns, port, "off")
    }

    pub(crate) fn start_with(
        ns: &TestNamespace,
        port: u16,
        conductor: &str,
    ) -> anyhow::Result<Gko> {
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
    pub(crate) fn rss_kib(&self) -> u64 {
        rss_kib_of(self.child.id())
    }

    /// CPU seconds (user and system) the process has used, from /proc.
    pub(crate) fn cpu_seconds(&self) -> f64 {
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
    pub(crate) fn peak_rss(&self) -> Peak {
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
    pub(crate) async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let text = reqwest::get(&self.metrics_url).await?.text().await?;
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0))
    }

    /// Every sample of GKO's /metrics, by its name with labels.
    pub(crate) async fn samples(&self) -> anyhow::Result<HashMap<String, f64>> {
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
    pub(crate) async fn step_seconds(&self, step: &str) -> anyhow::Result<f64> {
        self.metric(&format!(
            "gluesync_operator_update_step_duration_seconds_sum{{step=\"{step}\"}}"
        ))
        .await
    }
}

/// Resident memory of a process, from /proc.
pub(super) fn rss_kib_of(pid: u32) -> u64 {
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
pub(super) struct Peak {
    peak: Arc<AtomicU64>,
    running: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Peak {
    /// Stops sampling; the peak in MiB.
    pub(crate) async fn mib(self) -> f64 {
        self.running.store(false, Ordering::SeqCst);
        let _ = self.task.await;
        self.peak.load(Ordering::SeqCst) as f64 / 1024.0
    }
}

pub(super) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub(super) async fn setup(
    hint: &str,
    sim: &Simulator,
    window: i64,
) -> anyhow::Result<TestNamespace> {
    setup_with(hint, sim, json!({"stabilityWindowSeconds": window})).await
}

/// The sample install with GKO's CRD, at 2.3.2.1, offline; `spec` replaces fields of the spec.
pub(super) async fn setup_with(
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

pub(super) async fn wait_for(
    api: &Api<GluesyncPlatform>,
    what: &str,
    f: impl Fn(&GluesyncPlatform) -> bool,
) -> anyhow::Result<GluesyncPlatform> {
    wait_every(api, what, f, Duration::from_millis(20)).await
}

/// [`wait_for`], reading the platform every `every`.
pub(super) async fn wait_every(
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
pub(super) async fn watch_for<K>(
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

pub(super) fn current(g: &GluesyncPlatform) -> bool {
    g.status
        .as_ref()
        .is_some_and(|s| s.phase == Some(Phase::Current))
}

/// The update of a generation after `generation` finished.
pub(super) fn finished_after(
    generation: i64,
) -> impl Fn(&GluesyncPlatform) -> bool + Send + 'static {
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

pub(super) fn finished(generation: i64) -> impl Fn(&GluesyncPlatform) -> bool {
    move |g| {
        g.status.as_ref().is_some_and(|s| {
            s.update.is_none()
                && s.last_attempt.as_ref().and_then(|a| a.generation) == Some(generation)
        })
    }
}

pub(super) async fn set_version(api: &Api<GluesyncPlatform>, version: &str) -> anyhow::Result<i64> {
    let g = api
        .patch(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": version}})),
        )
        .await?;
    Ok(g.metadata.generation.unwrap_or(0))
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
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
