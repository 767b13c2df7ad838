//! Reaction: a `spec.version` change to `status.phase=Updating`, beside the raw watch latency; with Core
//! Hub hanging and the catalog slow; against the number of labelled workloads.

use super::*;

/// The label the bench patches on the GluesyncPlatform to measure the raw watch latency; GKO ignores it.
pub(super) const MARK: &str = "gko-bench/mark";

/// What the bench's own watch of the platform saw, and when it first saw it.
#[derive(Default)]
pub(super) struct Seen {
    /// Values of the label [`MARK`].
    marks: HashMap<String, Instant>,
    /// Generations of `status.update` seen with phase Updating.
    updating: HashMap<i64, Instant>,
}

pub(super) type Shared = Arc<std::sync::Mutex<Seen>>;

/// Watches the platform from this process (a watch of its own, apart from GKO's).
pub(super) fn watch_platform(api: &Api<GluesyncPlatform>) -> (Shared, tokio::task::JoinHandle<()>) {
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
pub(super) async fn seen_at(
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
pub(super) async fn watch_latency(
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
pub(super) async fn reaction_once(
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
pub(super) struct Spread {
    p50: f64,
    p99: f64,
    max: f64,
}

impl Spread {
    pub(crate) fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        Spread {
            p50: percentile(&v, 0.5),
            p99: percentile(&v, 0.99),
            max: v.last().copied().unwrap_or(0.0),
        }
    }

    pub(crate) fn ratio(&self, to: &Spread) -> String {
        format!(
            "p50 {:.1}x, p99 {:.1}x",
            self.p50 / to.p50.max(f64::MIN_POSITIVE),
            self.p99 / to.p99.max(f64::MIN_POSITIVE)
        )
    }
}

/// The normal reaction and the raw watch latency, for the figures that compare with them.
pub(super) struct Reaction {
    reaction: Spread,
    watch: Spread,
}

/// `runs` `spec.version` changes (each update let finish) to phase Updating, seen through a watch,
/// interleaved with as many label patches whose raw watch latency is measured.
pub(super) async fn reactions(
    api: &Api<GluesyncPlatform>,
    runs: usize,
) -> anyhow::Result<Reaction> {
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
pub(super) async fn reaction(runs: usize) -> anyhow::Result<Reaction> {
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
pub(super) fn extra_modules(count: usize) -> String {
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
pub(super) async fn reaction_workloads(runs: usize) -> anyhow::Result<()> {
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
pub(super) async fn reaction_hung(runs: usize, normal: Option<&Reaction>) -> anyhow::Result<()> {
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
