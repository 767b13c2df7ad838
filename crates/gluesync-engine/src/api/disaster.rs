//! A disaster-recovery pair: its spec and its status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// A host name or an IP address: what a peer address may be.
const HOST_PATTERN: &str = r"^[A-Za-z0-9]([A-Za-z0-9.:-]{0,251}[A-Za-z0-9])?$";

/// The Secret a disaster-recovery setup made from the Core Hub UI writes, by default: `<platform>-disaster-recovery`.
pub const DR_SECRET_SUFFIX: &str = "-disaster-recovery";

/// The key of the pair's shared secret in the disaster-recovery Secret.
pub const DR_SECRET_KEY: &str = "sharedSecret";
/// The label on what a platform's disaster-recovery setup made or wrote: the Service, and the pair's
/// Secret while it holds the setup's shared secret. Its value is the platform's name.
pub const PLATFORM_LABEL: &str = "gluesync.molo17.com/platform";

/// The pod-template annotation that says which disaster-recovery setup a workload carries.
pub const DR_ANNOTATION: &str = "gluesync.molo17.com/disaster-recovery";

/// This install's part in a disaster-recovery pair.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.replicationPort != self.controlPort")
        .message("replicationPort and controlPort must differ")
        .field_path(".controlPort")
)]
pub struct DisasterRecoverySpec {
    /// `primary` runs the pipelines; `secondary` follows it and takes over when it is lost.
    pub role: DisasterRecoveryRole,
    /// Host name or IP address at which this site reaches the other site's ports.
    #[schemars(length(min = 1, max = 253), regex(pattern = HOST_PATTERN))]
    pub peer_address: String,
    /// TCP port of the pair's replication traffic, on both sites.
    #[serde(default = "default_replication_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub replication_port: i32,
    /// TCP port of the pair's control traffic (health, takeover), on both sites.
    #[serde(default = "default_control_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub control_port: i32,
    /// Secret holding the pair's shared secret under `sharedSecret` (default
    /// `<platform>-disaster-recovery`, the one a setup from the Core Hub UI writes). Must be one of the
    /// Secrets GKO's installation allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
    /// A new value rolls the setup out again, for example after the Secret's material changed. The
    /// Core Hub UI sets a new one with each setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub revision: Option<String>,
    /// The Service that publishes the two ports to the other site.
    #[serde(default)]
    pub service: DisasterRecoveryService,
}

fn default_replication_port() -> i32 {
    1718
}
fn default_control_port() -> i32 {
    1719
}

/// A site's role in a disaster-recovery pair.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DisasterRecoveryRole {
    Primary,
    Secondary,
}

impl DisasterRecoveryRole {
    pub fn as_str(self) -> &'static str {
        match self {
            DisasterRecoveryRole::Primary => "primary",
            DisasterRecoveryRole::Secondary => "secondary",
        }
    }
}

/// How the disaster-recovery Service is published.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisasterRecoveryService {
    /// `LoadBalancer` (default: a cloud load balancer carries the ports between clusters), `NodePort`,
    /// or `ClusterIP` (when something else, a mesh or a VPN, connects the sites).
    #[serde(rename = "type", default)]
    pub type_: ServiceType,
    /// Annotations of the Service (a cloud's load-balancer settings, for example).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The load balancer's class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_class: Option<String>,
    /// Client ranges the load balancer lets in (CIDRs); empty: the cloud's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub load_balancer_source_ranges: Vec<String>,
    /// `Cluster` or `Local`, for a LoadBalancer or NodePort Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'Cluster' || self == 'Local'")
        .message("externalTrafficPolicy is Cluster or Local"))]
    pub external_traffic_policy: Option<String>,
    /// Node port of the replication port (NodePort and LoadBalancer; default: one the cluster picks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub replication_node_port: Option<i32>,
    /// Node port of the control port (NodePort and LoadBalancer; default: one the cluster picks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub control_node_port: Option<i32>,
}

impl Default for DisasterRecoveryService {
    fn default() -> Self {
        DisasterRecoveryService {
            type_: ServiceType::LoadBalancer,
            annotations: BTreeMap::new(),
            load_balancer_class: None,
            load_balancer_source_ranges: vec![],
            external_traffic_policy: None,
            replication_node_port: None,
            control_node_port: None,
        }
    }
}

/// The type of the disaster-recovery Service.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    #[default]
    LoadBalancer,
    NodePort,
    ClusterIP,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::LoadBalancer => "LoadBalancer",
            ServiceType::NodePort => "NodePort",
            ServiceType::ClusterIP => "ClusterIP",
        }
    }
}

/// What a disaster-recovery setup makes: the Service, and the shared secret in the pair's Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Made {
    Service,
    Secret,
}

/// The disaster-recovery setup as GKO has reached it.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisasterRecoveryStatus {
    pub phase: DisasterRecoveryPhase,
    /// The role being set up or reached.
    pub role: DisasterRecoveryRole,
    pub peer_address: String,
    /// Which setup the workloads carry or go to: the value of their pod templates'
    /// `gluesync.molo17.com/disaster-recovery` annotation (role, peer, ports, Secret and revision).
    pub setup: String,
    /// The Secret the workloads mount.
    pub secret_name: String,
    /// The Service that publishes the pair's ports, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// A digest of the Service settings last written to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_settings: Option<String>,
    /// The Service's selector: Core Hub's pods' (its workload's `spec.selector.matchLabels`), written before
    /// the Service. The chart's admission policy lets GKO's ServiceAccount give the Service no other.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_selector: BTreeMap<String, String>,
    /// What happens now, or why the setup failed.
    pub message: String,
    /// Why the setup failed, once it has (RollingBack, Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// When the phase began.
    pub since: Time,
    /// The workloads the setup changes, in order (Core Hub, then Chronos).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub components: Vec<DisasterRecoveryComponent>,
}

/// Where a disaster-recovery setup stands.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisasterRecoveryPhase {
    /// The workloads are being changed, one at a time, each through the stability check.
    SettingUp,
    /// Every workload carries the setup and passed its stability check; the Service publishes the ports.
    Active,
    /// A workload did not come up with the setup: every change is being put back.
    RollingBack,
    /// Everything put back after a failure; stays until the spec's setup changes.
    Failed,
    /// The pair is being taken down: the workloads go back to what they were, the Service goes and the shared secret GKO wrote is taken out of the pair's Secret.
    TearingDown,
}

impl DisasterRecoveryPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            DisasterRecoveryPhase::SettingUp => "SettingUp",
            DisasterRecoveryPhase::Active => "Active",
            DisasterRecoveryPhase::RollingBack => "RollingBack",
            DisasterRecoveryPhase::Failed => "Failed",
            DisasterRecoveryPhase::TearingDown => "TearingDown",
        }
    }
}

/// One workload a disaster-recovery setup changes.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisasterRecoveryComponent {
    pub name: String,
    pub kind: WorkloadKind,
    /// The container that gets the environment, the ports and the Secret.
    pub container: String,
    /// The pod-template fields the setup changes, as they were before it (JSON): what a teardown or a
    /// rollback puts back.
    pub original: String,
    pub state: DisasterRecoveryComponentState,
    /// When GKO last changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<Time>,
    /// Ready on the change since then (its stability window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<StableWindow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where one workload of a disaster-recovery setup stands.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisasterRecoveryComponentState {
    /// Not changed yet.
    Pending,
    /// Changed; waiting for the stability check.
    RollingOut,
    /// Carries the setup and passed the stability check.
    Ready,
    /// Being put back as it was.
    Restoring,
    /// Back as it was.
    Restored,
}
