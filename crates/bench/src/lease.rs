//! `gko-bench lease`: GKO's elector (`cluster::lease`) beside `kube-lease-manager` 0.13 on the same
//! Lease API, with the same timings (lease 3 s; GKO: renew deadline 2 s, retry 300 ms; the crate: grace
//! 1 s, so it renews every 2 s), two candidates, each through a fault proxy of its own:
//!
//! - handover: the holder releases, 1 to 2.8 s after it first led; the time until the other one leads
//!   (median and max of 5 runs);
//! - partition: the holder's proxy goes down (it can reach the API server no more, but runs on); the time
//!   until it stops acting, the time until the other one leads, and how long both acted at once.
//!
//! The figures say whether the crate keeps the two properties GKO relies on: a released Lease is taken
//! over at once (GKO's own update is a rolling restart of GKO: every second without a leader is a second
//! in which no update step runs), and a holder that cannot renew stops acting before another can start.

use std::time::Duration;

use gko_test_support::{TestNamespace, control_plane, proxy::FaultProxy};
use gluesync_operator::cluster::lease::{self, Durations};
use kube_lease_manager::LeaseManagerBuilder;
use tokio::{sync::watch, task::JoinHandle, time::Instant};

const RUNS: usize = 5;

/// One candidate of either kind, seen the same way: does it act now, and how it lets go.
#[allow(clippy::large_enum_variant)] // two per run
enum Candidate {
    Gko {
        leadership: lease::Leadership,
        elector: Option<lease::Elector>,
    },
    Crate {
        state: watch::Receiver<bool>,
        task: Option<JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>>,
    },
}

impl Candidate {
    fn acts(&self) -> bool {
        match self {
            Candidate::Gko { leadership, .. } => leadership.is_leader(),
            Candidate::Crate { state, .. } => *state.borrow(),
        }
    }

    /// Gives the Lease up and returns once the release was written.
    async fn release(&mut self) {
        match self {
            Candidate::Gko { elector, .. } => {
                if let Some(e) = elector.take() {
                    e.release().await;
                }
            }
            Candidate::Crate { state, task } => {
                // The crate's task releases the Lease and ends when every receiver is gone.
                let (_, closed) = watch::channel(false);
                drop(std::mem::replace(state, closed));
                if let Some(t) = task.take() {
                    let _ = t.await;
                }
            }
        }
    }

    /// Stops without releasing, as a killed process.
    fn abandon(&mut self) {
        match self {
            Candidate::Gko { elector, .. } => drop(elector.take()),
            Candidate::Crate { task, .. } => {
                if let Some(t) = task.take() {
                    t.abort();
                }
            }
        }
    }
}

async fn start(
    kind: &str,
    client: kube::Client,
    ns: &str,
    identity: &str,
) -> anyhow::Result<Candidate> {
    Ok(match kind {
        "gko" => {
            let durations = Durations {
                lease: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(2),
                retry: Duration::from_millis(300),
            };
            let (leadership, elector) = lease::start(client, ns, identity.into(), durations);
            Candidate::Gko {
                leadership,
                elector: Some(elector),
            }
        }
        _ => {
            let manager = LeaseManagerBuilder::new(client, lease::LEASE_NAME)
                .with_namespace(ns)
                .with_identity(identity)
                .with_duration(3)
                .with_grace(1)
                .build()
                .await?;
            let (state, task) = manager.watch().await;
            Candidate::Crate {
                state,
                task: Some(task),
            }
        }
    })
}

/// Waits until one of the two acts; its index.
async fn leader(cands: &[Candidate], within: Duration) -> anyhow::Result<usize> {
    let until = Instant::now() + within;
    loop {
        if let Some(i) = cands.iter().position(Candidate::acts) {
            return Ok(i);
        }
        if Instant::now() > until {
            anyhow::bail!("no candidate led within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

struct Pair {
    _ns: TestNamespace,
    proxies: Vec<FaultProxy>,
    cands: Vec<Candidate>,
}

async fn pair(kind: &str, hint: &str) -> anyhow::Result<Pair> {
    let cp = control_plane();
    let ns = TestNamespace::new(hint).await?;
    let mut proxies = Vec::new();
    let mut cands = Vec::new();
    for identity in ["bench-a", "bench-b"] {
        let proxy = FaultProxy::in_front_of(cp)?;
        let client = proxy.client(cp).await?;
        cands.push(start(kind, client, &ns.name, identity).await?);
        proxies.push(proxy);
    }
    Ok(Pair {
        _ns: ns,
        proxies,
        cands,
    })
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// The handover after a release, `RUNS` times: milliseconds from the release written to the other leading.
async fn handover(kind: &str) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::new();
    for run in 0..RUNS {
        let mut p = pair(kind, &format!("lease-{kind}-{run}")).await?;
        let l = leader(&p.cands, Duration::from_secs(15)).await?;
        // Release at a different point of the renewal cycle in each run (the crate's candidates wake at
        // the expiry they last read).
        tokio::time::sleep(Duration::from_millis(1000 + 450 * run as u64)).await;
        p.cands[l].release().await;
        let released = Instant::now();
        let other = 1 - l;
        let until = released + Duration::from_secs(15);
        while !p.cands[other].acts() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        took.push(released.elapsed());
        for c in &mut p.cands {
            c.release().await;
        }
    }
    Ok(took)
}

/// The holder cut off from the API server: (it stopped acting after, the other led after, both acted for).
async fn partition(kind: &str) -> anyhow::Result<(Option<Duration>, Option<Duration>, Duration)> {
    let mut p = pair(kind, &format!("lease-{kind}-cut")).await?;
    let l = leader(&p.cands, Duration::from_secs(15)).await?;
    let other = 1 - l;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    p.proxies[l].stop();
    let cut = Instant::now();
    let (mut stopped, mut led, mut both) = (None, None, Duration::ZERO);
    let mut last = cut;
    while cut.elapsed() < Duration::from_secs(12) {
        let (o, n) = (p.cands[l].acts(), p.cands[other].acts());
        let now = Instant::now();
        if o && n {
            both += now - last;
        }
        last = now;
        if !o && stopped.is_none() {
            stopped = Some(now - cut);
        }
        if n && led.is_none() {
            led = Some(now - cut);
        }
        if stopped.is_some() && led.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    p.cands[l].abandon();
    p.cands[other].release().await;
    Ok((stopped, led, both))
}

pub async fn compare() -> anyhow::Result<()> {
    println!("leader election: GKO's elector beside kube-lease-manager 0.13 (lease 3 s)");
    for (kind, name) in [
        ("gko", "GKO's cluster::lease"),
        ("crate", "kube-lease-manager"),
    ] {
        let mut took = handover(kind).await?;
        took.sort();
        println!(
            "  {name}: handover after a release: median {}, max {} ({RUNS} runs)",
            ms(took[RUNS / 2]),
            ms(took[RUNS - 1])
        );
        let (stopped, led, both) = partition(kind).await?;
        let said = |d: Option<Duration>| d.map(ms).unwrap_or_else(|| "not within 12 s".into());
        println!(
            "  {name}: holder cut off: it stops acting after {}, the other leads after {}, both act for {}",
            said(stopped),
            said(led),
            ms(both)
        );
    }
    Ok(())
}
