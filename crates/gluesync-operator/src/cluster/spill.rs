//! Memory for very large installs. The status is GKO's memory, and every status write sends the whole
//! object to every watcher: it stays small at every pipeline count. The pipeline lists of the status hold
//! every id while all of them together fit in [`INLINE_BYTES`] (as JSON); beyond that, the longest lists
//! go, one after the other until the rest fits, to ConfigMaps owned by the GluesyncPlatform (shards of
//! [`SHARD`] ids), written before the status that names them, and such a list keeps in the status the
//! first ids that fit in [`SHOWN_BYTES`], with the count and a digest in `status.spilledLists`. The
//! engine never sees the difference: [`Known::join`] puts the complete lists back when the status is read
//! (remembered, or read from the ConfigMaps), [`split`] takes them out again before it is written.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Resource, ResourceExt, api::ObjectMeta};

use crate::api::{
    GluesyncPlatform, GluesyncPlatformStatus, PipelineId, PipelineList, SpilledList, ids::digest,
};

/// Most bytes the ids of the status's pipeline lists take together, as JSON (an id with its quotes and
/// comma), for the lists to stay whole in the status.
pub const INLINE_BYTES: usize = 32 * 1024;
/// Most bytes of ids a spilled list still shows in the status.
pub const SHOWN_BYTES: usize = 2 * 1024;
/// Ids per ConfigMap (each well under the 1 MiB ConfigMap limit).
pub const SHARD: usize = 20_000;
/// Label on the ConfigMaps that hold spilled lists; its value is the GluesyncPlatform's name.
pub const LABEL: &str = "gluesync.molo17.com/spilled-list";
/// Annotation on each ConfigMap: the list it is part of and the digest of the whole list.
const LIST_ANNOTATION: &str = "gluesync.molo17.com/list";
const DIGEST_ANNOTATION: &str = "gluesync.molo17.com/digest";

/// The pipeline lists of a status, each with its name in `status.spilledLists`.
fn lists(status: &mut GluesyncPlatformStatus) -> Vec<(&'static str, &mut PipelineList)> {
    let mut out: Vec<(&'static str, &mut PipelineList)> =
        vec![("pausedPipelines", &mut status.paused_pipelines)];
    if let Some(late) = &mut status.late_maintenance {
        out.push(("lateMaintenance.pipelines", &mut late.pipelines));
    }
    if let Some(u) = &mut status.update {
        out.push(("update.resumedPipelines", &mut u.resumed_pipelines));
        if let Some(asked) = u.step.asked_pipelines_mut() {
            out.push(("update.askedPipelines", asked));
        }
    }
    if let Some(a) = &mut status.last_attempt {
        out.push(("lastAttempt.pausedPipelines", &mut a.paused_pipelines));
        out.push(("lastAttempt.resumedPipelines", &mut a.resumed_pipelines));
    }
    out
}

/// The ConfigMap of shard `shard` of a list: named with the list's digest, so that a new list never
/// overwrites the ConfigMaps of the list the status still names (a GKO stopped between writing a new
/// list's ConfigMaps and the status that names them leaves both lists whole). `None` for the digest gives
/// the name GKO 0.3 used (without it), still read.
fn configmap_name(gsp: &str, list: &str, digest: Option<&str>, shard: usize) -> String {
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
    match digest {
        Some(d) => format!("{gsp}-{slug}-{d}-{shard}"),
        None => format!("{gsp}-{slug}-{shard}"),
    }
}

/// Most ids a spilled list may have. `status.spilledLists` is read from the API server: a count beyond
/// this, or a number of ConfigMaps that does not match the count, is not a list GKO wrote.
const MAX_IDS: i64 = 10_000_000;

fn valid(s: &SpilledList) -> bool {
    (0..=MAX_IDS).contains(&s.count) && s.config_maps == (s.count as usize).div_ceil(SHARD) as i64
}

/// The names shard `shard` of a spilled list may have: the one GKO writes, and GKO 0.3's.
fn shard_names(gsp: &str, list: &str, s: &SpilledList, shard: usize) -> [String; 2] {
    [Some(s.digest.as_str()), None].map(|d| configmap_name(gsp, list, d, shard))
}

/// What to write for a status: the status as stored (long lists cut, `spilledLists` set) and the
/// ConfigMaps that must hold the complete lists before it is written.
pub struct Split {
    pub status: GluesyncPlatformStatus,
    pub configmaps: Vec<ConfigMap>,
}

/// The bytes an id takes in a JSON list: itself, its quotes and a comma.
fn json_bytes(id: &PipelineId) -> usize {
    id.len() + 3
}

/// Which lists (by their place in [`lists`]) go to ConfigMaps: none when all fit in [`INLINE_BYTES`]
/// together, else the longest (in bytes; the first on a tie), one after the other, until the rest fits.
fn to_spill(full: &mut GluesyncPlatformStatus) -> BTreeSet<usize> {
    let mut sizes: Vec<(usize, usize)> = lists(full)
        .iter()
        .enumerate()
        .map(|(i, (_, ids))| (i, ids.iter().map(json_bytes).sum()))
        .collect();
    let mut inline: usize = sizes.iter().map(|(_, bytes)| bytes).sum();
    sizes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut spilling = BTreeSet::new();
    for (i, bytes) in sizes {
        if inline <= INLINE_BYTES {
            break;
        }
        inline -= bytes;
        spilling.insert(i);
    }
    spilling
}

/// Takes the long lists out of a complete status. (`full` is only borrowed mutably so that its long lists
/// are not copied whole: they are set aside while the rest is cloned, and put back.)
pub fn split(gsp: &GluesyncPlatform, full: &mut GluesyncPlatformStatus) -> Split {
    let name = gsp.name_any();
    let owner = gsp.controller_owner_ref(&());
    let spilling = to_spill(full);
    let long: Vec<(usize, PipelineList)> = lists(full)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| spilling.contains(i))
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
                    name: Some(configmap_name(&name, list, Some(&digest), shard)),
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
        let mut left = SHOWN_BYTES;
        *shown = ids
            .iter()
            .take_while(|id| {
                let bytes = json_bytes(id);
                let fits = bytes <= left;
                left = left.saturating_sub(bytes);
                fits
            })
            .cloned()
            .collect();
        *lists(full).swap_remove(i).1 = ids;
    }
    status.spilled_lists = spilled;
    Split { status, configmaps }
}

/// A spilled list whose ConfigMaps do not hold what the status names.
#[derive(Debug, PartialEq, Eq)]
pub struct NotYet(pub String);

/// The complete lists GKO last wrote or read, by platform uid and digest. A reconcile takes a spilled list
/// from here (shared, not copied) instead of reading and parsing its ConfigMaps again; only a GKO that
/// has not written or read a list yet (a restart, a takeover) reads its ConfigMaps.
#[derive(Default)]
pub struct Known(std::sync::Mutex<BTreeMap<String, BTreeMap<String, PipelineList>>>);

impl Known {
    fn by_platform(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeMap<String, PipelineList>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remembers the spilled lists of a complete status (`spilled` as written names them), in place of
    /// those remembered before.
    pub fn remember(
        &self,
        uid: &str,
        spilled: &BTreeMap<String, SpilledList>,
        full: &mut GluesyncPlatformStatus,
    ) {
        let kept: BTreeMap<String, PipelineList> = lists(full)
            .into_iter()
            .filter_map(|(list, ids)| Some((spilled.get(list)?.digest.clone(), ids.clone())))
            .collect();
        if kept.is_empty() {
            self.by_platform().remove(uid);
        } else {
            self.by_platform().insert(uid.to_string(), kept);
        }
    }

    /// Forgets the platforms `keep` does not name (deleted platforms).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.by_platform().retain(|uid, _| keep(uid));
    }

    /// The ConfigMaps a status needs read to be complete: those of each spilled list not remembered (by
    /// the name GKO writes and the one GKO 0.3 wrote; one of them exists).
    pub fn missing(&self, gsp: &GluesyncPlatform, status: &GluesyncPlatformStatus) -> Vec<String> {
        let name = gsp.name_any();
        let known = self.by_platform();
        let mine = known.get(&gsp.uid().unwrap_or_default());
        status
            .spilled_lists
            .iter()
            .filter(|(_, s)| valid(s) && !mine.is_some_and(|m| m.contains_key(&s.digest)))
            .flat_map(|(list, s)| {
                let name = &name;
                (0..s.config_maps as usize).flat_map(move |n| shard_names(name, list, s, n))
            })
            .collect()
    }

    /// Puts the complete lists back into a status read from the API server (its `spilledLists` taken
    /// out, as the engine sees it): remembered ones as they are, the others from `configmaps` (the ones [`Known::missing`] named, read), which are then
    /// remembered too. `NotYet` when the ConfigMaps do not hold the list the status names.
    pub fn join(
        &self,
        gsp: &GluesyncPlatform,
        status: &mut GluesyncPlatformStatus,
        configmaps: &[&ConfigMap],
    ) -> Result<(), NotYet> {
        let spilled = std::mem::take(&mut status.spilled_lists);
        let name = gsp.name_any();
        let uid = gsp.uid().unwrap_or_default();
        for (list, ids) in lists(status) {
            let Some(s) = spilled.get(list) else {
                continue;
            };
            let remembered = self
                .by_platform()
                .get(&uid)
                .and_then(|m| m.get(&s.digest))
                .filter(|l| l.len() as i64 == s.count)
                .cloned();
            *ids = match remembered {
                Some(l) => l,
                None => read(&name, list, s, configmaps)?,
            };
        }
        self.remember(&uid, &spilled, status);
        Ok(())
    }
}

/// One spilled list from its ConfigMaps.
fn read(
    name: &str,
    list: &str,
    s: &SpilledList,
    configmaps: &[&ConfigMap],
) -> Result<PipelineList, NotYet> {
    if !valid(s) {
        return Err(NotYet(format!(
            "{list}: status.spilledLists names {} ids in {} ConfigMaps, which is not a list GKO writes",
            s.count, s.config_maps
        )));
    }
    let mut all: Vec<PipelineId> = Vec::with_capacity(s.count as usize);
    for shard in 0..s.config_maps as usize {
        let wanted = shard_names(name, list, s, shard);
        let cm = configmaps
            .iter()
            .find(|c| {
                wanted.contains(&c.name_any())
                    && c.annotations().get(DIGEST_ANNOTATION) == Some(&s.digest)
            })
            .ok_or_else(|| NotYet(wanted[0].clone()))?;
        let data = cm.data.as_ref().and_then(|d| d.get("ids"));
        all.extend(data.iter().flat_map(|d| d.lines()).map(PipelineId::from));
    }
    if all.len() as i64 != s.count || digest(&all) != s.digest {
        return Err(NotYet(format!(
            "{list}: the ConfigMaps do not hold the list the status names"
        )));
    }
    Ok(all.into())
}

/// The names of the ConfigMaps of this platform that no list of `written` names any more: those the
/// cache holds, and those the status it replaced (`before`) named, which the cache may not hold yet (one
/// written just before, by this GKO): a list's ConfigMaps never outlive the status that names them.
pub fn stale(
    gsp: &GluesyncPlatform,
    before: Option<&GluesyncPlatformStatus>,
    written: &GluesyncPlatformStatus,
    configmaps: &[&ConfigMap],
) -> BTreeSet<String> {
    let name = gsp.name_any();
    let names = |status: &GluesyncPlatformStatus| -> BTreeSet<String> {
        status
            .spilled_lists
            .iter()
            .filter(|(_, s)| valid(s))
            .flat_map(|(list, s)| {
                (0..s.config_maps as usize).map(|n| configmap_name(&name, list, Some(&s.digest), n))
            })
            .collect()
    };
    let wanted = names(written);
    configmaps
        .iter()
        .filter(|c| c.labels().get(LABEL) == Some(&name))
        .map(|c| c.name_any())
        .chain(before.map(names).unwrap_or_default())
        .filter(|n| !wanted.contains(n))
        .collect()
}

/// True when the cache already holds this ConfigMap for the same list: same name (list, digest and
/// shard) and the same digest of the whole list in its annotation, hence the same ids (the cache keeps no ids, see `watches::Kept`).
pub fn unchanged(cm: &ConfigMap, cached: &[&ConfigMap]) -> bool {
    cached.iter().any(|c| {
        c.name_any() == cm.name_any()
            && c.annotations().get(DIGEST_ANNOTATION).is_some()
            && c.annotations().get(DIGEST_ANNOTATION) == cm.annotations().get(DIGEST_ANNOTATION)
            && c.annotations().get(LIST_ANNOTATION) == cm.annotations().get(LIST_ANNOTATION)
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

    /// A status pausing `n` pipelines, and what is written for it.
    fn paused(n: usize) -> (GluesyncPlatformStatus, Split) {
        let mut full = GluesyncPlatformStatus {
            paused_pipelines: ids(n).into(),
            ..Default::default()
        };
        let s = split(&gsp(), &mut full);
        (full, s)
    }

    #[test]
    fn short_lists_stay_whole_in_the_status() {
        // "pipeline-000000" takes 18 bytes in a JSON list: 1,820 of them fit, with the last attempt's 20.
        let fit = INLINE_BYTES / 18;
        let mut status = GluesyncPlatformStatus {
            paused_pipelines: ids(fit - 20).into(),
            last_attempt: Some(attempt(ids(10))),
            ..Default::default()
        };
        let s = split(&gsp(), &mut status);
        assert!(s.configmaps.is_empty());
        assert_eq!(s.status, status);
        // One more id, and the longest list goes.
        status.paused_pipelines = ids(fit - 19).into();
        let s = split(&gsp(), &mut status);
        assert_eq!(
            s.status.spilled_lists.keys().collect::<Vec<_>>(),
            ["pausedPipelines"]
        );
        assert_eq!(
            s.status
                .last_attempt
                .as_ref()
                .unwrap()
                .paused_pipelines
                .len(),
            10,
            "the short list stays whole"
        );
    }

    fn attempt(paused: Vec<String>) -> crate::api::Attempt {
        crate::api::Attempt {
            target: Some("2.3.2.2".into()),
            request_id: None,
            requested_by: None,
            generation: Some(2),
            result: crate::api::UpdateResult::Succeeded,
            message: "done".into(),
            started_at: None,
            finished_at: Time(jiff::Timestamp::UNIX_EPOCH),
            results: vec![],
            paused_pipelines: paused.clone().into(),
            resumed_pipelines: paused.into(),
        }
    }

    /// Whatever the count of pipelines and however long their ids, the lists take at most
    /// `INLINE_BYTES` and `SHOWN_BYTES` a list: the status stays well under 64 KiB.
    #[test]
    fn the_status_stays_small_at_every_count() {
        for long_ids in [false, true] {
            for n in [
                0, 1, 100, 1_000, 1_820, 1_821, 2_500, 10_000, 30_000, 100_000,
            ] {
                let some = |n: usize| -> Vec<String> {
                    ids(n)
                        .into_iter()
                        .map(|id| {
                            if long_ids {
                                format!("{id}-0b8a-4c1e-9f6d-1a2b3c")
                            } else {
                                id
                            }
                        })
                        .collect()
                };
                let mut full = GluesyncPlatformStatus {
                    paused_pipelines: some(n).into(),
                    late_maintenance: Some(LateMaintenance {
                        pipelines: some(n).into(),
                        until: Time(jiff::Timestamp::UNIX_EPOCH),
                    }),
                    last_attempt: Some(attempt(some(n))),
                    ..Default::default()
                };
                let s = split(&gsp(), &mut full);
                let stored = serde_json::to_vec(&s.status).unwrap().len();
                assert!(
                    stored <= INLINE_BYTES + 4 * SHOWN_BYTES + 2048,
                    "{n} ids (long: {long_ids}): {stored} bytes"
                );
                let mut back = s.status.clone();
                let refs: Vec<&ConfigMap> = s.configmaps.iter().collect();
                Known::default().join(&gsp(), &mut back, &refs).unwrap();
                assert_eq!(back, full, "{n} ids come back whole");
            }
        }
    }

    #[test]
    fn a_hundred_thousand_ids_go_to_configmaps_and_come_back() {
        let mut full = GluesyncPlatformStatus {
            paused_pipelines: ids(100_000).into(),
            late_maintenance: Some(LateMaintenance {
                pipelines: ids(50_000).into(),
                until: Time(jiff::Timestamp::UNIX_EPOCH),
            }),
            ..Default::default()
        };
        let s = split(&gsp(), &mut full);
        let shown = &s.status.paused_pipelines;
        assert!(!shown.is_empty());
        assert!(shown.iter().map(json_bytes).sum::<usize>() <= SHOWN_BYTES);
        assert_eq!(
            shown[..],
            full.paused_pipelines[..shown.len()],
            "the first ids"
        );
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
        Known::default().join(&gsp(), &mut back, &refs).unwrap();
        assert_eq!(back, full);
    }

    #[test]
    fn configmaps_left_by_a_failed_write_are_not_taken() {
        let s = paused(30_000).1;
        let other = paused(30_001).1;
        let refs: Vec<&ConfigMap> = other.configmaps.iter().collect();
        let mut back = s.status.clone();
        assert!(Known::default().join(&gsp(), &mut back, &refs).is_err());
        let mut back = s.status.clone();
        assert!(
            Known::default().join(&gsp(), &mut back, &[]).is_err(),
            "not in the cache yet"
        );
    }

    #[test]
    fn configmaps_no_list_names_are_stale() {
        let big = paused(30_000).1;
        let refs: Vec<&ConfigMap> = big.configmaps.iter().collect();
        assert!(stale(&gsp(), None, &big.status, &refs).is_empty());
        assert_eq!(
            stale(&gsp(), None, &GluesyncPlatformStatus::default(), &refs).len(),
            2
        );
        // The ConfigMaps the replaced status named are stale even when the cache does not hold them yet.
        assert_eq!(
            stale(
                &gsp(),
                Some(&big.status),
                &GluesyncPlatformStatus::default(),
                &[]
            ),
            big.configmaps.iter().map(|c| c.name_any()).collect()
        );
        assert!(stale(&gsp(), Some(&big.status), &big.status, &[]).is_empty());
        assert!(unchanged(&big.configmaps[0], &refs));
    }

    #[test]
    fn a_write_stopped_before_the_status_leaves_the_named_list_whole() {
        // The status names list A; GKO writes list B's ConfigMaps and stops before the status.
        let (a, sa) = paused(30_000);
        let sb = paused(30_001).1;
        let names = |s: &Split| {
            s.configmaps
                .iter()
                .map(|c| c.name_any())
                .collect::<Vec<_>>()
        };
        assert!(
            names(&sa).iter().all(|n| !names(&sb).contains(n)),
            "B's ConfigMaps do not overwrite A's"
        );
        let refs: Vec<&ConfigMap> = sa.configmaps.iter().chain(&sb.configmaps).collect();
        let mut back = sa.status.clone();
        Known::default().join(&gsp(), &mut back, &refs).unwrap();
        assert_eq!(back, a, "a GKO that starts again reads A whole");
        // And once the status names B, A's ConfigMaps are stale.
        assert_eq!(
            stale(&gsp(), Some(&sa.status), &sb.status, &refs).len(),
            sa.configmaps.len()
        );
    }

    #[test]
    fn configmaps_named_as_gko_0_3_named_them_are_read() {
        let (full, s) = paused(30_000);
        let old: Vec<ConfigMap> = s
            .configmaps
            .iter()
            .enumerate()
            .map(|(n, c)| {
                let mut c = c.clone();
                c.metadata.name = Some(configmap_name("gluesync", "pausedPipelines", None, n));
                c
            })
            .collect();
        let refs: Vec<&ConfigMap> = old.iter().collect();
        let mut back = s.status.clone();
        Known::default().join(&gsp(), &mut back, &refs).unwrap();
        assert_eq!(back, full);
        assert!(
            Known::default()
                .missing(&gsp(), &s.status)
                .contains(&"gluesync-pausedpipelines-0".to_string())
        );
        // Written again, they are replaced by the names with the digest.
        assert_eq!(stale(&gsp(), None, &s.status, &refs).len(), old.len());
    }

    #[test]
    fn a_spilled_list_gko_did_not_write_is_refused_without_reading() {
        for (count, config_maps) in [(-1, 0), (30_000, 3), (30_000, -1), (i64::MAX, 1 << 40)] {
            let status = GluesyncPlatformStatus {
                spilled_lists: [(
                    "pausedPipelines".to_string(),
                    SpilledList {
                        count,
                        digest: "0000000000000000".into(),
                        config_maps,
                    },
                )]
                .into(),
                ..Default::default()
            };
            let known = Known::default();
            assert!(
                known.missing(&gsp(), &status).is_empty(),
                "{count} {config_maps}"
            );
            let mut back = status.clone();
            let err = known.join(&gsp(), &mut back, &[]).unwrap_err();
            assert!(err.0.contains("not a list GKO writes"), "{err:?}");
        }
    }

    #[test]
    fn a_cached_configmap_without_its_ids_still_says_it_is_written() {
        let big = paused(30_000).1;
        let mut kept = big.configmaps[0].clone();
        crate::cluster::watches::Kept::keep(&mut kept);
        assert!(kept.data.is_none(), "the cache keeps no ids");
        assert!(unchanged(&big.configmaps[0], &[&kept]));
        let other = paused(30_001).1;
        assert!(!unchanged(&other.configmaps[0], &[&kept]), "another list");
    }

    #[test]
    fn a_remembered_list_comes_back_without_its_configmaps_and_shares_its_ids() {
        let known = Known::default();
        let mut full = GluesyncPlatformStatus {
            paused_pipelines: ids(30_000).into(),
            update: None,
            last_attempt: Some(crate::api::Attempt {
                target: Some("2".into()),
                request_id: None,
                requested_by: None,
                generation: None,
                result: crate::api::UpdateResult::Succeeded,
                message: String::new(),
                started_at: None,
                finished_at: Time(jiff::Timestamp::UNIX_EPOCH),
                results: vec![],
                paused_pipelines: ids(20_000).into(),
                resumed_pipelines: Default::default(),
            }),
            ..Default::default()
        };
        let s = split(&gsp(), &mut full);
        // Nothing remembered: every shard of both lists is to be read (by its name and its 0.3 name).
        assert_eq!(known.missing(&gsp(), &s.status).len(), 2 * (2 + 1));
        known.remember("uid", &s.status.spilled_lists, &mut full);
        assert!(known.missing(&gsp(), &s.status).is_empty());
        let mut back = s.status.clone();
        known.join(&gsp(), &mut back, &[]).unwrap();
        assert_eq!(back, full);
        assert!(
            back.paused_pipelines.shares(&full.paused_pipelines),
            "the remembered list itself, not a copy"
        );
        // A list changed since: its ConfigMaps are read, and it is remembered in turn.
        let mut changed = full.clone();
        changed
            .paused_pipelines
            .retain(|id| id != "pipeline-000007");
        let c = split(&gsp(), &mut changed);
        assert_eq!(known.missing(&gsp(), &c.status).len(), 2 * 2);
        let refs: Vec<&ConfigMap> = c.configmaps.iter().collect();
        let mut back = c.status.clone();
        known.join(&gsp(), &mut back, &refs).unwrap();
        assert_eq!(back, changed);
        assert!(known.missing(&gsp(), &c.status).is_empty());
        // Another platform remembers nothing of this one's lists.
        let mut other = gsp();
        other.metadata.uid = Some("other".into());
        assert_eq!(known.missing(&other, &c.status).len(), 2 * (2 + 1));
        known.retain(|uid| uid != "uid");
        assert_eq!(known.missing(&gsp(), &c.status).len(), 2 * (2 + 1));
    }
}
