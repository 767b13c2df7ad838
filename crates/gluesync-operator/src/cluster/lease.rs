//! Leader election on a `coordination.k8s.io/v1` Lease: of the GKO replicas of one namespace, one acts and
//! the others wait.
//!
//! We write it ourselves: `kube-lease-manager` (0.13, on kube 5) keeps saying its holder leads while it
//! cannot renew, and its candidates wake only at the expiry they last read (`gko-bench lease` measures
//! both; docs/development/benchmarks.md has the figures). It follows client-go's `leaderelection`
//! package:
//!
//! - The Lease is [`LEASE_NAME`] in GKO's namespace; the holder identity is the pod name. The
//!   [`Durations`] are client-go's: lease 15 s, renew deadline 10 s, retry period 2 s.
//! - Every retry period each candidate GETs the Lease. When it is missing, the candidate creates it (a 409
//!   means another created it first). When another identity holds it and it has not expired, the
//!   candidate waits. Otherwise it replaces it (a PUT carrying the `resourceVersion` it read, so a 409
//!   means another candidate wrote first) with itself as holder, its lease duration, a new `renewTime`,
//!   and, when the holder changes, a new `acquireTime` and `leaseTransitions` + 1.
//! - Expiry is judged on this process's monotonic clock, never by comparing the Lease's wall-clock times
//!   with ours (client-go's "observed time"): a candidate notes the instant it first saw the current Lease
//!   record, and the Lease expires `leaseDurationSeconds` after that instant. Clock skew between hosts does
//!   not matter.
//! - The holder counts as leader only until the instant it *sent* its last successful acquire or renew
//!   request plus the renew deadline. Anyone who saw that record saw it after it was sent and waits the
//!   (longer) lease duration from then, so a holder that cannot renew stops acting before another can
//!   take over. [`Leadership::is_leader`] computes this from the stored instant at each call, so it turns
//!   false by itself even when the background task is stuck or gone.
//! - When a candidate sees the Lease held by another identity it stops leading at once.
//!
//! Readiness has nothing to do with the Lease: the replicas that wait are ready too.
//!
//! # Use
//!
//! ```ignore
//! let (leadership, elector) = lease::start(client, &namespace, pod_name, Durations::default());
//! // Hand clones of `leadership` to the parts that act. They check `is_leader()` right before every
//! // write or Core Hub call, and start or stop their work on `subscribe()`'s changes.
//! shutdown_signal.await;
//! // Stop the work and wait until the work in hand is finished (the elector keeps renewing meanwhile)...
//! elector.release().await; // ...then give the Lease up, so another replica takes it within a retry period.
//! ```
//!
//! Dropping the [`Elector`] without calling [`Elector::release`] stops renewing and leaves the Lease as it
//! is, as a killed process would: leadership lapses at the renew deadline and another replica takes the
//! Lease once it expires.

use crate::cluster::wording::Said;
use std::{
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tokio::{
    sync::{oneshot, watch},
    task::JoinHandle,
    time::Instant,
};

/// The name of the Lease, in GKO's namespace.
pub const LEASE_NAME: &str = "gluesync-operator";

/// The timings of the election. The defaults are client-go's; tests shorten them.
///
/// They must satisfy `retry < renew_deadline < lease`: the gap between the renew deadline and the lease
/// duration is the margin by which a holder that stops renewing stops acting before another can start.
#[derive(Clone, Debug)]
pub struct Durations {
    /// How long the others wait, from when they observe the holder's last renewal, before taking the Lease
    /// (written to the Lease as `leaseDurationSeconds`, rounded up to whole seconds).
    pub lease: Duration,
    /// How long the holder counts as leader after sending its last successful acquire or renew request.
    pub renew_deadline: Duration,
    /// How often every candidate tries to acquire or renew.
    pub retry: Duration,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            lease: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// Whether this process leads. A handle the parts of GKO hold; cheap to clone.
#[derive(Clone)]
pub struct Leadership {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("identity", &self.shared.identity)
            .field("is_leader", &self.is_leader())
            .finish()
    }
}

impl Leadership {
    /// True only while this process holds the Lease and is within its renew deadline. Check it right before
    /// every write or Core Hub call: it is computed from the clock at each call, so it turns false at the
    /// renew deadline even when the background task could not run.
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// Resolves when this process is leader (at once when it is already). Never resolves when it never
    /// becomes leader, e.g. after [`Elector::release`].
    pub async fn acquired(&self) {
        let mut rx = self.subscribe();
        // The sender lives in `self.shared`, so this cannot fail.
        let _ = rx.wait_for(|leader| *leader).await;
    }

    /// A receiver whose value is whether this process leads; it changes when leadership does (to start
    /// work on acquisition and stop it on loss). A lapse at the renew deadline shows up here within a few
    /// milliseconds; [`Leadership::is_leader`] is exact.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.shared.tx.subscribe()
    }

    /// A Leadership that always leads, with no Lease: for tests and single-process use.
    pub fn always() -> Leadership {
        Leadership {
            shared: Arc::new(Shared::new(String::new(), true)),
        }
    }

    /// The identity this process competes with (the pod name); empty for [`Leadership::always`].
    pub fn identity(&self) -> &str {
        &self.shared.identity
    }

    /// Until when this process leads unless it renews, or `None` when it does not lead (or always leads).
    pub fn leader_until(&self) -> Option<Instant> {
        let until = *self.shared.lock();
        until.filter(|t| Instant::now() < *t)
    }

    /// How many times leadership changed in this process (acquisitions plus losses and releases).
    pub fn transitions(&self) -> u64 {
        self.shared.transitions.load(Ordering::Relaxed)
    }
}

/// The background election; see [`start`]. [`Elector::release`] gives the Lease up. Dropping it without
/// releasing stops the election and leaves the Lease to expire, as a killed process would.
pub struct Elector {
    shared: Arc<Shared>,
    api: Api<Lease>,
    durations: Durations,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Elector {
    /// Stops competing and gives the Lease up, so another replica takes it within about a retry period.
    ///
    /// Call it on shutdown *after* the work in hand has finished: until then the elector keeps renewing.
    /// `is_leader()` turns false first, then the Lease, when it still names this process, is written with
    /// no holder and a lease duration of 1 s (as client-go's `ReleaseOnCancel` does). Gives up after the
    /// renew deadline when the API server does not answer; the Lease then expires by itself.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let identity = self.shared.identity.clone();
        if self.shared.set_until(None) == Some(false) {
            tracing::info!(%identity, "stopped leading: releasing the Lease on shutdown");
        }
        let deadline = Instant::now() + self.durations.renew_deadline;
        match tokio::time::timeout_at(deadline, self.give_up_lease()).await {
            Ok(Ok(true)) => tracing::info!(%identity, lease = LEASE_NAME, "released the Lease"),
            Ok(Ok(false)) => {
                tracing::info!(%identity, lease = LEASE_NAME, "the Lease is not ours: nothing to release")
            }
            Ok(Err(error)) => {
                tracing::warn!(%identity, error = %Said(&error), "could not release the Lease; it will expire")
            }
            Err(_) => tracing::warn!(%identity, "releasing the Lease timed out; it will expire"),
        }
    }

    /// Writes the Lease with no holder when it names us; true when it did.
    async fn give_up_lease(&self) -> Result<bool, kube::Error> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
                return Ok(false);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            if holder(&spec) != Some(self.shared.identity.as_str()) {
                return Ok(false);
            }
            lease.spec = Some(released_spec(&spec, jiff::Timestamp::now()));
            match self
                .api
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => return Ok(true),
                // Written meanwhile (by an interrupted renewal of ours): read it again.
                Err(kube::Error::Api(s)) if s.is_conflict() && attempts < 3 => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts competing for the Lease in the background (call it inside a Tokio runtime). Returns the handle
/// the rest of GKO checks and the [`Elector`] whose [`release`](Elector::release) gives the Lease up on
/// shutdown.
///
/// # Panics
///
/// When the durations do not satisfy `retry < renew_deadline < lease`.
pub fn start(
    client: Client,
    namespace: &str,
    identity: String,
    durations: Durations,
) -> (Leadership, Elector) {
    assert!(
        durations.retry < durations.renew_deadline && durations.renew_deadline < durations.lease,
        "leader election needs retry < renew deadline < lease duration, got {durations:?}"
    );
    let shared = Arc::new(Shared::new(identity.clone(), false));
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let (stop, stop_rx) = oneshot::channel();
    spawn_watchdog(Arc::downgrade(&shared), durations.retry);
    let candidate = Candidate {
        api: api.clone(),
        namespace: namespace.to_string(),
        identity,
        durations: durations.clone(),
        shared: shared.clone(),
        observed: None,
        last_holder: None,
    };
    let task = tokio::spawn(candidate.run(stop_rx));
    (
        Leadership {
            shared: shared.clone(),
        },
        Elector {
            shared,
            api,
            durations,
            stop: Some(stop),
            task: Some(task),
        },
    )
}

/// The state the handles, the elector and the watchdog share.
struct Shared {
    identity: String,
    always: bool,
    /// This process leads until this instant: when it sent its last successful acquire or renew request,
    /// plus the renew deadline.
    valid_until: Mutex<Option<Instant>>,
    /// Whether it leads, for `subscribe`.
    tx: watch::Sender<bool>,
    transitions: AtomicU64,
}

impl Shared {
    fn new(identity: String, always: bool) -> Shared {
        Shared {
            identity,
            always,
            valid_until: Mutex::new(None),
            tx: watch::Sender::new(always),
            transitions: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_leader(&self) -> bool {
        self.always || self.lock().is_some_and(|until| Instant::now() < until)
    }

    /// Sets until when this process leads, and publishes the change; returns whether it now leads when
    /// that changed.
    fn set_until(&self, until: Option<Instant>) -> Option<bool> {
        let mut guard = self.lock();
        *guard = until;
        self.publish(&guard)
    }

    /// Publishes whether this process leads now (the caller holds the lock, so publications follow the
    /// order of the changes); returns it when it changed.
    fn publish(&self, until: &Option<Instant>) -> Option<bool> {
        let leader = self.always || until.is_some_and(|t| Instant::now() < t);
        let changed = self.tx.send_if_modified(|v| {
            let changed = *v != leader;
            *v = leader;
            changed
        });
        changed.then(|| {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            leader
        })
    }
}

/// Publishes the lapse of leadership at the renew deadline for `subscribe`, even when the elector cannot
/// run. Ends once the handles and the elector are gone.
fn spawn_watchdog(shared: Weak<Shared>, retry: Duration) {
    tokio::spawn(async move {
        loop {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let next = {
                let guard = shared.lock();
                if shared.publish(&guard) == Some(false) {
                    tracing::warn!(
                        identity = %shared.identity,
                        "stopped leading: the Lease was not renewed within the renew deadline"
                    );
                }
                let now = Instant::now();
                match *guard {
                    Some(until) if until > now => until,
                    _ => now + retry,
                }
            };
            drop(shared);
            tokio::time::sleep_until(next).await;
        }
    });
}

/// What a candidate does with the Lease record it read.
#[derive(Debug, PartialEq)]
enum Decision {
    /// It is free, released, or expired: take it.
    Take,
    /// It names us: renew it.
    Renew,
    /// Another holds it until `expires` (on our clock): wait.
    Wait { holder: String, expires: Instant },
}

/// The holder a Lease record names, if any.
fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// Decides from a Lease record, first seen by this process at `observed_at`, what `identity` does at
/// `now`. The record's `leaseDurationSeconds` counts from `observed_at` (our clock, not the record's
/// `renewTime`); `default_lease` stands in when the record has none.
fn decide(
    spec: &LeaseSpec,
    identity: &str,
    observed_at: Instant,
    now: Instant,
    default_lease: Duration,
) -> Decision {
    match holder(spec) {
        None => Decision::Take,
        Some(h) if h == identity => Decision::Renew,
        Some(h) => {
            let duration = spec
                .lease_duration_seconds
                .filter(|s| *s > 0)
                .map_or(default_lease, |s| Duration::from_secs(s as u64));
            let expires = observed_at + duration;
            if now < expires {
                Decision::Wait {
                    holder: h.to_string(),
                    expires,
                }
            } else {
                Decision::Take
            }
        }
    }
}

/// The Lease record by which `identity` takes or renews the Lease at wall-clock `now`.
fn claimed_spec(
    old: &LeaseSpec,
    identity: &str,
    now: jiff::Timestamp,
    lease_seconds: i32,
) -> LeaseSpec {
    let renewing = holder(old) == Some(identity);
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(lease_seconds),
        acquire_time: if renewing {
            old.acquire_time.clone().or(Some(MicroTime(now)))
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if renewing {
            old.lease_transitions.unwrap_or(0)
        } else {
            old.lease_transitions.unwrap_or(0).saturating_add(1)
        }),
        ..old.clone()
    }
}

/// The record of a newly created Lease.
fn created_spec(identity: &str, now: jiff::Timestamp, lease_seconds: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(lease_seconds),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(0),
        ..LeaseSpec::default()
    }
}

/// The record by which a holder gives the Lease up (client-go's `ReleaseOnCancel`): no holder, a lease of
/// 1 s.
fn released_spec(old: &LeaseSpec, now: jiff::Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..old.clone()
    }
}

/// `leaseDurationSeconds` for a lease duration: whole seconds, rounded up, at least 1.
fn lease_seconds(lease: Duration) -> i32 {
    let secs = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// What one acquire-or-renew attempt found.
enum Outcome {
    /// We hold the Lease: the successful request was sent at this instant.
    Held {
        sent: Instant,
        took_from: Option<String>,
    },
    /// Another identity holds it (or won the race to create it).
    HeldBy(Option<String>),
    /// Our write lost a race (409): try again later.
    Conflict,
}

/// The background task of one candidate.
struct Candidate {
    api: Api<Lease>,
    namespace: String,
    identity: String,
    durations: Durations,
    shared: Arc<Shared>,
    /// The last Lease record seen and when this process first saw it.
    observed: Option<(LeaseSpec, Instant)>,
    /// The other holder last logged, so waiting is logged once per holder.
    last_holder: Option<String>,
}

impl Candidate {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        loop {
            let attempt = tokio::time::timeout(self.durations.renew_deadline, self.attempt());
            let result = tokio::select! {
                biased;
                _ = &mut stop => return,
                r = attempt => r,
            };
            let identity = &self.identity;
            match result {
                Ok(Ok(Outcome::Held { sent, took_from })) => {
                    if self
                        .shared
                        .set_until(Some(sent + self.durations.renew_deadline))
                        == Some(true)
                    {
                        tracing::info!(
                            %identity,
                            lease = LEASE_NAME,
                            namespace = %self.namespace,
                            previous_holder = took_from.as_deref().unwrap_or(""),
                            leadership_changes = self.shared.transitions.load(Ordering::Relaxed),
                            "became the leader"
                        );
                    }
                    self.last_holder = None;
                }
                Ok(Ok(Outcome::HeldBy(other))) => {
                    if self.shared.set_until(None) == Some(false) {
                        tracing::warn!(
                            %identity,
                            holder = other.as_deref().unwrap_or("unknown"),
                            "stopped leading: another replica holds the Lease"
                        );
                    } else if other.is_some() && other != self.last_holder {
                        tracing::info!(
                            %identity,
                            holder = other.as_deref().unwrap_or(""),
                            "another replica leads; waiting"
                        );
                    }
                    self.last_holder = other;
                }
                Ok(Ok(Outcome::Conflict)) => {
                    tracing::debug!(%identity, "the Lease changed while writing it; retrying");
                }
                Ok(Err(error)) => {
                    tracing::warn!(%identity, error = %Said(&error), "could not acquire or renew the Lease");
                }
                Err(_) => {
                    tracing::warn!(%identity, "acquiring or renewing the Lease timed out");
                }
            }
            tokio::select! {
                biased;
                _ = &mut stop => return,
                _ = tokio::time::sleep(self.durations.retry) => {}
            }
        }
    }

    /// One GET and, when due, one create or replace.
    async fn attempt(&mut self) -> Result<Outcome, kube::Error> {
        let lease_seconds = lease_seconds(self.durations.lease);
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.to_string()),
                    ..ObjectMeta::default()
                },
                spec: Some(created_spec(
                    &self.identity,
                    jiff::Timestamp::now(),
                    lease_seconds,
                )),
            };
            let sent = Instant::now();
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observed = created.spec.map(|s| (s, Instant::now()));
                    Ok(Outcome::Held {
                        sent,
                        took_from: None,
                    })
                }
                Err(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists() => {
                    Ok(Outcome::HeldBy(None))
                }
                Err(e) => Err(e),
            };
        };
        let now = Instant::now();
        let spec = lease.spec.clone().unwrap_or_default();
        let observed_at = match &self.observed {
            Some((seen, at)) if *seen == spec => *at,
            _ => {
                self.observed = Some((spec.clone(), now));
                now
            }
        };
        let decision = decide(
            &spec,
            &self.identity,
            observed_at,
            now,
            self.durations.lease,
        );
        if let Decision::Wait { holder, .. } = decision {
            return Ok(Outcome::HeldBy(Some(holder)));
        }
        let took_from = holder(&spec)
            .filter(|h| *h != self.identity)
            .map(String::from);
        lease.spec = Some(claimed_spec(
            &spec,
            &self.identity,
            jiff::Timestamp::now(),
            lease_seconds,
        ));
        let sent = Instant::now();
        match self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            Ok(replaced) => {
                self.observed = replaced.spec.map(|s| (s, Instant::now()));
                Ok(Outcome::Held { sent, took_from })
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Outcome::Conflict),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: Option<&str>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(String::from),
            lease_duration_seconds: seconds,
            lease_transitions: Some(4),
            acquire_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
            renew_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
            ..LeaseSpec::default()
        }
    }

    const DEFAULT: Duration = Duration::from_secs(15);

    #[test]
    fn defaults_are_client_gos() {
        let d = Durations::default();
        assert_eq!(d.lease, Duration::from_secs(15));
        assert_eq!(d.renew_deadline, Duration::from_secs(10));
        assert_eq!(d.retry, Duration::from_secs(2));
    }

    #[test]
    fn a_lease_without_holder_is_taken() {
        let t = Instant::now();
        assert_eq!(
            decide(&record(None, Some(15)), "me", t, t, DEFAULT),
            Decision::Take
        );
        // Released the way client-go does: empty holder, 1 s.
        assert_eq!(
            decide(&record(Some(""), Some(1)), "me", t, t, DEFAULT),
            Decision::Take
        );
    }

    #[test]
    fn our_own_lease_is_renewed() {
        let t = Instant::now();
        assert_eq!(
            decide(&record(Some("me"), Some(15)), "me", t, t, DEFAULT),
            Decision::Renew
        );
    }

    #[test]
    fn another_holder_is_waited_for_until_the_lease_runs_out_on_our_clock() {
        let seen = Instant::now();
        let spec = record(Some("other"), Some(15));
        // The record's renewTime (1970) is ignored: expiry counts from when we first saw the record.
        assert_eq!(
            decide(
                &spec,
                "me",
                seen,
                seen + Duration::from_millis(14_999),
                DEFAULT
            ),
            Decision::Wait {
                holder: "other".into(),
                expires: seen + Duration::from_secs(15)
            }
        );
        assert_eq!(
            decide(&spec, "me", seen, seen + Duration::from_secs(15), DEFAULT),
            Decision::Take
        );
    }

    #[test]
    fn the_records_lease_duration_counts_and_the_default_stands_in_for_none() {
        let seen = Instant::now();
        let three = record(Some("other"), Some(3));
        assert!(matches!(
            decide(&three, "me", seen, seen + Duration::from_secs(2), DEFAULT),
            Decision::Wait { .. }
        ));
        assert_eq!(
            decide(&three, "me", seen, seen + Duration::from_secs(3), DEFAULT),
            Decision::Take
        );
        let none = record(Some("other"), None);
        assert!(matches!(
            decide(&none, "me", seen, seen + Duration::from_secs(14), DEFAULT),
            Decision::Wait { .. }
        ));
        assert_eq!(
            decide(&none, "me", seen, seen + DEFAULT, DEFAULT),
            Decision::Take
        );
    }

    #[test]
    fn taking_from_another_holder_counts_a_transition_and_sets_the_acquire_time() {
        let now = jiff::Timestamp::from_second(1_000_000).unwrap();
        let spec = claimed_spec(&record(Some("other"), Some(15)), "me", now, 15);
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(5));
        assert_eq!(spec.acquire_time, Some(MicroTime(now)));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        // After a release (no holder), taking it is a transition too, as in client-go.
        let after_release = claimed_spec(&record(None, Some(1)), "me", now, 15);
        assert_eq!(after_release.lease_transitions, Some(5));
        assert_eq!(after_release.lease_duration_seconds, Some(15));
    }

    #[test]
    fn renewing_keeps_the_acquire_time_and_the_transitions() {
        let now = jiff::Timestamp::from_second(1_000_000).unwrap();
        let spec = claimed_spec(&record(Some("me"), Some(15)), "me", now, 15);
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(
            spec.acquire_time,
            Some(MicroTime(jiff::Timestamp::UNIX_EPOCH))
        );
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
    }

    #[test]
    fn a_created_lease_names_us_with_no_transitions() {
        let now = jiff::Timestamp::from_second(1_000_000).unwrap();
        let spec = created_spec("me", now, 15);
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(now)));
    }

    #[test]
    fn releasing_clears_the_holder_and_shortens_the_lease() {
        let now = jiff::Timestamp::from_second(1_000_000).unwrap();
        let spec = released_spec(&record(Some("me"), Some(15)), now);
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        // Anyone takes it at once.
        let t = Instant::now();
        assert_eq!(decide(&spec, "other", t, t, DEFAULT), Decision::Take);
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(lease_seconds(Duration::from_secs(15)), 15);
        assert_eq!(lease_seconds(Duration::from_millis(2_500)), 3);
        assert_eq!(lease_seconds(Duration::from_millis(10)), 1);
    }

    #[tokio::test]
    async fn leadership_lapses_by_itself_at_the_renew_deadline() {
        let shared = Arc::new(Shared::new("me".into(), false));
        spawn_watchdog(Arc::downgrade(&shared), Duration::from_millis(20));
        let leadership = Leadership {
            shared: shared.clone(),
        };
        let mut rx = leadership.subscribe();
        assert!(!leadership.is_leader());
        let until = Instant::now() + Duration::from_millis(200);
        assert_eq!(shared.set_until(Some(until)), Some(true));
        assert!(leadership.is_leader());
        assert!(*rx.borrow_and_update());
        assert_eq!(leadership.leader_until(), Some(until));
        // Nobody renews: it lapses at `until`, and subscribers hear of it.
        tokio::time::timeout(Duration::from_secs(2), rx.wait_for(|l| !*l))
            .await
            .expect("the watch turns false")
            .expect("the sender lives");
        let lapsed = Instant::now();
        assert!(lapsed >= until, "lapsed {:?} early", until - lapsed);
        assert!(!leadership.is_leader());
        assert_eq!(leadership.leader_until(), None);
        assert_eq!(leadership.transitions(), 2);
    }

    #[tokio::test]
    async fn always_leads() {
        let leadership = Leadership::always();
        assert!(leadership.is_leader());
        assert!(*leadership.subscribe().borrow());
        tokio::time::timeout(Duration::from_secs(1), leadership.acquired())
            .await
            .expect("acquired at once");
    }
}
