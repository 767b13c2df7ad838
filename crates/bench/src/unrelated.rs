//! Unrelated pods: GKO's memory and reconciles beside thousands of pods it does not manage.

use super::*;

/// The Deployment of unrelated pods the unrelated curve creates, on the image `image`.
pub(super) fn unrelated_deployment(replicas: usize, image: &str) -> String {
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
pub(super) async fn unrelated_rolled_out(
    ns: &TestNamespace,
    replicas: usize,
) -> anyhow::Result<()> {
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
pub(super) struct UnrelatedPoint {
    pods: usize,
    idle_mib: f64,
    idle_per_minute: f64,
    cached_pods: f64,
    rollout_s: f64,
    rollout_peak_mib: f64,
    rollout_reconciles: f64,
    deletion_reconciles: f64,
}

pub(super) const RECONCILES: &str = "gluesync_operator_reconciles_total";

pub(super) const CACHED_PODS: &str = "gluesync_operator_cached_objects{kind=\"Pod\"}";

/// GKO idle on the sample install with `pods` unrelated pods in its namespace: memory and reconciles
/// over an idle minute, then during a rollout of those pods to a new image.
pub(super) async fn unrelated_point(pods: usize, port: u16) -> anyhow::Result<UnrelatedPoint> {
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
pub(super) async fn unrelated() -> anyhow::Result<()> {
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
