//! GKO's own overhead in a whole update (against a twin StatefulSet rolled without GKO), the status
//! writes an update makes, and the pre-pull's cost.

use super::*;

/// How often the end of an update is looked for where its time is not the figure (the pre-pull's).
pub(super) const ROLLOUT_POLL: Duration = Duration::from_millis(5);

/// The time the API server and kwok take to roll out Core Hub's new image, without GKO.
pub(super) async fn rollout_without_gko(ns: &TestNamespace, image: &str) -> anyhow::Result<f64> {
    rollout_polled(ns, CORE_HUB, image).await
}

/// The StatefulSet `name` judged as Core Hub is (the twin carries no component label: GKO would manage
/// it).
pub(super) fn rolled_out(s: &StatefulSet, image: &str) -> bool {
    let mut s = s.clone();
    s.labels_mut()
        .entry(gluesync_engine::api::TYPE_LABEL.into())
        .or_insert_with(|| "core-hub".into());
    gluesync_engine::update::observed::Workload::from_statefulset(&s)
        .is_some_and(|w| w.ready && w.image == image)
}

/// [`rollout_of`], its end seen as soon as the API server has it (a read every ROLLOUT_POLL): the
/// rollout's own time, the floor of the pipelines' paused time.
pub(super) async fn rollout_polled(
    ns: &TestNamespace,
    name: &str,
    image: &str,
) -> anyhow::Result<f64> {
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

pub(super) async fn patch_image(
    sts: &Api<StatefulSet>,
    name: &str,
    image: &str,
) -> anyhow::Result<()> {
    sts.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "core-hub", "image": image}]}}}})),
    )
    .await?;
    Ok(())
}

/// Core Hub's StatefulSet in the sample install.
pub(super) const CORE_HUB: &str = "gluesync-gluesync-core-hub";

/// Its twin, which no GKO manages (see [`make_twin`]).
pub(super) const TWIN: &str = "gko-bench-core-hub-twin";

/// The StatefulSet `name` rolled out to `image` by a patch, as GKO's patch does, with nobody but the API
/// server and kwok at work; seconds until it is ready on the image, seen through a watch ([`watch_for`]).
pub(super) async fn rollout_of(ns: &TestNamespace, name: &str, image: &str) -> anyhow::Result<f64> {
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
pub(super) async fn make_twin(ns: &TestNamespace) -> anyhow::Result<()> {
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
pub(super) struct Tally {
    pub(crate) status_writes: f64,
    pub(crate) events: f64,
    pub(crate) workload_writes: f64,
    pub(crate) reconciles: f64,
    /// Requests to the API server by verb, watches left out.
    pub(crate) requests: Vec<(String, f64)>,
    /// Bytes of the request bodies sent to the API server.
    pub(crate) bytes: f64,
    /// Seconds in each step, in the order of the update.
    pub(crate) steps: Vec<(String, f64)>,
}

impl Tally {
    pub(crate) fn between(before: &HashMap<String, f64>, after: &HashMap<String, f64>) -> Tally {
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

    pub(crate) fn requests(&self) -> f64 {
        self.requests.iter().map(|(_, n)| n).sum()
    }

    /// The median of each figure over the runs, per step too.
    pub(crate) fn median(tallies: &[Tally]) -> Tally {
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

    pub(crate) fn print(&self, indent: &str, whole: f64) {
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
pub(super) async fn status_write_kinds(api: &Api<GluesyncPlatform>) -> anyhow::Result<()> {
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
pub(super) async fn overhead(runs: usize) -> anyhow::Result<()> {
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
pub(super) async fn prepull() -> anyhow::Result<()> {
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
