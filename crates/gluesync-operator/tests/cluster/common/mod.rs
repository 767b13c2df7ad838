//! Helpers shared by the cluster tests: the CRD, an operator running on the test's namespace, the sample
//! install.
#![allow(dead_code)] // each test binary uses its own part of these helpers

use std::{sync::Arc, time::Duration};

use gko_test_support::{TestNamespace, eventually};
use gluesync_operator::{
    api::{FIELD_MANAGER, GluesyncPlatform},
    metrics::Metrics,
    operator,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use tokio::sync::watch;

pub mod kubelet;

pub const SAMPLE_INSTALL: &str = include_str!("../../../../../examples/sample/install.yaml");
pub const RBAC: &str = include_str!("../../../../../deploy/rbac.yaml");
pub const SAMPLE_PLATFORM: &str = include_str!("../../../../../examples/sample/platform.yaml");

/// Applies deploy/rbac.yaml in the namespace: its ServiceAccount, Role and Secret there, and its
/// cluster-scoped admission policies, which tests on the shared plane apply at once: a conflict of two
/// applies of the same policy is tried again.
pub fn apply_rbac(ns: &TestNamespace) -> anyhow::Result<()> {
    let mut tries = 0;
    loop {
        match ns.apply(RBAC) {
            Ok(()) => return Ok(()),
            Err(e) if tries < 5 => {
                tries += 1;
                eprintln!("applying deploy/rbac.yaml again: {e}");
                std::thread::sleep(std::time::Duration::from_millis(200 * tries));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Installs the CRD generated from the current types and waits until it serves.
pub async fn install_crd(client: &Client) -> anyhow::Result<()> {
    gko_test_support::install_crd(client, &gluesync_operator::crd(), FIELD_MANAGER).await
}

/// A namespace with the CRD installed, on the shared control plane.
pub async fn namespace(hint: &str) -> anyhow::Result<TestNamespace> {
    namespace_on(gko_test_support::control_plane(), hint).await
}

/// A namespace with the CRD installed, on the control plane `cp`.
pub async fn namespace_on(
    cp: &'static gko_test_support::ControlPlane,
    hint: &str,
) -> anyhow::Result<TestNamespace> {
    let ns = TestNamespace::new_on(cp, hint).await?;
    install_crd(&ns.client).await?;
    Ok(ns)
}

/// GKO's controller running on one namespace, stopped when dropped.
pub struct Operator {
    pub metrics: Arc<Metrics>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Operator {
    /// Runs GKO with the admin's rights.
    pub fn start(ns: &TestNamespace) -> Operator {
        Self::start_with(ns, ns.client.clone())
    }

    /// Runs GKO with only the rights of deploy/rbac.yaml's Role, held by its admission policies.
    pub async fn start_with_role(ns: &TestNamespace) -> anyhow::Result<Operator> {
        apply_rbac(ns)?;
        let client = ns.service_account_client("gluesync-operator").await?;
        Ok(Self::start_with(ns, client))
    }

    /// Runs GKO with the Conductor API on a free loopback port; the API's base URL comes with it.
    pub fn start_serving(ns: &TestNamespace) -> anyhow::Result<(Operator, String)> {
        Self::start_serving_as(ns, ns.client.clone())
    }

    /// The same over HTTPS with this certificate and key.
    pub fn start_serving_tls(
        ns: &TestNamespace,
        tls: gluesync_operator::conductor::TlsFiles,
    ) -> anyhow::Result<(Operator, String)> {
        let addr = gko_test_support::free_addr()?;
        Ok((
            Self::start_on(ns, ns.client.clone(), Some(addr), Some(tls)),
            format!("https://{addr}"),
        ))
    }

    /// Runs GKO with the rights of `client`, serving the Conductor API.
    pub fn start_serving_as(
        ns: &TestNamespace,
        client: Client,
    ) -> anyhow::Result<(Operator, String)> {
        let addr = gko_test_support::free_addr()?;
        Ok((
            Self::start_on(ns, client, Some(addr), None),
            format!("http://{addr}"),
        ))
    }

    /// Runs GKO with only the rights of deploy/rbac.yaml's Role (and its admission policies), serving
    /// the Conductor API.
    pub async fn start_serving_with_role(ns: &TestNamespace) -> anyhow::Result<(Operator, String)> {
        apply_rbac(ns)?;
        let client = ns.service_account_client("gluesync-operator").await?;
        Self::start_serving_as(ns, client)
    }

    pub fn start_with(ns: &TestNamespace, client: Client) -> Operator {
        Self::start_on(ns, client, None, None)
    }

    fn start_on(
        ns: &TestNamespace,
        client: Client,
        conductor_addr: Option<std::net::SocketAddr>,
        conductor_tls: Option<gluesync_operator::conductor::TlsFiles>,
    ) -> Operator {
        // GKO's log goes with the test's output, shown when the test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info,kube=warn")
            .with_test_writer()
            .try_init();
        let metrics = Arc::new(Metrics::default());
        let (stop, mut rx) = watch::channel(false);
        let settings = operator::Settings {
            instance: Some("test".into()),
            conductor_addr,
            conductor_tls,
            access: test_access(),
            ..operator::Settings::new(ns.name.clone())
        };
        let task = tokio::spawn(operator::run(
            client,
            settings,
            metrics.clone(),
            async move {
                let _ = rx.wait_for(|s| *s).await;
            },
        ));
        Operator {
            metrics,
            stop,
            task: Some(task),
        }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// What GKO may use in the tests: the Core Hub credentials and CA Secrets the tests create, and the
/// simulator on any loopback port.
pub const ALLOWED_SECRETS: &str = "corehub-credentials,corehub-ca,gluesync-disaster-recovery";
pub const ALLOWED_COREHUB_URLS: &str = "http://127.0.0.1:*,https://127.0.0.1:*";

pub fn test_access() -> gluesync_operator::update::access::Access {
    gluesync_operator::update::access::Access::from_lists(ALLOWED_SECRETS, ALLOWED_COREHUB_URLS)
}

pub fn platforms(ns: &TestNamespace) -> Api<GluesyncPlatform> {
    Api::namespaced(ns.client.clone(), &ns.name)
}

/// Waits until GKO has reported the install settled: phase Current, or UpdateAvailable when the catalog
/// knows a newer Core Hub, with every component ready (GKO reports the phase before the pods are up: an
/// update started before they run on their nodes has nothing to pre-pull, and on a busy machine that
/// takes a moment).
pub async fn wait_settled(ns: &TestNamespace) -> anyhow::Result<GluesyncPlatform> {
    use gluesync_operator::api::Phase;
    wait_for_platform(
        ns,
        "phase Current or UpdateAvailable, every component ready",
        |g| {
            g.status.as_ref().is_some_and(|s| {
                matches!(s.phase, Some(Phase::Current | Phase::UpdateAvailable))
                    && s.components.iter().all(|c| c.ready)
            })
        },
    )
    .await
}

/// Waits until GKO has read the catalog's newer Core Hub (phase UpdateAvailable) with every component
/// ready, as [`wait_settled`] does.
pub async fn wait_available(ns: &TestNamespace) -> anyhow::Result<GluesyncPlatform> {
    use gluesync_operator::api::Phase;
    wait_for_platform(ns, "phase UpdateAvailable, every component ready", |g| {
        g.status.as_ref().is_some_and(|s| {
            s.phase == Some(Phase::UpdateAvailable) && s.components.iter().all(|c| c.ready)
        })
    })
    .await
}

/// Waits until the GluesyncPlatform satisfies `check`, and returns it.
pub async fn wait_for_platform(
    ns: &TestNamespace,
    what: &str,
    check: impl Fn(&GluesyncPlatform) -> bool,
) -> anyhow::Result<GluesyncPlatform> {
    let api = platforms(ns);
    eventually(what, Duration::from_secs(60), || {
        let api = api.clone();
        let check = &check;
        async move {
            let g = api.get("gluesync").await?;
            Ok(check(&g).then_some(g))
        }
    })
    .await
}

/// A simulator with 20 running pipelines, one more already in maintenance mode (`kept-in-maintenance`),
/// and a catalog that offers Core Hub 2.3.2.2 and Chronos 0.3.3.
pub async fn simulator() -> anyhow::Result<gluesync_simulator::Simulator> {
    use gluesync_simulator::{CatalogEntry, Options, Simulator};
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 20);
    sim.add_pipelines("kept-in-maintenance-", 1);
    sim.set_maintenance("kept-in-maintenance-00020", true);
    sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.3.2.2"));
    sim.set_catalog("gluesync-chronos", CatalogEntry::all("0.3.3"));
    sim.set_catalog("grafana", CatalogEntry::all("11.2.0"));
    sim.set_catalog("prometheus", CatalogEntry::all("2.53.0"));
    Ok(sim)
}

/// The sample install, Core Hub credentials, and a GluesyncPlatform at 2.3.2.1 that reaches Core Hub and
/// the catalog at the simulator; `spec` is merged into its spec.
pub fn install_with_simulator(
    ns: &TestNamespace,
    sim: &gluesync_simulator::Simulator,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    ns.apply(SAMPLE_INSTALL)?;
    // The pair's Secret, empty, as the chart creates it: GKO may not create Secrets.
    ns.apply("apiVersion: v1\nkind: Secret\nmetadata:\n  name: gluesync-disaster-recovery\ntype: Opaque\n")?;
    ns.apply(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: corehub-credentials\nstringData:\n  username: admin\n  password: admin\n",
    )?;
    let mut base = serde_json::json!({
        "version": "2.3.2.1",
        "coreHub": {"url": sim.url, "credentialsSecret": "corehub-credentials"},
        "catalog": {"url": sim.url},
        "stabilityWindowSeconds": 1,
        "stabilityTimeoutSeconds": 60,
    });
    merge(&mut base, spec);
    let doc = serde_json::json!({
        "apiVersion": "gluesync.molo17.com/v1alpha1",
        "kind": "GluesyncPlatform",
        "metadata": {"name": "gluesync"},
        "spec": base,
    });
    ns.apply(&doc.to_string())
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(&k);
                } else {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (a, b) => *a = b,
    }
}

/// Changes the spec with a merge patch, as `kubectl patch --type merge` does.
pub async fn patch_spec(ns: &TestNamespace, spec: serde_json::Value) -> anyhow::Result<()> {
    platforms(ns)
        .patch(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await?;
    Ok(())
}

/// The reasons of the events on the GluesyncPlatform, oldest first.
pub async fn event_reasons(ns: &TestNamespace) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::api::events::v1::Event;
    let events: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    let mut list: Vec<Event> = events
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("GluesyncPlatform")
        })
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(list.into_iter().filter_map(|e| e.reason).collect())
}

/// The event reasons, once `last` is among them (events follow the status writes that cause them).
pub async fn event_reasons_through(ns: &TestNamespace, last: &str) -> anyhow::Result<Vec<String>> {
    eventually(
        &format!("the event {last}"),
        Duration::from_secs(30),
        || async move {
            let reasons = event_reasons(ns).await?;
            Ok(reasons.iter().any(|r| r == last).then_some(reasons))
        },
    )
    .await
}

/// The image of a workload's first container.
pub async fn image_of(ns: &TestNamespace, kind: &str, name: &str) -> anyhow::Result<String> {
    Ok(ns
        .kubectl(&[
            "get",
            kind,
            name,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])?
        .trim()
        .to_string())
}

/// The operator binary, as a user runs it, on one namespace: its standard error is kept (and echoed),
/// its metrics served on a port of its own.
pub struct Gko {
    child: std::process::Child,
    pub metrics_url: String,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// How to start a [`Gko`].
#[derive(Default)]
pub struct GkoOptions {
    /// Its name in the Lease, events and Core Hub's User-Agent.
    pub instance: Option<String>,
    /// A kubeconfig other than the control plane's (a fault proxy's).
    pub kubeconfig: Option<std::path::PathBuf>,
    pub env: Vec<(String, String)>,
    /// Where it serves the Conductor API (default: it serves none).
    pub conductor_addr: Option<String>,
    /// Another build of GKO to run (a previous release's, see `hack/previous-release.sh`); this one
    /// when `None`.
    pub binary: Option<std::path::PathBuf>,
}

impl Gko {
    pub fn spawn(ns: &TestNamespace, options: GkoOptions) -> anyhow::Result<Gko> {
        Gko::spawn_in(&ns.name, ns.cp, options)
    }

    /// [`Gko::spawn`] on namespace `namespace` of the control plane `cp`.
    pub fn spawn_in(
        namespace: &str,
        cp: &gko_test_support::ControlPlane,
        options: GkoOptions,
    ) -> anyhow::Result<Gko> {
        use std::io::BufRead;
        let port = gko_test_support::free_addr()?.port();
        // (These helpers are shared with the plugin's tests, which start GKO in-process only.)
        let Some(this) = option_env!("CARGO_BIN_EXE_gluesync-operator") else {
            anyhow::bail!("GKO as a process is started by gluesync-operator's own tests only");
        };
        let binary = options
            .binary
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from(this));
        let mut cmd = std::process::Command::new(binary);
        cmd.args([
            "run",
            "--namespace",
            namespace,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--conductor-addr",
            options.conductor_addr.as_deref().unwrap_or("off"),
        ])
        .env(
            "KUBECONFIG",
            options.kubeconfig.as_ref().unwrap_or(&cp.kubeconfig),
        )
        .env("RUST_LOG", "info,kube=warn")
        .env("GKO_ALLOWED_SECRETS", ALLOWED_SECRETS)
        .env("GKO_ALLOWED_COREHUB_URLS", ALLOWED_COREHUB_URLS)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        if let Some(instance) = &options.instance {
            cmd.env("POD_NAME", instance);
        }
        for (k, v) in &options.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        // Its log (standard output) and standard error, kept in one list of lines.
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let name = options.instance.clone().unwrap_or_else(|| "gko".into());
        let read = |source: Box<dyn std::io::Read + Send>| {
            let keep = lines.clone();
            let name = name.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(source)
                    .lines()
                    .map_while(Result::ok)
                {
                    eprintln!("[{name}] {line}");
                    keep.lock().map(|mut l| l.push(line)).ok();
                }
            })
        };
        let readers = vec![read(Box::new(stdout)), read(Box::new(stderr))];
        Ok(Gko {
            child,
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
            lines,
            readers,
        })
    }

    /// Has it written a line containing `text` to standard error?
    pub fn said(&self, text: &str) -> bool {
        self.lines
            .lock()
            .map(|l| l.iter().any(|line| line.contains(text)))
            .unwrap_or(false)
    }

    /// Waits until it has written `text`.
    pub async fn wait_for_line(&self, text: &str, timeout: Duration) -> anyhow::Result<()> {
        eventually(&format!("GKO to say {text:?}"), timeout, || async {
            Ok(self.said(text).then_some(()))
        })
        .await
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The files (sockets included) the process holds open now.
    pub fn open_files(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))?.count())
    }

    /// Has the process exited?
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// SIGKILL, as the kernel's OOM killer or a node loss would.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        self.drain_output();
        Ok(())
    }

    /// SIGTERM, as Kubernetes stops a pod, and waits for it to exit.
    pub fn terminate(&mut self) -> anyhow::Result<()> {
        self.sigterm()?;
        self.child.wait()?;
        self.drain_output();
        Ok(())
    }

    /// SIGTERM, then up to `grace` for it to exit, as the kubelet gives a pod; SIGKILL after that, as the
    /// kubelet does. True when it exited by itself.
    pub fn stop_within(&mut self, grace: Duration) -> anyhow::Result<bool> {
        self.sigterm()?;
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                self.drain_output();
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill()?;
        Ok(false)
    }

    fn sigterm(&self) -> anyhow::Result<()> {
        std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        Ok(())
    }

    /// Waits until every line it wrote has been read.
    fn drain_output(&mut self) {
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }

    /// The value of one of its metrics (0 when absent).
    pub async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let body = reqwest::get(&self.metrics_url).await?.text().await?;
        Ok(body
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(' '))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0.0))
    }
}

impl Drop for Gko {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The step of the update that runs, if one does.
pub fn step_of(g: &GluesyncPlatform) -> Option<gluesync_operator::api::UpdateStep> {
    g.status
        .as_ref()
        .and_then(|s| s.update.as_ref())
        .map(|u| u.step.name())
}

/// Waits until the update is at `step`.
pub async fn wait_for_step(
    ns: &TestNamespace,
    step: gluesync_operator::api::UpdateStep,
) -> anyhow::Result<GluesyncPlatform> {
    wait_for_platform(ns, &format!("step {step:?}"), |g| step_of(g) == Some(step)).await
}

/// Waits until the update of `generation` (or a later one) has ended, and returns the platform.
pub async fn wait_finished(
    ns: &TestNamespace,
    generation: i64,
) -> anyhow::Result<GluesyncPlatform> {
    wait_finished_within(ns, generation, Duration::from_secs(180)).await
}

/// [`wait_finished`], for at most `timeout`.
pub async fn wait_finished_within(
    ns: &TestNamespace,
    generation: i64,
    timeout: Duration,
) -> anyhow::Result<GluesyncPlatform> {
    let api = platforms(ns);
    eventually("the update to finish", timeout, || {
        let api = api.clone();
        async move {
            let g = api.get("gluesync").await?;
            let done = g.status.as_ref().is_some_and(|s| {
                s.update.is_none()
                    && s.last_attempt
                        .as_ref()
                        .is_some_and(|a| a.generation.unwrap_or(0) >= generation)
            });
            Ok(done.then_some(g))
        }
    })
    .await
}

/// Who holds GKO's Lease in the namespace ("" when nobody does).
#[allow(dead_code)]
pub fn lease_holder(ns: &TestNamespace) -> anyhow::Result<String> {
    lease_field(ns, "holderIdentity")
}

/// A field of the spec of GKO's Lease (`holderIdentity`, `renewTime`...), "" when it is not set.
#[allow(dead_code)]
pub fn lease_field(ns: &TestNamespace, field: &str) -> anyhow::Result<String> {
    Ok(ns
        .kubectl(&[
            "get",
            "lease",
            "gluesync-operator",
            "-o",
            &format!("jsonpath={{.spec.{field}}}"),
        ])?
        .trim()
        .to_string())
}

/// Kills one process of the control plane `cp` (`kube-apiserver` or `kwok`) and starts it again
/// (`hack/controlplane.sh restart`), one restart at a time in this process; returns once it serves again.
/// Only on a plane of the test's own ([`gko_test_support::own_control_plane`]): the shared one's other
/// tests would see it go.
pub async fn restart_control_plane(
    cp: &'static gko_test_support::ControlPlane,
    process: &'static str,
) -> anyhow::Result<()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    anyhow::ensure!(!cp.is_shared(), "the shared control plane is not restarted");
    tokio::task::spawn_blocking(move || {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let out = cp.script(&["restart", process]).output()?;
        anyhow::ensure!(
            out.status.success(),
            "restarting {process}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    })
    .await?
}

/// Runs helm; fails with its output when helm does.
pub fn helm(ns: &TestNamespace, args: &[&str]) -> anyhow::Result<String> {
    let out = ns
        .cp
        .command("helm")
        .arg("--namespace")
        .arg(&ns.name)
        .args(args)
        .output()?;
    if !out.status.success() {
        anyhow::bail!(
            "helm {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The kit's dependency on the GKO chart, packaged once per test run (`helm dependency build`; hack/test.sh
/// packages it before any test starts). Tests run as processes of their own, side by side: the package is
/// made again only when GKO's chart changed since, under a lock, so that no test reads it half written.
pub fn kit() -> anyhow::Result<String> {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| build_kit().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow::anyhow!("helm dependency build: {e}"))?;
    Ok(gko_test_support::repo_root()
        .join("charts/gluesync-kit")
        .display()
        .to_string())
}

fn build_kit() -> anyhow::Result<()> {
    let root = gko_test_support::repo_root();
    let kit = root.join("charts/gluesync-kit");
    let lock = std::fs::File::create(std::env::temp_dir().join("gko-kit-dependency.lock"))?;
    lock.lock()?;
    let packaged = std::fs::read_dir(kit.join("charts"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tgz"))
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .min();
    let changed = newest_change(&root.join("charts/gluesync-operator"))?
        .max(newest_change(&kit.join("Chart.yaml"))?);
    if packaged.is_some_and(|p| p >= changed) {
        return Ok(());
    }
    let out = gko_test_support::control_plane()
        .command("helm")
        .args(["dependency", "build"])
        .arg(&kit)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The last time anything under `path` changed.
fn newest_change(path: &std::path::Path) -> anyhow::Result<std::time::SystemTime> {
    let meta = std::fs::metadata(path)?;
    let mut newest = meta.modified()?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            newest = newest.max(newest_change(&entry?.path())?);
        }
    }
    Ok(newest)
}
