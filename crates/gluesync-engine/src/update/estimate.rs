//! Estimates of an update's time from the past ones: the median time of each step over the entries of
//! `status.history` that recorded their steps. The engine waits for a maintenance window that fits the
//! estimated paused time; `kubectl gluesync` says when an update will end.

use std::collections::BTreeMap;

use crate::api::{HistoryEntry, UpdateStep};

/// The median of `d` (the upper one of an even count); `None` for none.
pub fn median(mut d: Vec<i64>) -> Option<i64> {
    if d.is_empty() {
        return None;
    }
    d.sort_unstable();
    Some(d[d.len() / 2])
}

/// The median time of each step, over the past updates that recorded their steps, and how many did.
pub fn step_medians(history: &[HistoryEntry]) -> (BTreeMap<UpdateStep, i64>, usize) {
    let with_steps: Vec<&HistoryEntry> = history.iter().filter(|h| !h.steps.is_empty()).collect();
    let mut times: BTreeMap<UpdateStep, Vec<i64>> = BTreeMap::new();
    for h in &with_steps {
        for t in &h.steps {
            times.entry(t.step).or_default().push(t.seconds);
        }
    }
    let medians = times
        .into_iter()
        .filter_map(|(step, d)| Some((step, median(d)?)))
        .collect();
    (medians, with_steps.len())
}

/// The steps an update runs from `from` on (itself included), as an update that succeeds runs them:
/// Core Hub's steps only when it changes; after a rollback, Resume and Modules. `Waiting` is left out:
/// how long a person takes to approve is no step's time.
pub fn steps_from(from: UpdateStep, core_hub_changes: bool) -> Vec<UpdateStep> {
    use UpdateStep::*;
    let path: &[UpdateStep] = if from == CoreHubRollback {
        &[CoreHubRollback, Resume, Modules]
    } else if core_hub_changes {
        &[Preflight, Snapshot, Drain, CoreHub, Resume, Modules]
    } else {
        &[Preflight, Snapshot, Modules]
    };
    path.iter().copied().filter(|s| *s >= from).collect()
}

/// What an update would take, from the steps of past updates: (its whole time, the time its pipelines
/// stay paused: Drain, CoreHub and Resume, how many past updates it is made from). `None` when no past
/// update recorded its steps.
pub fn update_seconds(
    history: &[HistoryEntry],
    core_hub_changes: bool,
) -> Option<(i64, i64, usize)> {
    let (medians, n) = step_medians(history);
    if n == 0 {
        return None;
    }
    let time = |s: &UpdateStep| medians.get(s).copied().unwrap_or(0);
    let whole = steps_from(UpdateStep::Preflight, core_hub_changes)
        .iter()
        .map(time)
        .sum();
    let paused = if core_hub_changes {
        [UpdateStep::Drain, UpdateStep::CoreHub, UpdateStep::Resume]
            .iter()
            .map(time)
            .sum()
    } else {
        0
    };
    Some((whole, paused, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use UpdateStep::*;

    #[test]
    fn the_steps_left_are_those_of_the_update_path_from_the_step_on() {
        assert_eq!(
            steps_from(Preflight, true),
            [Preflight, Snapshot, Drain, CoreHub, Resume, Modules]
        );
        assert_eq!(steps_from(CoreHub, true), [CoreHub, Resume, Modules]);
        assert_eq!(steps_from(Preflight, false), [Preflight, Snapshot, Modules]);
        assert_eq!(steps_from(Modules, false), [Modules]);
        assert_eq!(
            steps_from(CoreHubRollback, true),
            [CoreHubRollback, Resume, Modules]
        );
    }
}
