//! Leader election against the local control plane: two electors in one namespace, with short durations.
//! One leads at a time and the Lease names it; a release hands over within a retry period; a leader
//! killed without releasing stops leading by itself before the other takes over.

use std::time::Duration;

use gko_test_support::{TestNamespace, eventually};
use gluesync_operator::cluster::lease::{self, Durations, Elector, LEASE_NAME, Leadership};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::time::Instant;

/// Short durations: lease 3 s, renew deadline 2 s, retry 300 ms.
fn durations() -> Durations {
    Durations {
        lease: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry: Duration::from_millis(300),
    }
}

struct Candidate {
    identity: &'static str,
    leadership: Leadership,
    elector: Option<Elector>,
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info,kube=warn")
        .with_test_writer()
        .try_init();
}

/// Two electors, `gko-a` and `gko-b`, competing in the test's namespace.
fn start_two(ns: &TestNamespace) -> Vec<Candidate> {
    init_tracing();
    ["gko-a", "gko-b"]
        .into_iter()
        .map(|identity| {
            let (leadership, elector) =
                lease::start(ns.client.clone(), &ns.name, identity.into(), durations());
            Candidate {
                identity,
                leadership,
                elector: Some(elector),
            }
        })
        .collect()
}

/// Waits until one of them leads; returns (leader, follower) indices.
async fn wait_for_leader(cands: &[Candidate]) -> anyhow::Result<(usize, usize)> {
    let leader = eventually("one elector to lead", Duration::from_secs(15), || async {
        Ok(cands.iter().position(|c| c.leadership.is_leader()))
    })
    .await?;
    Ok((leader, 1 - leader))
}

async fn lease_of(ns: &TestNamespace) -> anyhow::Result<Lease> {
    Ok(Api::<Lease>::namespaced(ns.client.clone(), &ns.name)
        .get(LEASE_NAME)
        .await?)
}

fn holder_of(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

fn transitions_of(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

async fn release_all(cands: &mut [Candidate]) {
    for c in cands {
        if let Some(e) = c.elector.take() {
            e.release().await;
        }
    }
}

/// Sampled often for longer than the lease duration (so the leader must renew): never both lead, one
/// always does, the same one throughout, and the Lease names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_elector_leads_and_the_lease_names_it() -> anyhow::Result<()> {
    let ns = TestNamespace::new("lease-one").await?;
    let mut cands = start_two(&ns);
    let (leader, follower) = wait_for_leader(&cands).await?;
    let leader_rx = cands[leader].leadership.subscribe();
    let follower_rx = cands[follower].leadership.subscribe();

    let end = Instant::now() + Duration::from_secs(5);
    let mut samples = 0;
    while Instant::now() < end {
        let a = cands[0].leadership.is_leader();
        let b = cands[1].leadership.is_leader();
        assert!(!(a && b), "both electors lead at sample {samples}");
        assert!(
            cands[leader].leadership.is_leader(),
            "{} stopped leading at sample {samples}",
            cands[leader].identity
        );
        if samples % 10 == 0 {
            let lease = lease_of(&ns).await?;
            assert_eq!(
                holder_of(&lease).as_deref(),
                Some(cands[leader].identity),
                "the Lease's holder at sample {samples}"
            );
            assert_eq!(
                lease.spec.as_ref().and_then(|s| s.lease_duration_seconds),
                Some(3)
            );
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(samples > 100, "only {samples} samples");
    assert!(*leader_rx.borrow(), "the leader's watch says it leads");
    assert!(!*follower_rx.borrow(), "the follower's watch says it waits");
    assert_eq!(
        cands[leader].leadership.transitions(),
        1,
        "the leader never lapsed"
    );
    assert_eq!(
        cands[follower].leadership.transitions(),
        0,
        "the follower never led"
    );
    release_all(&mut cands).await;
    Ok(())
}

/// After the leader's release the other leads within about a retry period, far under the lease duration
/// it would otherwise wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_over_at_once() -> anyhow::Result<()> {
    let ns = TestNamespace::new("lease-release").await?;
    let mut cands = start_two(&ns);
    let (leader, follower) = wait_for_leader(&cands).await?;
    // Let the follower observe the holder's renewals for a while.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = transitions_of(&lease_of(&ns).await?);
    let leader_rx = cands[leader].leadership.subscribe();

    let elector = cands[leader].elector.take().expect("the leader's elector");
    elector.release().await;
    let released_at = Instant::now();
    assert!(
        !cands[leader].leadership.is_leader(),
        "the releaser leads no more"
    );
    assert!(!*leader_rx.borrow(), "the releaser's watch says so");
    let lease = lease_of(&ns).await?;
    let holder = holder_of(&lease);
    assert!(
        holder.is_none() || holder.as_deref() == Some(cands[follower].identity),
        "the Lease no longer names the releaser: {holder:?}"
    );

    let new_leader = &cands[follower].leadership;
    let took_at = eventually("the follower to lead", Duration::from_secs(10), || async {
        Ok(new_leader.is_leader().then(Instant::now))
    })
    .await?;
    let took = took_at - released_at;
    assert!(
        took < Duration::from_secs(1),
        "the follower took {took:?} to lead after the release (lease 3 s, retry 300 ms)"
    );
    let lease = lease_of(&ns).await?;
    assert_eq!(holder_of(&lease).as_deref(), Some(cands[follower].identity));
    assert_eq!(transitions_of(&lease), before + 1, "one more transition");
    assert!(!cands[leader].leadership.is_leader());
    release_all(&mut cands).await;
    Ok(())
}

/// A leader whose election stops abruptly (its elector dropped without release, as a killed process) stops
/// leading by itself at its renew deadline, before the other one leads; the other takes over only once the
/// lease has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_stops_leading_before_another_takes_over() -> anyhow::Result<()> {
    let ns = TestNamespace::new("lease-kill").await?;
    let mut cands = start_two(&ns);
    let (leader, follower) = wait_for_leader(&cands).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = transitions_of(&lease_of(&ns).await?);
    let old = cands[leader].leadership.clone();
    let new = cands[follower].leadership.clone();
    let old_rx = old.subscribe();

    let killed_at = Instant::now();
    drop(cands[leader].elector.take());
    // A poll of the aborted task that was under way may still finish.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let old_until = old
        .leader_until()
        .expect("the killed leader still leads until its renew deadline");
    assert!(old.is_leader());

    let mut old_false_at = None;
    let mut new_true_at = None;
    let deadline = killed_at + Duration::from_secs(10);
    while new_true_at.is_none() && Instant::now() < deadline {
        // Read the new one first: a true there with the old one still true is an overlap.
        let n = new.is_leader();
        let o = old.is_leader();
        let now = Instant::now();
        assert!(
            !(o && n),
            "both lead at {:?} after the kill",
            now - killed_at
        );
        if !o && old_false_at.is_none() {
            old_false_at = Some(now);
        }
        if n {
            new_true_at = Some(now);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let old_false_at = old_false_at.expect("the killed leader stopped leading");
    let new_true_at = new_true_at.expect("the other one leads within 10 s");
    let d = durations();
    assert!(
        old_false_at >= old_until,
        "the killed leader stopped {:?} before its renew deadline",
        old_until - old_false_at
    );
    assert!(
        old_false_at <= old_until + Duration::from_millis(200),
        "the killed leader stopped {:?} after its renew deadline",
        old_false_at - old_until
    );
    assert!(
        old_false_at <= new_true_at,
        "the old leader stopped {:?} after the new one started",
        old_false_at - new_true_at
    );
    // The other saw the old leader's last renewal no earlier than it was sent (old_until - renew
    // deadline), and waits the lease duration from then.
    let expired = old_until - d.renew_deadline + d.lease;
    assert!(
        new_true_at >= expired,
        "the other led {:?} before the lease expired",
        expired - new_true_at
    );
    assert!(
        new_true_at - killed_at < d.lease + d.retry + Duration::from_secs(1),
        "the other took {:?} after the kill",
        new_true_at - killed_at
    );
    assert!(
        !*old_rx.borrow(),
        "the killed leader's watch says it stopped"
    );
    let lease = lease_of(&ns).await?;
    assert_eq!(holder_of(&lease).as_deref(), Some(cands[follower].identity));
    assert_eq!(transitions_of(&lease), before + 1, "one more transition");
    release_all(&mut cands).await;
    Ok(())
}
