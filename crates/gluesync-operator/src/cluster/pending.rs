//! Decisions not written yet. While an update runs, a decision that passes through
//! ([`update::Decision::passes_through`]: its actions need no status, it asks Core Hub to pause nothing)
//! need not be written at once, as a crash before its write loses nothing: one that moves the step on is
//! taken further in memory, and one that waits is held for up to [`UNWRITTEN`] in case what it waits for
//! comes at once. The first decision that needs its status, or a wait held that long, writes them all,
//! with their events.
//!
//! [`Pending::offer`] is the rule, pure: what to do with a decision given what is pending. [`Pending`]
//! keeps, within one reconcile, the status the API server holds while the platform in hand holds one not
//! written; [`Book`] keeps, between reconciles, the decision held and the version of each platform this
//! GKO last wrote or read, all forgotten when leadership changed hands (another GKO may have written).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use kube::ResourceExt;

use crate::{
    api::{GluesyncPlatform, GluesyncPlatformStatus},
    background::lock,
    cluster::observe::LastSeen,
    update::{self, Decision},
};

/// How long a waiting update's status that acts on nothing may stay unwritten.
pub const UNWRITTEN: Duration = Duration::from_millis(100);

/// What to do with a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Take it in unwritten and decide again at once: it moves the step on.
    MoveOn,
    /// Take it in unwritten, carry out its actions, and hold it for at most this long: it waits.
    Hold(Duration),
    /// Write it, with everything pending before it.
    Write,
}

/// What [`Pending::offer`] weighs of a decision.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    /// It may go unwritten ([`Decision::passes_through`]).
    pub passes_through: bool,
    /// It asks to be decided again at once.
    pub again: bool,
    /// Its status has an update: a disaster-recovery setup and the idle status are written at every
    /// step, as each of their steps is a point a restart starts again from.
    pub in_update: bool,
    /// Its status differs from the platform's in hand.
    pub changed: bool,
    /// The reconcile takes no step after this one.
    pub last: bool,
}

impl Facts {
    pub fn of(decision: &Decision, gsp: &GluesyncPlatform, last: bool) -> Facts {
        Facts {
            passes_through: decision.passes_through(),
            again: decision.again,
            in_update: decision.status.update.is_some(),
            changed: gsp.status.as_ref() != Some(&decision.status),
            last,
        }
    }
}

/// What one reconcile decided and has not written yet.
#[derive(Default)]
pub struct Pending {
    /// The status the API server holds, while the platform in hand holds one not written.
    written: Option<Option<GluesyncPlatformStatus>>,
    /// The events of the decisions not written: recorded with the write.
    events: Vec<update::Event>,
    /// When the oldest decision not written was made.
    since: Option<Instant>,
}

impl Pending {
    /// What to do with a decision made `now`: the rule, with no I/O.
    pub fn offer(&mut self, facts: Facts, now: Instant) -> Offer {
        if !facts.passes_through {
            return Offer::Write;
        }
        let since = *self.since.get_or_insert(now);
        if facts.again && facts.in_update && !facts.last {
            return Offer::MoveOn;
        }
        let left = UNWRITTEN.saturating_sub(now.saturating_duration_since(since));
        let changed = self.written.is_some() || facts.changed;
        if !facts.again && changed && facts.in_update && !left.is_zero() {
            Offer::Hold(left)
        } else {
            Offer::Write
        }
    }

    /// Takes a decision's status and events in, unwritten: `gsp` holds the status from now on.
    pub fn take(
        &mut self,
        gsp: &mut GluesyncPlatform,
        status: GluesyncPlatformStatus,
        events: &mut Vec<update::Event>,
    ) {
        self.events.append(events);
        let before = gsp.status.replace(status);
        self.written.get_or_insert(before);
    }

    /// Whether a status is pending.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.written.is_none()
    }

    /// Before a write: `gsp` holds the status the API server holds again (the write starts from it),
    /// and the status pending, if any, is answered with the events pending.
    pub fn unwind(
        &mut self,
        gsp: &mut GluesyncPlatform,
    ) -> (Option<GluesyncPlatformStatus>, Vec<update::Event>) {
        self.since = None;
        let pending = self
            .written
            .take()
            .map(|before| std::mem::replace(&mut gsp.status, before).unwrap_or_default());
        (pending, std::mem::take(&mut self.events))
    }
}

/// A waiting update's status held unwritten between reconciles: taken up again by the next one if the
/// platform is still at `base` (its resourceVersion), else dropped (it acted on nothing).
struct Held {
    base: String,
    status: GluesyncPlatformStatus,
    events: Vec<update::Event>,
    since: Instant,
}

#[derive(Default)]
struct Pages {
    /// The Lease's transitions when last looked at.
    term: u64,
    held: HashMap<String, Held>,
    seen: HashMap<String, LastSeen>,
}

/// What this GKO keeps of each platform between reconciles: the decision it holds unwritten, and the
/// version it last wrote or read.
#[derive(Default)]
pub struct Book(Mutex<Pages>);

impl Book {
    /// Forgets everything when the Lease changed hands since the last call (`term`: its transitions).
    pub fn turn(&self, term: u64) {
        let mut pages = lock(&self.0);
        if pages.term != term {
            pages.term = term;
            pages.held.clear();
            pages.seen.clear();
        }
    }

    /// The platform as this GKO last wrote or read it.
    pub fn last_seen(&self, uid: &str) -> Option<LastSeen> {
        lock(&self.0).seen.get(uid).cloned()
    }

    /// Whether a decision of the platform is held unwritten.
    pub fn holds(&self, uid: &str) -> bool {
        lock(&self.0).held.contains_key(uid)
    }

    /// Remembers the version of `gsp` this GKO wrote or read.
    pub fn saw(&self, gsp: &GluesyncPlatform) {
        if let (Some(uid), Some(version)) = (gsp.uid(), gsp.resource_version()) {
            let in_update = gsp.status.as_ref().is_some_and(|s| s.update.is_some());
            lock(&self.0)
                .seen
                .insert(uid, LastSeen { version, in_update });
        }
    }

    /// Takes up the decision held for `gsp` if the platform is still the one it was held on: `gsp`
    /// then holds its status, and the answer keeps the API server's. Dropped otherwise.
    pub fn resume(&self, gsp: &mut GluesyncPlatform) -> Pending {
        let uid = gsp.uid().unwrap_or_default();
        let Some(held) = lock(&self.0).held.remove(&uid) else {
            return Pending::default();
        };
        if gsp.resource_version().as_ref() != Some(&held.base) {
            return Pending::default();
        }
        Pending {
            written: Some(gsp.status.replace(held.status)),
            events: held.events,
            since: Some(held.since),
        }
    }

    /// Holds what is pending until the next reconcile; `gsp` holds the API server's status again.
    pub fn hold(&self, gsp: &mut GluesyncPlatform, pending: Pending) {
        let Pending {
            written,
            events,
            since,
        } = pending;
        let Some(before) = written else { return };
        let status = std::mem::replace(&mut gsp.status, before).unwrap_or_default();
        let held = Held {
            base: gsp.resource_version().unwrap_or_default(),
            status,
            events,
            since: since.unwrap_or_else(Instant::now),
        };
        lock(&self.0)
            .held
            .insert(gsp.uid().unwrap_or_default(), held);
    }

    /// Forgets every platform but those `keep` names (deleted platforms).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut pages = lock(&self.0);
        pages.held.retain(|uid, _| keep(uid));
        pages.seen.retain(|uid, _| keep(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform() -> GluesyncPlatform {
        let mut gsp = crate::update::fixtures::platform(serde_json::json!({"version": "2.3.2.1"}));
        gsp.status = None;
        gsp
    }

    fn facts() -> Facts {
        Facts {
            passes_through: true,
            again: false,
            in_update: true,
            changed: true,
            last: false,
        }
    }

    #[test]
    fn a_decision_that_needs_its_status_or_leaves_the_update_is_written() {
        let now = Instant::now();
        let offer = |f: Facts| Pending::default().offer(f, now);
        assert_eq!(
            offer(Facts {
                passes_through: false,
                ..facts()
            }),
            Offer::Write
        );
        // Outside an update every step is written, moving on or not.
        for again in [false, true] {
            assert_eq!(
                offer(Facts {
                    in_update: false,
                    again,
                    ..facts()
                }),
                Offer::Write
            );
        }
        // A wait that changes nothing has nothing to hold.
        assert_eq!(
            offer(Facts {
                changed: false,
                ..facts()
            }),
            Offer::Write
        );
    }

    #[test]
    fn an_update_moves_on_in_memory_until_its_last_step_of_the_reconcile() {
        let now = Instant::now();
        let moving = Facts {
            again: true,
            ..facts()
        };
        let mut pending = Pending::default();
        assert_eq!(pending.offer(moving, now), Offer::MoveOn);
        // However long it has been: a decision that moves on waits on nothing.
        assert_eq!(
            pending.offer(moving, now + Duration::from_secs(1)),
            Offer::MoveOn
        );
        assert_eq!(
            pending.offer(
                Facts {
                    last: true,
                    ..moving
                },
                now
            ),
            Offer::Write,
            "the last step of a reconcile is written"
        );
    }

    #[test]
    fn a_wait_is_held_for_what_is_left_of_the_oldest_decisions_time() {
        let start = Instant::now();
        let mut pending = Pending::default();
        assert_eq!(pending.offer(facts(), start), Offer::Hold(UNWRITTEN));
        let later = start + Duration::from_millis(30);
        assert_eq!(
            pending.offer(facts(), later),
            Offer::Hold(Duration::from_millis(70))
        );
        assert_eq!(pending.offer(facts(), start + UNWRITTEN), Offer::Write);
        // Unchanged from the platform in hand, but a status is pending: still held.
        let mut gsp = platform();
        pending.take(&mut gsp, Default::default(), &mut vec![]);
        let unchanged = Facts {
            changed: false,
            ..facts()
        };
        assert_eq!(
            pending.offer(unchanged, later),
            Offer::Hold(Duration::from_millis(70))
        );
    }

    #[test]
    fn what_is_pending_is_written_from_the_api_servers_status_with_every_event() {
        let mut gsp = platform();
        let on_server = GluesyncPlatformStatus {
            message: Some("on the server".into()),
            ..Default::default()
        };
        gsp.status = Some(on_server.clone());
        let decided = |m: &str| GluesyncPlatformStatus {
            message: Some(m.into()),
            ..Default::default()
        };
        let event = |m: &str| update::Event {
            warning: false,
            reason: crate::api::Reason::UpdateStarted,
            message: m.into(),
        };
        let mut pending = Pending::default();
        assert!(pending.is_empty());
        pending.take(&mut gsp, decided("first"), &mut vec![event("1")]);
        pending.take(&mut gsp, decided("second"), &mut vec![event("2")]);
        assert!(!pending.is_empty());
        assert_eq!(gsp.status, Some(decided("second")));
        let (status, events) = pending.unwind(&mut gsp);
        assert_eq!(status, Some(decided("second")));
        assert_eq!(gsp.status, Some(on_server), "the write starts from it");
        assert_eq!(events, [event("1"), event("2")]);
        assert!(pending.is_empty());
        assert_eq!(pending.unwind(&mut gsp), (None, vec![]));
    }

    #[test]
    fn a_held_decision_is_taken_up_on_the_same_version_only_and_forgotten_with_the_lease() {
        let mut gsp = platform();
        gsp.metadata.uid = Some("uid".into());
        gsp.metadata.resource_version = Some("7".into());
        let held = GluesyncPlatformStatus {
            message: Some("held".into()),
            ..Default::default()
        };
        let book = Book::default();
        book.turn(1);
        let hold = |gsp: &mut GluesyncPlatform| {
            let mut pending = Pending::default();
            pending.offer(facts(), Instant::now());
            pending.take(gsp, held.clone(), &mut vec![]);
            book.hold(gsp, pending);
        };
        hold(&mut gsp);
        assert_eq!(
            gsp.status, None,
            "the platform in hand is the server's again"
        );
        assert!(book.holds("uid"));
        let mut pending = book.resume(&mut gsp);
        assert_eq!(gsp.status, Some(held.clone()));
        assert!(!book.holds("uid"), "taken up once");
        assert_eq!(pending.unwind(&mut gsp).0, Some(held.clone()));
        // Held on version 7, the platform now at 8: dropped.
        hold(&mut gsp);
        gsp.metadata.resource_version = Some("8".into());
        assert!(book.resume(&mut gsp).is_empty());
        assert_eq!(gsp.status, None);
        // What it saw and holds is forgotten when the Lease changed hands, and only then.
        hold(&mut gsp);
        book.saw(&gsp);
        book.turn(1);
        assert!(book.holds("uid") && book.last_seen("uid").is_some());
        book.turn(2);
        assert!(!book.holds("uid") && book.last_seen("uid").is_none());
        // And of deleted platforms.
        book.saw(&gsp);
        book.retain(|uid| uid != "uid");
        assert!(book.last_seen("uid").is_none());
    }
}
