//! The reason of every event GKO records, in one place: the engine names them as values, the event
//! carries the name, and a test holds each against the documentation.

/// The reason of an event GKO records on the GluesyncPlatform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
pub enum Reason {
    UpdateStarted,
    ImagesPrePulled,
    WaitingForApproval,
    UpdateApproved,
    UpdatePlanReplaced,
    WaitingForMaintenanceWindow,
    PipelinesPaused,
    DrainTimeout,
    CoreHubPatched,
    CoreHubUpdated,
    CoreHubFailed,
    PipelinesResumed,
    ModuleRolledBack,
    UpdateSucceeded,
    UpdateDegraded,
    UpdateFailed,
    UpdateRefused,
    UpdateCancelled,
    PipelinesNotResumed,
    CatalogCheckFailed,
    CleanupAbandoned,
    OperatorUpdateScheduled,
    OperatorRestarting,
    OperatorUpdated,
    OperatorRollingBack,
    OperatorRolledBack,
    OperatorUpdateFailed,
    OperatorUpdateCancelled,
    DisasterRecoveryStarted,
    DisasterRecoveryWorkloadReady,
    DisasterRecoveryActive,
    DisasterRecoveryDrift,
    DisasterRecoveryFailed,
    DisasterRecoveryRefused,
    DisasterRecoveryRolledBack,
    DisasterRecoveryRestoreNotStable,
    DisasterRecoveryTeardownStarted,
    DisasterRecoveryRemoved,
    InvalidResource,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator;

    use super::Reason;

    #[test]
    fn every_reason_is_documented() {
        let docs = [
            include_str!("../../../../docs/status-and-history.md"),
            include_str!("../../../../docs/disaster-recovery.md"),
            include_str!("../../../../docs/troubleshooting.md"),
        ]
        .concat();
        let missing: Vec<&str> = Reason::iter()
            .map(Reason::as_str)
            .filter(|r| !docs.contains(&format!("`{r}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "event reasons the docs do not name: {missing:?}"
        );
    }
}
