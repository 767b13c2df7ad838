//! What the update wants of Core Hub and what it hears back: the [`Work`] handed to the background
//! worker (`corehub::worker`) and the worker's [`Report`], which the next decision reads.

use std::{sync::Arc, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::ids::{IdSet, PipelineId, PipelineList};

/// Where and how to reach Core Hub, as the spec and the namespace say; the worker reads the Secrets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub url: String,
    pub credentials_secret: Option<String>,
    pub ca_secret: Option<String>,
    pub insecure_skip_verify: bool,
}

impl Target {
    /// Core Hub of this platform: the spec's URL, else the Core Hub workload's Service on port 1717 over
    /// HTTPS. `None` when there is no Core Hub workload to name.
    pub fn of(
        gsp: &crate::api::GluesyncPlatform,
        workloads: &[crate::update::observed::Workload],
        namespace: &str,
    ) -> Option<Target> {
        let spec = &gsp.spec.core_hub;
        let url = match &spec.url {
            Some(u) => u.clone(),
            None => {
                let w = workloads
                    .iter()
                    .find(|w| w.component_type == Some(crate::api::ComponentType::CoreHub))?;
                format!("https://{}.{namespace}.svc:1717", w.name)
            }
        };
        Some(Target {
            url,
            credentials_secret: spec.credentials_secret.clone(),
            ca_secret: spec.ca_secret.clone(),
            insecure_skip_verify: spec.insecure_skip_verify,
        })
    }
}

/// What the update engine wants of Core Hub right now, handed to the background worker. Declarative:
/// the same work given twice is done once.
#[derive(Clone, Debug, PartialEq)]
pub struct Work {
    pub target: Target,
    /// Requests are sent once per epoch (an update, or the resumption of leftovers between updates).
    pub epoch: String,
    /// Pipelines to be asked, once this epoch, to enter maintenance mode. Each was recorded in
    /// `status.pausedPipelines` before it appears here.
    pub enter: PipelineList,
    /// Pipelines the update has asked in so far (`status.update.askedPipelines`). A worker that begins an
    /// epoch counts them as asked: a GKO that took over from one that stopped never asks a pipeline
    /// twice in one update, even when it cannot tell whether the request went out.
    pub asked: PipelineList,
    /// Pipelines to be asked to leave maintenance mode: once this epoch, and again while Core Hub still
    /// lists them in maintenance mode.
    pub exit: PipelineList,
    /// How often to list the pipelines.
    pub poll: Duration,
}

/// One `GET /pipelines`.
#[derive(Clone, Debug, PartialEq)]
pub struct Listing {
    /// When the request was sent: the list says nothing of what happened after.
    pub at: Time,
    pub result: Result<Arc<Vec<Pipeline>>, String>,
}

/// What the worker has seen and done for the current epoch: the engine reads it back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub epoch: String,
    /// The latest list of pipelines.
    pub listing: Option<Listing>,
    /// Exit requests Core Hub accepted this epoch, with when (shared: a report handed to the engine does
    /// not copy them).
    pub exits: Exits,
    /// Enter requests Core Hub accepted this epoch.
    pub entered: usize,
    /// The latest failed maintenance request, if the latest round had one.
    pub error: Option<String>,
}

/// A pipeline, with the fields GKO reads. `isInMaintenanceMode` is required: an answer without it (a
/// renamed field in a new Core Hub) is an error, never "running".
#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    pub id: PipelineId,
    pub is_in_maintenance_mode: bool,
}

/// The ids a listing shows in maintenance mode.
pub fn in_maintenance(list: &[Pipeline]) -> IdSet<'_> {
    IdSet::new(
        list.iter()
            .filter(|p| p.is_in_maintenance_mode)
            .map(|p| &p.id),
    )
}

/// Exit requests Core Hub accepted, each with when it answered (to the nanosecond, as the listing's time is
/// kept: a list counts as fetched after a request exactly when it was): one entry an id, sorted by id, 16
/// bytes each, shared until changed. At 100,000 pipelines a third of a `BTreeMap` of ids and times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exits(Arc<Vec<(PipelineId, i64)>>);

/// Nanoseconds since the epoch: an i64 holds the years 1678 to 2262.
fn nanos(t: &Time) -> i64 {
    i64::try_from(t.0.as_nanosecond()).unwrap_or(if t.0.as_second() < 0 {
        i64::MIN
    } else {
        i64::MAX
    })
}

fn time(ns: i64) -> Time {
    Time(jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(jiff::Timestamp::MAX))
}

impl Exits {
    /// When Core Hub accepted the latest exit request of `id`.
    pub fn get(&self, id: &str) -> Option<Time> {
        self.0
            .binary_search_by(|(p, _)| p.as_str().cmp(id))
            .ok()
            .map(|i| time(self.0[i].1))
    }

    pub fn contains_key(&self, id: &str) -> bool {
        self.0.binary_search_by(|(p, _)| p.as_str().cmp(id)).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn keys(&self) -> impl Iterator<Item = &PipelineId> {
        self.0.iter().map(|(id, _)| id)
    }

    pub fn values(&self) -> impl Iterator<Item = Time> + '_ {
        self.0.iter().map(|(_, ms)| time(*ms))
    }

    pub fn insert(&mut self, id: PipelineId, at: Time) {
        self.extend(vec![(id, nanos(&at))]);
    }

    /// Adds accepted requests (`(id, Exits::stamp(when))`, in any order): an id already here keeps the later
    /// time. The list is copied only when the engine shares it.
    pub fn extend(&mut self, mut batch: Vec<(PipelineId, i64)>) {
        if batch.is_empty() {
            return;
        }
        let all = Arc::make_mut(&mut self.0);
        if all.is_empty() {
            *all = std::mem::take(&mut batch);
        } else {
            all.append(&mut batch);
        }
        // By id, the latest first; the first of each id is kept.
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        all.dedup_by(|later, kept| later.0 == kept.0);
        all.shrink_to_fit();
    }

    /// The form [`Exits::extend`] takes a time in.
    pub fn stamp(at: &Time) -> i64 {
        nanos(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Core Hub is reached at the spec's URL, else at its own workload's Service (whatever workload comes
    /// first); with neither, there is none to reach.
    #[test]
    fn core_hub_is_reached_at_the_spec_url_or_its_workloads_service() {
        use crate::update::fixtures::{install, platform};
        let mut workloads = install();
        workloads.rotate_left(1);
        let g = platform(serde_json::json!({"version": "2.3.2.1"}));
        let t = Target::of(&g, &workloads, "ns").expect("a target");
        assert_eq!(t.url, "https://core-hub.ns.svc:1717");
        let g = platform(serde_json::json!({
            "version": "2.3.2.1",
            "coreHub": {"url": "https://hub.example:8443", "insecureSkipVerify": true},
        }));
        let t = Target::of(&g, &[], "ns").expect("the spec's target");
        assert_eq!(
            (t.url.as_str(), t.insecure_skip_verify),
            ("https://hub.example:8443", true)
        );
        workloads.retain(|w| w.name != "core-hub");
        let g = platform(serde_json::json!({"version": "2.3.2.1"}));
        assert_eq!(Target::of(&g, &workloads, "ns"), None);
    }

    /// Times beyond what nanoseconds in an i64 hold (1678 to 2262) are kept as its bounds, in order.
    #[test]
    fn times_beyond_the_nanosecond_range_keep_their_order() {
        let year = |y: i16| {
            Time(
                jiff::civil::date(y, 1, 1)
                    .to_zoned(jiff::tz::TimeZone::UTC)
                    .unwrap()
                    .timestamp(),
            )
        };
        assert_eq!(nanos(&year(1600)), i64::MIN);
        assert_eq!(nanos(&year(2300)), i64::MAX);
        assert_eq!(nanos(&Time(jiff::Timestamp::UNIX_EPOCH)), 0);
    }

    fn t(ns: i128) -> Time {
        Time(jiff::Timestamp::from_nanosecond(ns).unwrap())
    }

    #[test]
    fn exits_keep_the_latest_time_of_each_id_exactly() {
        let mut e = Exits::default();
        assert!(e.get("a").is_none() && e.is_empty());
        e.extend(vec![
            (PipelineId::from("b"), Exits::stamp(&t(2_000_000))),
            (PipelineId::from("a"), Exits::stamp(&t(1_000_001))),
        ]);
        // To the nanosecond: a listing sent 1 ns after an answer counts as after it.
        assert_eq!(e.get("a"), Some(t(1_000_001)));
        assert!(e.get("a").unwrap().0 < t(1_000_002).0);
        assert_eq!(e.get("b"), Some(t(2_000_000)));
        let shared = e.clone();
        e.insert("a".into(), t(5_000_000));
        e.insert("a".into(), t(3_000_000));
        assert_eq!(e.get("a"), Some(t(5_000_000)), "the later time stays");
        assert_eq!(e.len(), 2);
        assert_eq!(e.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            shared.get("a"),
            Some(t(1_000_001)),
            "a shared list is copied, not changed"
        );
        assert!(e.contains_key("b") && !e.contains_key("c"));
        assert!(!e.is_empty());
        // The times, in the order of the ids.
        assert_eq!(e.values().collect::<Vec<_>>(), [t(5_000_000), t(2_000_000)]);
    }
}
