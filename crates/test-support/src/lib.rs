//! Test support: the local control plane, started (or reused) once per test run, and a namespace of its
//! own for each test.
//!
//! The control plane is `hack/controlplane.sh`'s: a real etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok on loopback. `up` is idempotent and locked, so every test binary and thread may
//! call [`control_plane`]; the first starts the cluster and the others reuse it.
//!
//! Faults of the shared control plane are not made by restarting it: a [`FaultProxy`] in front of the API
//! server, for the process under test only, goes down, slows down or drops connections instead.

pub mod proxy;

pub use proxy::FaultProxy;

use std::{
    net::{SocketAddr, ToSocketAddrs as _},
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::Duration,
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config,
    api::{DeleteParams, ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// The running local control plane.
#[derive(Debug)]
pub struct ControlPlane {
    pub kubeconfig: PathBuf,
    /// Folder of kubectl, helm and the other binaries.
    pub bin_dir: PathBuf,
    pub repo_root: PathBuf,
    /// Its certificates, data, logs and kubeconfig (`GKO_CLUSTER_DIR` of `hack/controlplane.sh`).
    pub cluster_dir: PathBuf,
    /// The first of its loopback ports (`GKO_CP_PORT_BASE`).
    pub port_base: u16,
}

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The shared control plane's folder and first port, as `hack/controlplane.sh` takes them.
fn shared_settings() -> (PathBuf, u16) {
    let dir = std::env::var("GKO_CLUSTER_DIR").unwrap_or_else(|_| "/tmp/gko-cluster".into());
    let base = std::env::var("GKO_CP_PORT_BASE")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(26400);
    (PathBuf::from(dir), base)
}

/// Starts the local control plane, or finds the one running. Panics with the script's output when it
/// cannot, since no cluster test can run then.
pub fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(|| {
        let (dir, base) = shared_settings();
        ControlPlane::up(dir, base)
    })
}

/// The control planes a few tests have to themselves, beside the shared one: each named here, with the
/// shared one's folder and the name (`/tmp/gko-cluster-chaos`), and ports of its own.
const OWN_PLANES: [&str; 3] = ["chaos", "crds", "restart"];

/// A control plane of its own for the tests that change what a whole cluster shares, so that the tests
/// on the shared one, running beside them, never see it: the random fault schedules and the restart
/// test kill kube-apiserver and kwok (`chaos`, `restart`), the definition's own tests install and
/// uninstall the GluesyncPlatform CRD (`crds`). Started on first use like the shared one, and stopped with
/// it by `hack/test.sh`. `name` is one of [`OWN_PLANES`].
pub fn own_control_plane(name: &str) -> &'static ControlPlane {
    static PLANES: [OnceLock<ControlPlane>; OWN_PLANES.len()] =
        [const { OnceLock::new() }; OWN_PLANES.len()];
    let index = OWN_PLANES
        .iter()
        .position(|p| *p == name)
        .unwrap_or_else(|| panic!("no control plane is named {name}: {OWN_PLANES:?}"));
    PLANES[index].get_or_init(|| {
        let (dir, base) = shared_settings();
        let mut own = dir.into_os_string();
        own.push(format!("-{name}"));
        // Each plane takes 7 ports from its base: 20 apart leaves room.
        ControlPlane::up(PathBuf::from(own), base + 20 * (index as u16 + 1))
    })
}

impl ControlPlane {
    /// `hack/controlplane.sh up` for the plane in `cluster_dir`, on ports from `port_base`.
    fn up(cluster_dir: PathBuf, port_base: u16) -> ControlPlane {
        let root = repo_root();
        let mut cp = ControlPlane {
            kubeconfig: cluster_dir.join("kubeconfig"),
            bin_dir: PathBuf::new(),
            repo_root: root,
            cluster_dir,
            port_base,
        };
        let out = cp
            .script(&["up"])
            .output()
            .expect("running hack/controlplane.sh up");
        if !out.status.success() {
            panic!(
                "hack/controlplane.sh up failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let bin = cp
            .script(&["bin"])
            .output()
            .expect("running hack/controlplane.sh bin");
        cp.bin_dir = PathBuf::from(String::from_utf8_lossy(&bin.stdout).trim());
        cp
    }

    /// Whether this is the shared control plane (the one [`control_plane`] gives), which every test
    /// without a plane of its own uses.
    pub fn is_shared(&self) -> bool {
        self.cluster_dir == shared_settings().0
    }

    /// `hack/controlplane.sh` with `args`, for this plane.
    pub fn script(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(self.repo_root.join("hack/controlplane.sh"))
            .args(args)
            .env("GKO_CLUSTER_DIR", &self.cluster_dir)
            .env("GKO_CP_PORT_BASE", self.port_base.to_string());
        cmd
    }

    /// A client for the current test's runtime (clients are not shared between runtimes).
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::try_from(self.config().await?)?)
    }

    /// A client that says a 429 or a 503 at once, as kubectl does (an eviction a disruption budget
    /// refuses), instead of retrying it for minutes as kube's default client does.
    pub async fn client_without_retry(&self) -> anyhow::Result<Client> {
        let mut config = self.config().await?;
        config.default_retry = false;
        Ok(Client::try_from(config)?)
    }

    async fn config(&self) -> anyhow::Result<Config> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
    }

    /// A client that authenticates with `token` instead of the admin's credentials.
    pub async fn client_with_token(&self, token: &str) -> anyhow::Result<Client> {
        let mut config = self.config().await?;
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        Ok(Client::try_from(config)?)
    }

    /// The API server's address, from the kubeconfig's current context (or its only cluster).
    pub fn api_server_addr(&self) -> anyhow::Result<SocketAddr> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let cluster_name = kubeconfig
            .current_context
            .as_ref()
            .and_then(|current| kubeconfig.contexts.iter().find(|c| &c.name == current))
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone());
        let cluster = kubeconfig
            .clusters
            .iter()
            .find(|c| cluster_name.is_none() || cluster_name.as_ref() == Some(&c.name))
            .and_then(|c| c.cluster.as_ref())
            .context("the kubeconfig names no cluster")?;
        let server = cluster
            .server
            .as_deref()
            .context("the kubeconfig's cluster has no server")?;
        let authority = server
            .split_once("://")
            .map_or(server, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_string()
        } else {
            format!("{authority}:443")
        };
        with_port
            .to_socket_addrs()
            .with_context(|| format!("resolving the API server {server}"))?
            .next()
            .with_context(|| format!("the API server {server} resolves to no address"))
    }

    /// A command for one of the control plane's binaries (kubectl, helm), pointed at the cluster.
    pub fn command(&self, binary: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(binary));
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }
}

/// A namespace for one test, deleted when the test ends.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    pub cp: &'static ControlPlane,
}

impl TestNamespace {
    /// Creates `gko-<hint>-<random>` on the shared control plane.
    pub async fn new(hint: &str) -> anyhow::Result<TestNamespace> {
        Self::new_on(control_plane(), hint).await
    }

    /// Creates `gko-<hint>-<random>` on the control plane `cp`.
    pub async fn new_on(cp: &'static ControlPlane, hint: &str) -> anyhow::Result<TestNamespace> {
        let client = cp.client().await?;
        let suffix = format!("{:x}", rand_u32());
        let hint: String = hint
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let name = format!("gko-{hint}-{suffix}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("gko-test".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .context("creating the test namespace")?;
        Ok(TestNamespace { name, client, cp })
    }

    /// A client with only the rights of a ServiceAccount of this namespace.
    pub async fn service_account_client(&self, service_account: &str) -> anyhow::Result<Client> {
        let token = self.kubectl(&["create", "token", service_account])?;
        self.cp.client_with_token(token.trim()).await
    }

    /// Runs kubectl in this namespace; fails with its output when kubectl does.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .cp
            .command("kubectl")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs kubectl in this namespace and returns its exit status and standard error.
    pub fn kubectl_status(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> anyhow::Result<(bool, String)> {
        use std::io::Write;
        let mut child = self
            .cp
            .command("kubectl")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .context("kubectl stdin")?
                .write_all(input.as_bytes())?;
        }
        drop(child.stdin.take());
        let out = child.wait_with_output()?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    }

    /// Applies YAML to this namespace with kubectl.
    pub fn apply(&self, yaml: &str) -> anyhow::Result<()> {
        let (ok, out) = self.kubectl_status(&["apply", "--server-side", "-f", "-"], Some(yaml))?;
        if !ok {
            bail!("kubectl apply: {out}");
        }
        Ok(())
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Delete in the background; the namespace controller removes what it holds.
        let client = self.client.clone();
        let name = self.name.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = Api::<Namespace>::all(client)
                    .delete(&name, &DeleteParams::background())
                    .await;
            });
        } else {
            let _ = self
                .cp
                .command("kubectl")
                .args(["delete", "namespace", &self.name, "--wait=false"])
                .output();
        }
    }
}

/// Installs (server-side apply) a CustomResourceDefinition and waits until it is established.
pub async fn install_crd(
    client: &Client,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    field_manager: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &kube::api::PatchParams::apply(field_manager).force(),
        &kube::api::Patch::Apply(crd),
    )
    .await?;
    eventually("the CRD to be established", Duration::from_secs(30), || {
        let crds = crds.clone();
        let name = name.clone();
        async move {
            let crd = crds.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        }
    })
    .await
}

/// A loopback address free for a server a test starts (GKO's Conductor API or metrics, a webhook).
///
/// Taken below the kernel's ephemeral range: a port got from `bind(:0)` and let go lies in that range, and
/// any outgoing connection (the tests' Kubernetes clients make many) may take it before the server binds
/// it, which failed a test now and then with "connection refused". Below the range only a server binds,
/// and one test process hands out every other port of the span before it hands out one again.
pub fn free_addr() -> std::io::Result<std::net::SocketAddr> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const SPAN: u32 = 10_000;
    if low < 1024 + SPAN {
        // An unusual range: no room below it, take the kernel's choice.
        return std::net::TcpListener::bind("127.0.0.1:0")?.local_addr();
    }
    let first = low - SPAN;
    // Test binaries run one after another: each starts elsewhere in the span.
    let offset = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let port = first + (offset + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) % SPAN;
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port as u16)) {
            return l.local_addr();
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        format!("no free loopback port in {first}..{low}"),
    ))
}

/// Polls `check` until it gives `Some`, or fails after `timeout` with the last thing it saw.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::from("nothing yet");
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish() as u32
}
