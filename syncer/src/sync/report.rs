//! The cluster's report on its copy: when a changed report is written, and how a failure to
//! push is reported.

use super::*;

impl Syncer {
    /// How much longer the changed `entry` of `key` waits before it is written: up to
    /// [`OBSERVE_GRACE`] while the cluster has not observed the copy, then up to
    /// [`PROGRESS_HOLD`] from the first change held while the copy rolls out, and past
    /// that until the syncer's progress budget has a token. `None` when it is to be
    /// written now (a copy the workload model calls settled always is: its rollout is
    /// over or stalled), or has nothing new to say.
    pub(super) fn hold(&self, key: &Key, wp: &WorkloadPlacement, entry: &ClusterSyncStatus, share: i32) -> Option<Duration> {
        let target = &self.settings.sync_target;
        let current = wp.status.as_ref().and_then(|s| s.clusters.iter().find(|c| &c.name == target));
        let kind = WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind).unwrap_or(WorkloadKind::Deployment);
        if workload::copy_state(kind, entry, share).settled() || current.is_some_and(|c| status::same_report(c, entry)) {
            self.held.remove(key);
            return None;
        }
        let limit = if entry.observed { PROGRESS_HOLD } else { OBSERVE_GRACE };
        let since = *self.held.entry(key.clone()).or_insert_with(std::time::Instant::now);
        let left = limit.saturating_sub(since.elapsed());
        if !left.is_zero() {
            return Some(left);
        }
        if !self.progress.take() {
            crate::metrics::progress_deferred(target);
            return Some(PROGRESS_HOLD);
        }
        self.held.remove(key);
        None
    }

    /// Writes this cluster's entry of the WorkloadPlacement status, if it changed. The
    /// entry is all a syncer writes there: the fields derived from all entries are the
    /// status aggregator's.
    pub(super) async fn report(&self, key: &Key, wp: &WorkloadPlacement, entry: Option<ClusterSyncStatus>) -> Result<Next, Error> {
        let target = &self.settings.sync_target;
        let current = wp.status.as_ref().and_then(|s| s.clusters.iter().find(|c| &c.name == target));
        let unchanged = match (current, &entry) {
            (Some(a), Some(b)) => status::same_report(a, b),
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            return Ok(Next::Done);
        }
        let api: Api<WorkloadPlacement> = self.upstream_api(key);
        let written = match entry {
            // The entry is this syncer's own field of the status: applied, it never
            // conflicts with the other syncers, the scheduler or the aggregator.
            Some(entry) => {
                clients::apply_placement_status(&api, &key.name, &self.status_manager, json!({"clusters": [entry]})).await.map(drop)
            }
            // Removal is rare (an unassignment) and must work whoever wrote the entry,
            // so it is a replace guarded by the resourceVersion it was computed from.
            None => {
                let mut next = wp.clone();
                next.status = Some(status::with_entry(wp, target, None));
                api.replace_status(&key.name, &PostParams::default(), &next).await.map(drop)
            }
        };
        match written {
            Ok(()) => Ok(Next::Done),
            // Another writer was first; the watch brings its version.
            Err(e) if is_conflict(&e) => Ok(Next::After(Duration::from_millis(50))),
            Err(e) if is_not_found(&e) => Ok(Next::Done),
            Err(e) => Err(upstream(format!("writing the status of WorkloadPlacement {}/{}/{}", key.workspace, key.namespace, key.name))(e)),
        }
    }

    /// Reports in this cluster's entry that the cluster could not be synced, keeping
    /// the last counts it reported. Best effort: the error is also retried and logged.
    pub(super) async fn report_failure(&self, key: &Key, generation: Option<i64>, e: &Error) {
        let Some(wp) = self.placement(key) else { return };
        let target = &self.settings.sync_target;
        let mut entry = wp
            .status
            .as_ref()
            .and_then(|s| s.clusters.iter().find(|c| &c.name == target))
            .cloned()
            .unwrap_or_else(|| ClusterSyncStatus { name: target.clone(), ..Default::default() });
        let message =
            format!("generation {} could not be synced to cluster {target}: {e}; the syncer retries with backoff", generation.unwrap_or(0));
        let failed = Condition {
            type_: CONDITION_SYNCED.into(),
            status: "False".into(),
            reason: REASON_DOWNSTREAM_ERROR.into(),
            message,
            last_transition_time: now(),
            observed_generation: generation,
        };
        status::set_condition(&mut entry.conditions, failed);
        entry.last_sync_time = Some(now());
        if let Err(e) = self.report(key, &wp, Some(entry)).await {
            tracing::debug!(error = %e, "could not report the failure upstream");
        }
    }
}
