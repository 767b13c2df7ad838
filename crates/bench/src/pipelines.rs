//! Pipelines: drain, resume and whole-update time, CPU and memory for 1,000 to 100,000 pipelines.

use super::*;

/// The pipelines' paused time (from the first maintenance request to the last pipeline running again,
/// as the simulated Core Hub saw them) beside its floor: Core Hub's own rollout plus the stability window.
pub(super) fn print_paused(paused: f64, rollout: f64, window: f64) {
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
pub(super) struct PipelinesPoint {
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
pub(super) async fn pipelines_point(n: usize, port: u16) -> anyhow::Result<PipelinesPoint> {
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
pub(super) async fn pipelines() -> anyhow::Result<()> {
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
