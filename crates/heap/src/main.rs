//! `gko-heap`: what GKO's hot paths allocate at 100,000 pipelines, counted by the allocator, and the memory
//! gate of CI.
//!
//! The paths:
//! - `listing`: one answer of Core Hub's `GET /pipelines` with 100,000 pipelines, parsed;
//! - `drain`: the engine's decisions of an update from the new version to Core Hub's step, with 100,000
//!   running pipelines (each recorded, then asked into maintenance mode);
//! - `resume`: the decisions of the Resume step, until the modules' step (each asked out again);
//! - `update`: every decision of the same update, from the new version to its end;
//! - `split`: the status at the end of the drain split into what the status keeps and the ConfigMaps of
//!   its long lists, as every status write of a large update does.
//!
//! For each: the peak (the most heap in use at once while the path ran, above what was in use when it
//! began, the world's own data included), the total bytes allocated and the number of allocations. Only
//! GKO's code is counted: the small world of `update::fixtures` that plays Core Hub and the workloads runs
//! with the count off. The figures do not depend on timing, so they are the same on every machine and run.
//!
//! `gko-heap` prints them; `gko-heap --check FILE` also fails when a figure is more than 10 % over the
//! one in FILE (`crates/heap/figures.tsv`, updated deliberately with `gko-heap --write FILE`, the reason in
//! the commit).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    collections::BTreeMap,
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed},
};

use anyhow::{Context as _, bail};
use gluesync_engine::{
    api::{GluesyncPlatform, UpdateStep},
    update::{
        Catalog,
        fixtures::{Hub, World, at, platform},
    },
};
use gluesync_operator::{cluster::spill, corehub::parse_pipelines};

/// The allocator: the system's, counting.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);
static COUNT: AtomicU64 = AtomicU64::new(0);
static ON: AtomicBool = AtomicBool::new(false);

fn allocated(size: usize) {
    let live = LIVE.fetch_add(size, Relaxed) + size;
    if ON.load(Relaxed) {
        COUNT.fetch_add(1, Relaxed);
        TOTAL.fetch_add(size as u64, Relaxed);
        PEAK.fetch_max(live, Relaxed);
    }
}

// SAFETY: every call is passed to `System` unchanged; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            allocated(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            allocated(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            allocated(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What one path allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Figures {
    peak: u64,
    total: u64,
    allocations: u64,
}

/// What a path allocated, over the pieces it runs in ([`count`]), the world's work between them not
/// counted.
struct Meter {
    base: usize,
    figures: Cell<Figures>,
}

impl Meter {
    fn start() -> Meter {
        Meter {
            base: LIVE.load(Relaxed),
            figures: Cell::default(),
        }
    }

    /// Adds what one run of the path allocated, at its peak above this meter's base.
    fn add(&self, peak: usize, total: u64, allocations: u64) {
        let mut fig = self.figures.get();
        fig.peak = fig.peak.max(peak.saturating_sub(self.base) as u64);
        fig.total += total;
        fig.allocations += allocations;
        self.figures.set(fig);
    }

    fn figures(&self) -> Figures {
        self.figures.get()
    }
}

/// Runs `f` once with the count on, and adds what it allocated to each of `meters` (a piece of a path
/// may belong to several: the drain's decisions are also the update's).
fn count<R>(meters: &[&Meter], f: impl FnOnce() -> R) -> R {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
    TOTAL.store(0, Relaxed);
    COUNT.store(0, Relaxed);
    ON.store(true, Relaxed);
    let r = f();
    ON.store(false, Relaxed);
    let (peak, total, allocations) = (PEAK.load(Relaxed), TOTAL.load(Relaxed), COUNT.load(Relaxed));
    for m in meters {
        m.add(peak, total, allocations);
    }
    r
}

const PIPELINES: usize = 100_000;

fn ids() -> Vec<String> {
    (0..PIPELINES).map(|i| format!("pipeline-{i:06}")).collect()
}

/// A `GET /pipelines` answer as Core Hub gives it, with fields GKO does not read.
fn listing_body() -> Vec<u8> {
    let pipelines: Vec<serde_json::Value> = ids()
        .into_iter()
        .map(|id| {
            serde_json::json!({"id": id, "name": format!("orders {id}"), "isInMaintenanceMode": false,
                               "status": "RUNNING", "agents": [{"id": "mssql-1"}, {"id": "pg-1"}]})
        })
        .collect();
    serde_json::to_vec(&pipelines).expect("a listing serializes")
}

fn catalog() -> Catalog {
    [
        ("gluesync-core-hub", "2.3.2.2"),
        ("gluesync-mssql-cdc", "2.3.2.2"),
        ("gluesync-chronos", "0.3.3"),
        ("grafana", "12.0.0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn step_of(g: &GluesyncPlatform) -> Option<UpdateStep> {
    g.status
        .as_ref()
        .and_then(|s| s.update.as_ref())
        .map(|u| u.step.name())
}

/// The update: (drain, resume, whole update, the status at the end of the drain).
fn update() -> anyhow::Result<(Figures, Figures, Figures, GluesyncPlatform)> {
    let ids = ids();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut world = World::new(Some(catalog()), Hub::new(&refs, &[]));
    drop(refs);
    drop(ids);
    let mut g = platform(serde_json::json!({"version": "2.3.2.2", "stabilityWindowSeconds": 0}));
    let whole = Meter::start();
    let drain = Meter::start();
    let mut now = 0;
    let mut drained = None;
    let mut decisions = 0;
    while step_of(&g) != Some(UpdateStep::CoreHub) {
        decisions += 1;
        if decisions > 50 {
            bail!("the drain did not end: {:?}", step_of(&g));
        }
        let t = at(now);
        let d = count(&[&whole, &drain], || world.decide(&g, &t));
        world.carry_out(&mut g, &d, t);
        now += 1;
        if step_of(&g) == Some(UpdateStep::CoreHub) {
            drained = Some(g.clone());
        }
    }
    let resume = Meter::start();
    while g.status.as_ref().is_some_and(|s| s.update.is_some()) {
        decisions += 1;
        if decisions > 200 {
            bail!("the update did not end: {:?}", step_of(&g));
        }
        // Core Hub, the agent and the modules roll out as soon as they are told.
        let planned: Vec<String> = g
            .status
            .as_ref()
            .and_then(|s| s.update.as_ref())
            .map(|u| u.components.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default();
        let names: Vec<&str> = planned.iter().map(String::as_str).collect();
        world.roll_out(&g, &names);
        let t = at(now);
        let d = if step_of(&g) == Some(UpdateStep::Resume) {
            count(&[&whole, &resume], || world.decide(&g, &t))
        } else {
            count(&[&whole], || world.decide(&g, &t))
        };
        world.carry_out(&mut g, &d, t);
        now += 1;
    }
    let outcome = g
        .status
        .as_ref()
        .and_then(|s| s.last_attempt.as_ref())
        .map(|a| (a.result, a.resumed_pipelines.len()));
    match outcome {
        Some((gluesync_engine::api::UpdateResult::Succeeded, n)) if n == PIPELINES => {}
        other => bail!("the update did not succeed with every pipeline resumed: {other:?}"),
    }
    Ok((
        drain.figures(),
        resume.figures(),
        whole.figures(),
        drained.context("the drain's status")?,
    ))
}

fn measure() -> anyhow::Result<Vec<(&'static str, Figures)>> {
    let body = listing_body();
    let listing = Meter::start();
    let parsed = count(&[&listing], || parse_pipelines(&body))?;
    if parsed.len() != PIPELINES {
        bail!("the listing parsed into {} pipelines", parsed.len());
    }
    drop(parsed);
    drop(body);

    let (drain, resume, whole, drained) = update()?;

    let mut status = drained.status.clone().context("a status")?;
    let split = Meter::start();
    let parts = count(&[&split], || spill::split(&drained, &mut status));
    if parts.configmaps.is_empty() {
        bail!("the status at the end of the drain spilled no list");
    }
    Ok(vec![
        ("listing", listing.figures()),
        ("drain", drain),
        ("resume", resume),
        ("update", whole),
        ("split", split.figures()),
    ])
}

fn read(path: &str) -> anyhow::Result<BTreeMap<String, Figures>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let [name, peak, total, allocations] = cols[..] else {
            bail!("{path}: a line is not: path, peak, total bytes, allocations: {line:?}");
        };
        out.insert(
            name.to_string(),
            Figures {
                peak: peak.parse()?,
                total: total.parse()?,
                allocations: allocations.parse()?,
            },
        );
    }
    Ok(out)
}

fn write(path: &str, figures: &[(&str, Figures)]) -> anyhow::Result<()> {
    let mut text = String::from(
        "# gko-heap's figures at 100,000 pipelines (see crates/heap/src/main.rs): path, peak bytes, total\n\
         # bytes, allocations. CI fails when a figure grows more than 10 % over these. Update them with\n\
         # `make heap-write`, and say why in the commit.\n",
    );
    for (name, f) in figures {
        text.push_str(&format!(
            "{name}\t{}\t{}\t{}\n",
            f.peak, f.total, f.allocations
        ));
    }
    std::fs::write(path, text).with_context(|| format!("writing {path}"))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let figures = measure()?;
    let checked = match args.as_slice() {
        [flag, path] if flag == "--check" => Some(read(path)?),
        [flag, path] if flag == "--write" => {
            write(path, &figures)?;
            None
        }
        [] => None,
        _ => bail!("usage: gko-heap [--check FILE | --write FILE]"),
    };
    println!("heap of GKO's hot paths at {PIPELINES} pipelines (counted by the allocator)");
    println!(
        "{:<8} {:>12} {:>12} {:>12}{}",
        "path",
        "peak",
        "total",
        "allocations",
        if checked.is_some() {
            "   vs checked in"
        } else {
            ""
        }
    );
    let mut over = vec![];
    for (name, f) in &figures {
        let mut line = format!(
            "{name:<8} {:>12} {:>12} {:>12}",
            mib(f.peak),
            mib(f.total),
            f.allocations
        );
        if let Some(checked) = &checked {
            let Some(c) = checked.get(*name) else {
                bail!("{name} has no checked-in figures: run make heap-write and commit them");
            };
            let ratio = |now: u64, then: u64| now as f64 / then.max(1) as f64;
            let ratios = [
                ("peak", ratio(f.peak, c.peak)),
                ("total", ratio(f.total, c.total)),
                ("allocations", ratio(f.allocations, c.allocations)),
            ];
            line.push_str(&format!(
                "   {:.2}x {:.2}x {:.2}x",
                ratios[0].1, ratios[1].1, ratios[2].1
            ));
            for (what, r) in ratios {
                if r > 1.10 {
                    over.push(format!("{name} {what}: {r:.2}x the checked-in figure"));
                }
            }
        }
        println!("{line}");
    }
    if !over.is_empty() {
        bail!(
            "the heap grew more than 10 %: {}; find why, or update crates/heap/figures.tsv deliberately (make heap-write) and say why in the commit",
            over.join("; ")
        );
    }
    Ok(())
}
