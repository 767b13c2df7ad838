//! Deliberate bugs, each breaking one promise GKO keeps, to show that the checks of those promises bite:
//! the model checker's tests switch one on per thread; a GKO built with the Cargo feature `test-hooks`
//! (the test suite's build) takes one from the environment variable `GKO_TEST_MUTANT` (its name, as
//! below), for the random fault schedules (`tests/cluster/chaos.rs`). A build without the feature (`make release`,
//! the image) has none: [`mutated`] is `false` there, and the name of the variable is not in the binary.
//! The same feature holds the fault point `GKO_PAUSE_AFTER_STATUS_WRITE` (see `fault_point`).

#[cfg(feature = "test-hooks")]
use crate::api::{DisasterRecoveryComponentState, DisasterRecoveryPhase, GluesyncPlatformStatus};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(any(test, feature = "test-hooks")), allow(dead_code))]
pub enum Mutant {
    /// The engine before the ledger: Resume exits only the pipelines it sees in maintenance mode, and
    /// late maintenance requests are not watched for.
    OldResume,
    /// Drain asks Core Hub to pause pipelines before it records them in the status.
    PauseBeforeRecord,
    /// Drain moves on to CoreHub as soon as one pipeline is in maintenance mode.
    PatchBeforeDrained,
    /// A drain timeout still patches Core Hub.
    RefusedPatches,
    /// A Refused update sets the phase to Current.
    RefusedPhaseCurrent,
    /// Drain, done, drops the first pipeline of the ledger: nothing asks Core Hub to take it out.
    DropFromLedger,
    /// A Core Hub that does not come up is not put back on the image it ran before.
    NoRollback,
    /// A finished update is recorded twice in `status.history`.
    HistoryTwice,
    /// The Core Hub worker forgets which pipelines it asked into maintenance mode.
    ForgetAsked,
    /// Between updates, `Ready` is False with neither `Reconciling` nor `Stalled` True.
    ReadyAlone,
    /// An image change also sets the container's `imagePullPolicy`.
    PullPolicy,
    /// The step Waiting goes on at once: no approval, no window is waited for.
    IgnoreGate,
    /// PrePull goes on to the drain while a pull is still under way.
    DrainBeforePulled,
    /// Drain asks pipelines into maintenance mode before GKO's finalizer is on.
    PauseBeforeFinalizer,
    /// A deleted GluesyncPlatform is let go without waiting for its paused pipelines to run again.
    LetGoWithPaused,
    /// The step Modules patches every module at once instead of one by one.
    ModulesAtOnce,
    /// An update that will update GKO changes GKO's image as it starts, not once it has ended.
    SelfUpdateFirst,
    /// A new GKO that does not come up is left on its image: GKO's own update waits for it forever.
    NoSelfRollback,
    /// Snapshot changes the agents' images, before the drain has put the pipelines into maintenance mode.
    AgentBeforeDrain,
    /// A GKO that lost the Lease goes on: its Core Hub worker keeps calling and its writes keep going.
    IgnoreLease,
    /// An update starts while a disaster-recovery setup is changing Core Hub's pod template.
    DrBesideUpdate,
    /// A disaster-recovery setup goes on changing workloads while an update runs.
    DrDuringUpdate,
    /// A teardown removes a variable the setup overrode instead of giving it its own value back.
    RestoreForgets,
    /// The Conductor API takes an update from the Core Hub UI under the gitops policy.
    UiUnderGitops,
}

impl Mutant {
    #[cfg(all(not(test), feature = "test-hooks"))]
    const ALL: [Mutant; 24] = [
        Mutant::OldResume,
        Mutant::PauseBeforeRecord,
        Mutant::PatchBeforeDrained,
        Mutant::RefusedPatches,
        Mutant::RefusedPhaseCurrent,
        Mutant::DropFromLedger,
        Mutant::NoRollback,
        Mutant::HistoryTwice,
        Mutant::ForgetAsked,
        Mutant::ReadyAlone,
        Mutant::PullPolicy,
        Mutant::IgnoreGate,
        Mutant::DrainBeforePulled,
        Mutant::PauseBeforeFinalizer,
        Mutant::LetGoWithPaused,
        Mutant::ModulesAtOnce,
        Mutant::SelfUpdateFirst,
        Mutant::NoSelfRollback,
        Mutant::IgnoreLease,
        Mutant::AgentBeforeDrain,
        Mutant::DrBesideUpdate,
        Mutant::DrDuringUpdate,
        Mutant::RestoreForgets,
        Mutant::UiUnderGitops,
    ];
}

#[cfg(test)]
thread_local! {
    static MUTANT: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
}

/// Switches a deliberate bug on (or off) for this thread.
#[cfg(test)]
pub(crate) fn set_mutant(m: Option<Mutant>) {
    MUTANT.with(|c| c.set(m));
}

/// The deliberate bug `GKO_TEST_MUTANT` names (read once). An unknown name stops the process: a test
/// that asks for a bug must get it.
#[cfg(all(not(test), feature = "test-hooks"))]
pub fn process_mutant() -> Option<Mutant> {
    static MUTANT: std::sync::OnceLock<Option<Mutant>> = std::sync::OnceLock::new();
    *MUTANT.get_or_init(|| {
        let name = std::env::var("GKO_TEST_MUTANT").ok()?;
        let found = Mutant::ALL.into_iter().find(|m| format!("{m:?}") == name);
        match found {
            Some(m) => {
                tracing::warn!(mutant = ?m, "a deliberate bug is switched on (GKO_TEST_MUTANT)")
            }
            None => panic!("GKO_TEST_MUTANT={name} names no deliberate bug"),
        }
        found
    })
}

/// [`Mutant::ReadyAlone`]'s own condition, kept here with the deliberate bugs (not mutated: they are the
/// tests): once an update has ended (the status has history), every condition of the idle status is False.
pub(crate) fn ready_alone(status: &crate::api::GluesyncPlatformStatus) -> bool {
    mutated(Mutant::ReadyAlone) && !status.history.is_empty()
}

/// [`Mutant::DropFromLedger`]'s own change, kept here with the deliberate bugs (not mutated: they are the
/// tests): the ledger forgets its first pipeline.
pub(crate) fn drop_from_ledger(ledger: &mut crate::api::PipelineList) {
    if mutated(Mutant::DropFromLedger) && !ledger.is_empty() {
        ledger.make_mut().remove(0);
    }
}

/// Is this deliberate bug on? Never without the feature `test-hooks`.
#[allow(unused_variables)]
#[inline]
pub fn mutated(m: Mutant) -> bool {
    #[cfg(test)]
    {
        MUTANT.with(|c| c.get() == Some(m))
    }
    #[cfg(all(not(test), feature = "test-hooks"))]
    {
        process_mutant() == Some(m)
    }
    #[cfg(all(not(test), not(feature = "test-hooks")))]
    {
        false
    }
}

/// A fault point (feature `test-hooks`): with `GKO_PAUSE_AFTER_STATUS_WRITE=<position>`, the process writes `fault point hit` to
/// standard error and stops acting right after the status write that enters that position, before the
/// actions and the background work that follow it, so a test can kill it exactly there. A position is
/// an update's step (`Drain`, or `Drain:Asked`: the write that records the first pipelines asked to
/// enter maintenance mode), or a disaster-recovery phase with the workload being changed
/// (`DR:SettingUp:0:RollingOut`, `DR:Active`). A step the controller passed through in memory has no
/// write of its own: for it, the first write past it (in the order of the steps; the end of the update
/// after Finish) is the fault point.
#[cfg(feature = "test-hooks")]
pub fn fault_point(
    before: Option<&GluesyncPlatformStatus>,
    after: &GluesyncPlatformStatus,
) -> bool {
    let Ok(wanted) = std::env::var("GKO_PAUSE_AFTER_STATUS_WRITE") else {
        return false;
    };
    let entered = position(Some(after));
    if entered.as_deref() == Some(wanted.as_str()) && position(before) != entered {
        return true;
    }
    let Some(wanted) = step_rank(&wanted) else {
        return false;
    };
    let was = before.and_then(|s| s.update.as_ref()).map(update_rank);
    let is = match &after.update {
        Some(u) => update_rank(u),
        None if was.is_some() => usize::MAX,
        None => return false,
    };
    was.is_none_or(|w| w < wanted) && is > wanted
}

/// The order of an update's positions: each step, then the same step once it asked pipelines.
#[cfg(feature = "test-hooks")]
fn update_rank(u: &crate::api::UpdateStatus) -> usize {
    let asked = u.step.asked_pipelines().is_some_and(|l| !l.is_empty());
    u.step.name() as usize * 2 + usize::from(asked)
}

#[cfg(feature = "test-hooks")]
fn step_rank(position: &str) -> Option<usize> {
    use strum::VariantNames as _;
    let (name, asked) = match position.strip_suffix(":Asked") {
        Some(name) => (name, 1),
        None => (position, 0),
    };
    let index = crate::api::UpdateStep::VARIANTS
        .iter()
        .position(|v| *v == name)?;
    Some(index * 2 + asked)
}

/// Where a status stands, for [`fault_point`].
#[cfg(feature = "test-hooks")]
fn position(s: Option<&GluesyncPlatformStatus>) -> Option<String> {
    let s = s?;
    if let Some(u) = &s.update {
        // Drain records the pipelines it asks before asking them: `Drain:Asked` is right after that write.
        let asked = if u.step.asked_pipelines().is_none_or(|l| l.is_empty()) {
            ""
        } else {
            ":Asked"
        };
        return Some(format!("{:?}{asked}", u.step.name()));
    }
    let dr = s.disaster_recovery.as_ref()?;
    let moving = dr
        .components
        .iter()
        .enumerate()
        .find(|(_, c)| {
            matches!(
                c.state,
                DisasterRecoveryComponentState::RollingOut
                    | DisasterRecoveryComponentState::Restoring
            )
        })
        .map(|(i, c)| format!(":{i}:{:?}", c.state))
        .unwrap_or_else(|| {
            // Every workload changed (or put back): the Service (or the clean-up) is next.
            let all =
                |state| !dr.components.is_empty() && dr.components.iter().all(|c| c.state == state);
            match dr.phase {
                DisasterRecoveryPhase::SettingUp if all(DisasterRecoveryComponentState::Ready) => {
                    ":Service".into()
                }
                DisasterRecoveryPhase::TearingDown | DisasterRecoveryPhase::RollingBack
                    if all(DisasterRecoveryComponentState::Restored) =>
                {
                    ":Cleanup".into()
                }
                _ => String::new(),
            }
        });
    Some(format!("DR:{}{moving}", dr.phase.as_str()))
}
