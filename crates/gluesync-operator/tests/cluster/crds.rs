//! The GluesyncPlatform definition (CRD) installed and upgraded by the chart (`crds.install`, `crds.keep`),
//! with the real helm on the local control plane: a first install on a cluster without the definition, the
//! upgrade that adopts the platform the install's hook created, an upgrade that changes the definition, a
//! second release beside the owner, uninstall, and the upgrade of a release installed with the previous
//! chart, whose definition came from its `crds/` folder.
//!
//! The definition is cluster-wide, so the test runs on a control plane of its own: no other test sees a
//! cluster without it.

use crate::common;

use std::path::{Path, PathBuf};

use anyhow::Context;
use common::{helm, kit};
use gko_test_support::TestNamespace;
use serde_json::Value;

const CRD: &str = "customresourcedefinition/gluesyncplatforms.gluesync.molo17.com";

/// The last commit whose chart shipped the definition in `crds/` (the chart of release 0.3.0 and after).
const PREVIOUS_CHART_COMMIT: &str = "343d3054b57e3b28d68c0d12ae42f53578a6929e";

fn chart() -> PathBuf {
    gko_test_support::repo_root().join("charts/gluesync-operator")
}

/// `helm install` or `upgrade` of GKO's chart at `chart` as release `gluesync`, with the platform under
/// gitops at `version`.
fn release(ns: &TestNamespace, verb: &str, chart: &Path, version: &str) -> anyhow::Result<String> {
    helm(
        ns,
        &[
            verb,
            "gluesync",
            &chart.display().to_string(),
            "--set",
            &format!("platform.version={version}"),
            "--set",
            "platform.updatePolicy=gitops",
        ],
    )
}

fn get(ns: &TestNamespace, what: &str) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(
        &ns.kubectl(&["get", what, "-o", "json"])?,
    )?)
}

fn annotation(object: &Value, key: &str) -> Option<String> {
    object["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

/// Removes every GluesyncPlatform's finalizers (no GKO runs here to remove them), then the definition,
/// and waits until it is gone.
fn remove_definition(ns: &TestNamespace) -> anyhow::Result<()> {
    let listed = ns
        .kubectl_status(&["get", "gsp", "-A", "-o", "json"], None)?
        .1;
    if let Ok(list) = serde_json::from_str::<Value>(&listed) {
        for item in list["items"].as_array().into_iter().flatten() {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            let namespace = item["metadata"]["namespace"].as_str().unwrap_or_default();
            let patch = [
                "patch",
                "gsp",
                name,
                "-n",
                namespace,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ];
            let (ok, out) = ns.kubectl_status(&patch, None)?;
            if ok {
                continue;
            }
            // A platform whose namespace is gone while it still had GKO's finalizer (a test's
            // namespace deleted with no GKO left to settle it) blocks the definition's deletion: the API
            // server takes no write in a namespace that does not exist, so the namespace comes back for
            // the patch, then goes.
            anyhow::ensure!(
                out.contains(&format!("namespaces \"{namespace}\" not found")),
                "kubectl patch: {out}"
            );
            ns.kubectl(&["create", "namespace", namespace])?;
            ns.kubectl(&patch)?;
            ns.kubectl(&["delete", "namespace", namespace, "--wait=false"])?;
        }
    }
    ns.kubectl(&["delete", CRD, "--ignore-not-found", "--wait=true"])?;
    Ok(())
}

/// A copy of GKO's chart whose definition carries one more printer column, as a new chart version's
/// would.
fn chart_with_a_new_column(dir: &Path) -> anyhow::Result<PathBuf> {
    let copy = dir.join("gluesync-operator");
    copy_dir(&chart(), &copy)?;
    let file = copy.join("files/gluesyncplatforms.crd.yaml");
    let crd = std::fs::read_to_string(&file)?;
    let column = "  - additionalPrinterColumns:\n";
    anyhow::ensure!(
        crd.contains(column),
        "the definition has no printer columns"
    );
    std::fs::write(
        &file,
        crd.replacen(
            column,
            "  - additionalPrinterColumns:\n    - jsonPath: .spec.releaseChannel\n      name: Channel\n      type: string\n",
            1,
        ),
    )?;
    Ok(copy)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// GKO's chart as it was at `commit`, from the repository's history.
fn chart_at(commit: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let root = gko_test_support::repo_root();
    let archive = std::process::Command::new("git")
        .current_dir(&root)
        .args([
            "archive",
            "--format=tar",
            commit,
            "charts/gluesync-operator",
        ])
        .output()
        .context("git archive")?;
    anyhow::ensure!(
        archive.status.success(),
        "the previous chart (commit {commit}) is not in this clone's history: {}",
        String::from_utf8_lossy(&archive.stderr)
    );
    let mut untar = std::process::Command::new("tar")
        .current_dir(dir)
        .arg("-x")
        .stdin(std::process::Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(
        untar.stdin.as_mut().context("tar's input")?,
        &archive.stdout,
    )?;
    anyhow::ensure!(untar.wait()?.success(), "tar failed");
    Ok(dir.join("charts/gluesync-operator"))
}

/// Whether a release's manifest (or hooks) holds an object of `kind`, as a document of its own.
fn holds(manifest: &str, kind: &str) -> bool {
    manifest.lines().any(|l| l == format!("kind: {kind}"))
}

fn printer_columns(crd: &Value) -> Vec<String> {
    crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_installs_upgrades_and_keeps_the_definition_and_adopts_the_platform_its_hook_made()
-> anyhow::Result<()> {
    let plane = gko_test_support::own_control_plane("crds");
    let a = TestNamespace::new_on(plane, "crds-owner").await?;
    let b = TestNamespace::new_on(plane, "crds-beside").await?;
    let c = TestNamespace::new_on(plane, "crds-previous").await?;
    let dir = std::env::temp_dir().join(format!("gko-crds-{}", a.name));
    std::fs::create_dir_all(&dir)?;
    let result = scenario(&a, &b, &c, &dir).await;
    // Put the definition back as the tests install it, whatever happened.
    let restored = async {
        remove_definition(&a)?;
        common::install_crd(&a.client).await
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result.and(restored)
}

async fn scenario(
    a: &TestNamespace,
    b: &TestNamespace,
    c: &TestNamespace,
    dir: &Path,
) -> anyhow::Result<()> {
    remove_definition(a)?;

    // A first install on a cluster without the definition: the release creates it, then the platform as
    // its post-install hook (Helm could not have mapped the platform before the definition existed).
    release(a, "install", &chart(), "2.3.2.1")?;
    let crd = get(a, CRD)?;
    assert_eq!(
        annotation(&crd, "meta.helm.sh/release-name").as_deref(),
        Some("gluesync")
    );
    assert_eq!(
        annotation(&crd, "meta.helm.sh/release-namespace").as_deref(),
        Some(a.name.as_str())
    );
    assert_eq!(
        annotation(&crd, "helm.sh/resource-policy").as_deref(),
        Some("keep")
    );
    let platform = get(a, "gsp/gluesync")?;
    assert_eq!(platform["spec"]["version"], "2.3.2.1");
    assert_eq!(
        annotation(&platform, "gluesync.molo17.com/helm-hook-revision").as_deref(),
        Some("1"),
        "the install's platform is its hook, which records the revision"
    );
    let manifest = helm(a, &["get", "manifest", "gluesync"])?;
    assert!(holds(&manifest, "CustomResourceDefinition"));
    assert!(!holds(&manifest, "GluesyncPlatform"));
    assert!(holds(
        &helm(a, &["get", "hooks", "gluesync"])?,
        "GluesyncPlatform"
    ));

    // The first upgrade adopts the platform. Helm 3 applies nothing to an object it adopts, so the chart
    // renders it as it runs, says so, and the values apply at the next upgrade.
    let notes = release(a, "upgrade", &chart(), "2.3.2.2")?;
    assert!(
        notes.contains("part of release gluesync")
            && notes.contains("run the same helm upgrade again"),
        "the adopting upgrade says that the values apply at the next one: {notes}"
    );
    let manifest = helm(a, &["get", "manifest", "gluesync"])?;
    assert!(holds(&manifest, "GluesyncPlatform"));
    assert!(manifest.contains("version: 2.3.2.1"));
    assert_eq!(get(a, "gsp/gluesync")?["spec"]["version"], "2.3.2.1");

    // The next upgrade applies the values, and the record of the hook goes.
    let notes = release(a, "upgrade", &chart(), "2.3.2.2")?;
    assert!(
        !notes.contains("run the same helm upgrade again"),
        "{notes}"
    );
    let platform = get(a, "gsp/gluesync")?;
    assert_eq!(platform["spec"]["version"], "2.3.2.2");
    assert_eq!(
        annotation(&platform, "gluesync.molo17.com/helm-hook-revision"),
        None
    );
    // And the one after that too: the platform is a resource of the release like any other.
    release(a, "upgrade", &chart(), "2.3.2.3")?;
    assert_eq!(get(a, "gsp/gluesync")?["spec"]["version"], "2.3.2.3");

    // A chart whose definition changed: helm upgrade upgrades the definition.
    let newer = chart_with_a_new_column(dir)?;
    assert!(!printer_columns(&get(a, CRD)?).contains(&"Channel".to_string()));
    release(a, "upgrade", &newer, "2.3.2.3")?;
    assert!(
        printer_columns(&get(a, CRD)?).contains(&"Channel".to_string()),
        "helm upgrade upgraded the definition"
    );

    // A second release in another namespace leaves the definition to its owner, and says so.
    let notes = release(b, "install", &chart(), "2.3.2.1")?;
    assert!(
        notes.contains(&format!("belongs to release {}/gluesync", a.name)),
        "{notes}"
    );
    assert!(!holds(
        &helm(b, &["get", "manifest", "gluesync"])?,
        "CustomResourceDefinition"
    ));
    assert!(holds(
        &helm(b, &["get", "manifest", "gluesync"])?,
        "GluesyncPlatform"
    ));
    let crd = get(a, CRD)?;
    assert_eq!(
        annotation(&crd, "meta.helm.sh/release-namespace").as_deref(),
        Some(a.name.as_str())
    );
    assert!(
        printer_columns(&crd).contains(&"Channel".to_string()),
        "the other release did not put its own definition back"
    );

    // helm uninstall keeps the definition and the platform.
    helm(a, &["uninstall", "gluesync", "--wait"])?;
    get(a, CRD).context("the definition outlives the release")?;
    assert_eq!(get(a, "gsp/gluesync")?["spec"]["version"], "2.3.2.3");
    get(b, "gsp/gluesync")?;
    helm(b, &["uninstall", "gluesync", "--wait"])?;

    // A release installed with the previous chart: its definition came from crds/, owned by no release.
    remove_definition(a)?;
    let previous = chart_at(PREVIOUS_CHART_COMMIT, dir)?;
    assert!(previous.join("crds/gluesyncplatforms.yaml").exists());
    release(c, "install", &previous, "2.3.2.1")?;
    assert_eq!(annotation(&get(c, CRD)?, "meta.helm.sh/release-name"), None);
    // The upgrade to this chart stops before it changes anything, and says what to run once.
    let refused = release(c, "upgrade", &newer, "2.3.2.2")
        .expect_err("helm cannot upgrade a definition no release owns");
    let said = refused.to_string();
    assert!(said.contains("no Helm release owns"), "{said}");
    let command = said
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("helm template gluesync <this chart>"))
        .with_context(|| format!("the message names the command to run: {said}"))?;
    assert!(
        command.contains("--show-only templates/crd.yaml"),
        "{command}"
    );
    assert!(command.contains(&format!("-n {}", c.name)), "{command}");
    assert_eq!(get(c, "gsp/gluesync")?["spec"]["version"], "2.3.2.1");
    // The kit says the same with its own names.
    let kit = kit()?;
    let refused = helm(c, &["install", "kit", &kit])
        .expect_err("the kit cannot install a definition no release owns");
    let said = refused.to_string();
    assert!(
        said.contains("--show-only charts/operator/templates/crd.yaml")
            && said.contains("--set operator.crds.install=false"),
        "{said}"
    );
    // What it says to run, with this chart: the new definition, owned by the release.
    let rendered = helm(
        c,
        &[
            "template",
            "gluesync",
            &newer.display().to_string(),
            "--set",
            "platform.version=2.3.2.2",
            "--show-only",
            "templates/crd.yaml",
        ],
    )?;
    let (ok, out) = c.kubectl_status(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&rendered),
    )?;
    anyhow::ensure!(ok, "kubectl apply: {out}");
    let crd = get(c, CRD)?;
    assert_eq!(
        annotation(&crd, "meta.helm.sh/release-namespace").as_deref(),
        Some(c.name.as_str())
    );
    assert!(printer_columns(&crd).contains(&"Channel".to_string()));
    // Then the same upgrade goes through, and the platform, a resource of the release since its install,
    // takes the values at once.
    release(c, "upgrade", &newer, "2.3.2.2")?;
    assert!(holds(
        &helm(c, &["get", "manifest", "gluesync"])?,
        "CustomResourceDefinition"
    ));
    assert_eq!(get(c, "gsp/gluesync")?["spec"]["version"], "2.3.2.2");
    // From now on helm upgrade upgrades the definition: back to this chart's, without the column.
    release(c, "upgrade", &chart(), "2.3.2.2")?;
    assert!(!printer_columns(&get(c, CRD)?).contains(&"Channel".to_string()));
    helm(c, &["uninstall", "gluesync", "--wait"])?;
    Ok(())
}
