//! Memory for very large installs. The status is GKO's memory, and an object must stay well under the
//! API server's size limit (1.5 MiB in etcd). A pipeline list of the status holds every id while it fits
//! comfortably (up to [`INLINE_MAX`] ids); beyond that, the complete list goes to ConfigMaps owned by the
//! GluesyncPlatform (shards of [`SHARD`] ids), written before the status that names them, and the status
//! keeps the first [`SHOWN`] ids with the count and a digest in `status.spilledLists`. The engine never
//! sees the difference: [`join`] puts the complete lists back when the status is read, [`split`] takes
//! them out again before it is written.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Resource, ResourceExt, api::ObjectMeta};

use crate::api::{GluesyncPlatform, GluesyncPlatformStatus, SpilledList};

/// Longest list kept whole in the status.
pub const INLINE_MAX: usize = 10_000;
/// Ids a spilled list still shows in the status.
pub const SHOWN: usize = 1_000;
/// Ids per ConfigMap (each well under the 1 MiB ConfigMap limit).
pub const SHARD: usize = 20_000;
/// Label on the ConfigMaps that hold spilled lists; its value is the GluesyncPlatform's name.
pub const LABEL: &str = "gluesync.molo17.com/spilled-list";
/// Annotation on each ConfigMap: the list it is part of and the digest of the whole list.
const LIST_ANNOTATION: &str = "gluesync.molo17.com/list";
const DIGEST_ANNOTATION: &str = "gluesync.molo17.com/digest";

/// The pipeline lists of a status, each with its name in `status.spilledLists`.
fn lists(status: &mut GluesyncPlatformStatus) -> Vec<(&'static str, &mut Vec<String>)> {
    let mut out: Vec<(&'static str, &mut Vec<String>)> =
        vec![("pausedPipelines", &mut status.paused_pipelines)];
    if let Some(late) = &mut status.late_maintenance {
        out.push(("lateMaintenance.pipelines", &mut late.pipelines));
    }
    if let Some(u) = &mut status.update {
        out.push(("update.resumedPipelines", &mut u.resumed_pipelines));
        out.push(("update.askedPipelines", &mut u.asked_pipelines));
    }
    if let Some(a) = &mut status.last_attempt {
        out.push(("lastAttempt.pausedPipelines", &mut a.paused_pipelines));
        out.push(("lastAttempt.resumedPipelines", &mut a.resumed_pipelines));
    }
    out
}

/// FNV-1a over the ids: tells a ConfigMap that matches the status from one left by a failed write.
pub fn digest(ids: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in ids {
        for b in id.bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn configmap_name(gsp: &str, list: &str, shard: usize) -> String {
    let slug: String = list
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    format!("{gsp}-{slug}-{shard}")
}

/// What to write for a status: the status as stored (long lists cut, `spilledLists` set) and the
/// ConfigMaps that must hold the complete lists before it is written.
pub struct Split {
    pub status: GluesyncPlatformStatus,
    pub configmaps: Vec<ConfigMap>,
}

/// Takes the long lists out of a complete status. (`full` is only borrowed mutably so that its long lists
/// are not copied whole: they are set aside while the rest is cloned, and put back.)
pub fn split(gsp: &GluesyncPlatform, full: &mut GluesyncPlatformStatus) -> Split {
    let name = gsp.name_any();
    let owner = gsp.controller_owner_ref(&());
    let long: Vec<(usize, Vec<String>)> = lists(full)
        .into_iter()
        .enumerate()
        .filter(|(_, (_, ids))| ids.len() > INLINE_MAX)
        .map(|(i, (_, ids))| (i, std::mem::take(ids)))
        .collect();
    let mut status = full.clone();
    let mut spilled = BTreeMap::new();
    let mut configmaps = vec![];
    for (i, ids) in long {
        let (list, shown) = lists(&mut status).swap_remove(i);
        let digest = digest(&ids);
        for (shard, chunk) in ids.chunks(SHARD).enumerate() {
            configmaps.push(ConfigMap {
                metadata: ObjectMeta {
                    name: Some(configmap_name(&name, list, shard)),
                    namespace: gsp.namespace(),
                    labels: Some([(LABEL.to_string(), name.clone())].into()),
                    annotations: Some(
                        [
                            (LIST_ANNOTATION.to_string(), list.to_string()),
                            (DIGEST_ANNOTATION.to_string(), digest.clone()),
                        ]
                        .into(),
                    ),
                    owner_references: owner.clone().map(|o| vec![o]),
                    ..Default::default()
                },
                data: Some([("ids".to_string(), chunk.join("\n"))].into()),
                ..Default::default()
            });
        }
        spilled.insert(
            list.to_string(),
            SpilledList {
                count: ids.len() as i64,
                digest,
                config_maps: ids.len().div_ceil(SHARD) as i64,
            },
        );
        *shown = ids[..SHOWN].to_vec();
        *lists(full).swap_remove(i).1 = ids;
    }
    status.spilled_lists = spilled;
    Split { status, configmaps }
}

/// A spilled list whose ConfigMaps are not (yet) in the cache as the status names them.
#[derive(Debug, PartialEq, Eq)]
pub struct NotYet(pub String);

/// Puts the complete lists back into a status read from the API server, from the ConfigMaps of this
/// platform. `NotYet` when the cache has not seen the ConfigMaps the status names.
pub fn join(
    gsp: &GluesyncPlatform,
    status: &mut GluesyncPlatformStatus,
    configmaps: &[&ConfigMap],
) -> Result<(), NotYet> {
    let spilled = std::mem::take(&mut status.spilled_lists);
    let name = gsp.name_any();
    for (list, ids) in lists(status) {
        let Some(s) = spilled.get(list) else {
            continue;
        };
        let mut all = Vec::with_capacity(s.count as usize);
        for shard in 0..s.config_maps as usize {
            let wanted = configmap_name(&name, list, shard);
            let cm = configmaps
                .iter()
                .find(|c| c.name_any() == wanted)
                .filter(|c| c.annotations().get(DIGEST_ANNOTATION) == Some(&s.digest))
                .ok_or_else(|| NotYet(wanted.clone()))?;
            let data = cm.data.as_ref().and_then(|d| d.get("ids"));
            all.extend(data.iter().flat_map(|d| d.lines()).map(str::to_string));
        }
        if all.len() as i64 != s.count || digest(&all) != s.digest {
            return Err(NotYet(format!(
                "{list}: the ConfigMaps do not hold the list the status names"
            )));
        }
        *ids = all;
    }
    Ok(())
}

/// ConfigMaps of this platform that no list of `status` (as written) names any more.
pub fn stale<'a>(
    gsp: &GluesyncPlatform,
    written: &GluesyncPlatformStatus,
    configmaps: &[&'a ConfigMap],
) -> Vec<&'a ConfigMap> {
    let name = gsp.name_any();
    let wanted: BTreeSet<String> = written
        .spilled_lists
        .iter()
        .flat_map(|(list, s)| (0..s.config_maps as usize).map(|n| configmap_name(&name, list, n)))
        .collect();
    configmaps
        .iter()
        .filter(|c| c.labels().get(LABEL) == Some(&name) && !wanted.contains(&c.name_any()))
        .copied()
        .collect()
}

/// True when the cache already holds this ConfigMap with the same ids and digest.
pub fn unchanged(cm: &ConfigMap, cached: &[&ConfigMap]) -> bool {
    cached.iter().any(|c| {
        c.name_any() == cm.name_any()
            && c.annotations().get(DIGEST_ANNOTATION) == cm.annotations().get(DIGEST_ANNOTATION)
            && c.data == cm.data
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{GluesyncPlatformSpec, LateMaintenance};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn gsp() -> GluesyncPlatform {
        let mut g = GluesyncPlatform::new(
            "gluesync",
            serde_json::from_value::<GluesyncPlatformSpec>(serde_json::json!({"version": "1"}))
                .unwrap(),
        );
        g.metadata.namespace = Some("ns".into());
        g.metadata.uid = Some("uid".into());
        g
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("pipeline-{i:06}")).collect()
    }

    #[test]
    fn short_lists_stay_whole_in_the_status() {
        let mut status = GluesyncPlatformStatus {
            paused_pipelines: ids(INLINE_MAX),
            ..Default::default()
        };
        let s = split(&gsp(), &mut status);
        assert!(s.configmaps.is_empty());
        assert_eq!(s.status, status);
    }

    #[test]
    fn a_hundred_thousand_ids_go_to_configmaps_and_come_back() {
        let mut full = GluesyncPlatformStatus {
            paused_pipelines: ids(100_000),
            late_maintenance: Some(LateMaintenance {
                pipelines: ids(50_000),
                until: Time(jiff::Timestamp::UNIX_EPOCH),
            }),
            ..Default::default()
        };
        let s = split(&gsp(), &mut full);
        assert_eq!(s.status.paused_pipelines.len(), SHOWN);
        assert_eq!(s.status.spilled_lists["pausedPipelines"].count, 100_000);
        assert_eq!(s.configmaps.len(), 5 + 3);
        // The status as stored is small: well under the API server's limit.
        let stored = serde_json::to_vec(&s.status).unwrap().len();
        assert!(stored < 100_000, "{stored} bytes");
        for cm in &s.configmaps {
            let bytes = serde_json::to_vec(cm).unwrap().len();
            assert!(bytes < 900 * 1024, "{bytes} bytes");
            assert_eq!(cm.owner_references().len(), 1, "owned by the platform");
        }
        let mut back = s.status.clone();
        let refs: Vec<&ConfigMap> = s.configmaps.iter().collect();
        join(&gsp(), &mut back, &refs).unwrap();
        assert_eq!(back, full);
    }

    #[test]
    fn configmaps_left_by_a_failed_write_are_not_taken() {
        let mut full = GluesyncPlatformStatus {
            paused_pipelines: ids(30_000),
            ..Default::default()
        };
        let s = split(&gsp(), &mut full);
        let other = split(
            &gsp(),
            &mut GluesyncPlatformStatus {
                paused_pipelines: ids(30_001),
                ..Default::default()
            },
        );
        let refs: Vec<&ConfigMap> = other.configmaps.iter().collect();
        let mut back = s.status.clone();
        assert!(join(&gsp(), &mut back, &refs).is_err());
        let mut back = s.status.clone();
        assert!(
            join(&gsp(), &mut back, &[]).is_err(),
            "not in the cache yet"
        );
    }

    #[test]
    fn configmaps_no_list_names_are_stale() {
        let big = split(
            &gsp(),
            &mut GluesyncPlatformStatus {
                paused_pipelines: ids(30_000),
                ..Default::default()
            },
        );
        let refs: Vec<&ConfigMap> = big.configmaps.iter().collect();
        assert!(stale(&gsp(), &big.status, &refs).is_empty());
        assert_eq!(
            stale(&gsp(), &GluesyncPlatformStatus::default(), &refs).len(),
            2
        );
        assert!(unchanged(&big.configmaps[0], &refs));
    }
}
