//! Deployment helpers that mirror pkg/controller/deployment/util/deployment_util.go:
//! spec defaults, surge and unavailability fenceposts, revision annotations, conditions.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::sim::k8s_time;

/// The ReplicaSet's revision, copied onto the Deployment.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions a ReplicaSet held, when a rollback reused it.
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's `spec.replicas` when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` when the ReplicaSet was last scaled.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// Longest `revision-history` annotation kept (the controller's default).
pub const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Deployment annotations that are not copied to ReplicaSets (`skipCopyAnnotation`).
const SKIP_COPY: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
    DESIRED_REPLICAS_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    "deprecated.deployment.rollback.to",
];

/// Condition types and reasons, as Kubernetes spells them.
pub mod reason {
    /// Condition type: enough pods are available.
    pub const AVAILABLE: &str = "Available";
    /// Condition type: the rollout is moving, done, paused or stuck.
    pub const PROGRESSING: &str = "Progressing";
    /// Condition type: pods could not be created or deleted.
    pub const REPLICA_FAILURE: &str = "ReplicaFailure";
    /// Available=True.
    pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Available=False.
    pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
    /// Progressing=True: a new ReplicaSet was created.
    pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
    /// Progressing=True: an existing new ReplicaSet was found.
    pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
    /// Progressing=True: the rollout made progress.
    pub const RS_UPDATED: &str = "ReplicaSetUpdated";
    /// Progressing=True: the rollout finished.
    pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
    /// Progressing=False: no progress within progressDeadlineSeconds.
    pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
    /// Progressing=Unknown: the Deployment is paused.
    pub const PAUSED: &str = "DeploymentPaused";
    /// Progressing=Unknown: the Deployment was resumed.
    pub const RESUMED: &str = "DeploymentResumed";
}

/// How a Deployment replaces pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Scale the old ReplicaSets to zero before creating the new one.
    Recreate,
    /// Replace pods gradually within the surge and unavailability bounds.
    RollingUpdate {
        /// `maxSurge`.
        max_surge: IntOrString,
        /// `maxUnavailable`.
        max_unavailable: IntOrString,
    },
}

/// The Deployment spec with API defaults applied (pkg/apis/apps/v1/defaults.go), since the
/// API server storing the objects may not default them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// `spec.replicas` (default 1).
    pub replicas: i32,
    /// `spec.minReadySeconds` (default 0).
    pub min_ready_seconds: i32,
    /// `spec.paused`.
    pub paused: bool,
    /// `spec.progressDeadlineSeconds` (default 600); `None` when it is `MaxInt32` (no deadline).
    pub progress_deadline_seconds: Option<i32>,
    /// `spec.revisionHistoryLimit` (default 10); `None` when it is `MaxInt32` (keep all).
    pub revision_history_limit: Option<i32>,
    /// `spec.strategy` (default RollingUpdate 25%/25%).
    pub strategy: Strategy,
}

impl Spec {
    /// Reads the spec of `d`, filling in defaults.
    pub fn of(d: &Deployment) -> Spec {
        let spec = d.spec.clone().unwrap_or_default();
        let quarter = || IntOrString::String("25%".to_string());
        let strategy = match spec.strategy {
            Some(s) if s.type_.as_deref() == Some("Recreate") => Strategy::Recreate,
            Some(s) => {
                let ru = s.rolling_update.unwrap_or_default();
                Strategy::RollingUpdate {
                    max_surge: ru.max_surge.unwrap_or_else(quarter),
                    max_unavailable: ru.max_unavailable.unwrap_or_else(quarter),
                }
            }
            None => Strategy::RollingUpdate { max_surge: quarter(), max_unavailable: quarter() },
        };
        Spec {
            replicas: spec.replicas.unwrap_or(1),
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
            paused: spec.paused.unwrap_or(false),
            progress_deadline_seconds: Some(spec.progress_deadline_seconds.unwrap_or(600)).filter(|s| *s != i32::MAX),
            revision_history_limit: Some(spec.revision_history_limit.unwrap_or(10)).filter(|s| *s != i32::MAX),
            strategy,
        }
    }

    /// Whether the strategy is RollingUpdate.
    pub fn is_rolling(&self) -> bool {
        matches!(self.strategy, Strategy::RollingUpdate { .. })
    }

    /// `(maxSurge, maxUnavailable)` resolved against `replicas` (`ResolveFenceposts`): surge
    /// rounds up, unavailability rounds down, and if both come to zero unavailability is 1.
    pub fn fenceposts(&self) -> (i32, i32) {
        match &self.strategy {
            Strategy::Recreate => (0, 0),
            Strategy::RollingUpdate { max_surge, max_unavailable } => {
                let surge = scaled_value(max_surge, self.replicas, true);
                let mut unavailable = scaled_value(max_unavailable, self.replicas, false);
                if surge == 0 && unavailable == 0 {
                    unavailable = 1;
                }
                (surge, unavailable)
            }
        }
    }

    /// `MaxSurge`: 0 unless rolling.
    pub fn max_surge(&self) -> i32 {
        if self.is_rolling() {
            self.fenceposts().0
        } else {
            0
        }
    }

    /// `MaxUnavailable`: 0 unless rolling with replicas, and never more than `replicas`.
    pub fn max_unavailable(&self) -> i32 {
        if !self.is_rolling() || self.replicas == 0 {
            return 0;
        }
        self.fenceposts().1.min(self.replicas)
    }
}

/// `intstr.GetScaledValueFromIntOrPercent`: an int as is, `"N%"` of `total` rounded up or
/// down. Anything else (which validation rejects) counts as 0.
pub fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> i32 {
    match v {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let Some(percent) = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else {
                return 0;
            };
            let product = percent * i64::from(total);
            let value = if round_up { (product + 99).div_euclid(100) } else { product.div_euclid(100) };
            value as i32
        }
    }
}

/// `spec.replicas` of a ReplicaSet (default 1).
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `status.replicas`.
pub fn rs_actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}

/// `status.availableReplicas`.
pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0)
}

/// `status.readyReplicas`.
pub fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0)
}

/// The ReplicaSet's revision annotation as a number (0 when absent or unparsable).
pub fn revision(rs: &ReplicaSet) -> i64 {
    annotation(rs, REVISION_ANNOTATION).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// One annotation of a ReplicaSet.
pub fn annotation<'a>(rs: &'a ReplicaSet, key: &str) -> Option<&'a str> {
    rs.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Sets the `desired-replicas` and `max-replicas` annotations; true when anything changed
/// (`SetReplicasAnnotations`).
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (key, value) in [(DESIRED_REPLICAS_ANNOTATION, desired), (MAX_REPLICAS_ANNOTATION, max)] {
        let value = value.to_string();
        if annotations.get(key) != Some(&value) {
            annotations.insert(key.to_string(), value);
            changed = true;
        }
    }
    changed
}

/// Whether `set_replicas_annotations` would change anything.
pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    annotation(rs, DESIRED_REPLICAS_ANNOTATION) != Some(desired.to_string().as_str())
        || annotation(rs, MAX_REPLICAS_ANNOTATION) != Some(max.to_string().as_str())
}

/// Copies the Deployment's annotations onto the ReplicaSet, except the controller's own and
/// kubectl's last-applied configuration (`copyDeploymentAnnotationsToReplicaSet`).
pub fn copy_annotations(from: &BTreeMap<String, String>, rs: &mut ReplicaSet) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in from {
        if SKIP_COPY.contains(&k.as_str()) || annotations.get(k) == Some(v) {
            continue;
        }
        annotations.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Gives the new ReplicaSet its revision (`SetNewReplicaSetAnnotations`). When a rollback
/// reuses an older ReplicaSet, its previous revision moves to the `revision-history`
/// annotation. A ReplicaSet about to be created also gets the replica annotations.
pub fn set_new_rs_annotations(
    deployment_annotations: &BTreeMap<String, String>,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
    replicas_annotations: (i32, i32),
) -> bool {
    let mut changed = copy_annotations(deployment_annotations, rs);
    let old = annotation(rs, REVISION_ANNOTATION).map(str::to_string);
    let old_value = match &old {
        None => 0,
        Some(text) => match text.parse::<i64>() {
            Ok(n) => n,
            // Kubernetes leaves a ReplicaSet with a garbled revision alone.
            Err(_) => return false,
        },
    };
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if old_value < new_revision {
        annotations.insert(REVISION_ANNOTATION.to_string(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            let history = annotations.get(REVISION_HISTORY_ANNOTATION).cloned().unwrap_or_default();
            if history.is_empty() {
                annotations.insert(REVISION_HISTORY_ANNOTATION.to_string(), old);
            } else {
                let mut entries: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                let mut start = 0;
                while total > MAX_REVISION_HISTORY_CHARS && start < entries.len() {
                    total -= entries[start].len() + 1;
                    start += 1;
                }
                if total <= MAX_REVISION_HISTORY_CHARS {
                    entries = entries.split_off(start);
                    entries.push(&old);
                    let joined = entries.join(",");
                    annotations.insert(REVISION_HISTORY_ANNOTATION.to_string(), joined);
                }
            }
        }
    }
    if !exists && set_replicas_annotations(rs, replicas_annotations.0, replicas_annotations.1) {
        changed = true;
    }
    changed
}

/// The condition of the given type.
pub fn get_condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// A condition stamped with `now` (`NewDeploymentCondition`).
pub fn new_condition(type_: &str, status: &str, reason: &str, message: String, now: Timestamp) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_update_time: Some(k8s_time(now)),
        last_transition_time: Some(k8s_time(now)),
    }
}

/// Sets a condition unless one with the same status and reason is there
/// (`SetDeploymentCondition`): the transition time survives a change that keeps the status,
/// and the condition moves to the end of the list.
pub fn set_condition(status: &mut DeploymentStatus, mut condition: DeploymentCondition) {
    if let Some(current) = get_condition(status, &condition.type_) {
        if current.status == condition.status && current.reason == condition.reason {
            return;
        }
        if current.status == condition.status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(status, &condition.type_);
    status.conditions.get_or_insert_with(Vec::new).push(condition);
}

/// Removes the condition of the given type.
pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// The status with zero counts and empty lists made absent (they are `omitempty` in
/// Kubernetes' JSON), so statuses compare equal however they were written.
pub fn normalized(s: &DeploymentStatus) -> DeploymentStatus {
    let z = |v: Option<i32>| v.filter(|n| *n != 0);
    DeploymentStatus {
        available_replicas: z(s.available_replicas),
        collision_count: z(s.collision_count),
        conditions: s.conditions.clone().filter(|c| !c.is_empty()),
        observed_generation: s.observed_generation.filter(|g| *g != 0),
        ready_replicas: z(s.ready_replicas),
        replicas: z(s.replicas),
        terminating_replicas: z(s.terminating_replicas),
        unavailable_replicas: z(s.unavailable_replicas),
        updated_replicas: z(s.updated_replicas),
    }
}

/// Whether two statuses say the same thing: equal once normalized, condition timestamps
/// aside. Conditions only get new timestamps when they change, so a status that differs in
/// timestamps alone was written by someone else and is not worth rewriting.
pub fn same_ignoring_times(a: &DeploymentStatus, b: &DeploymentStatus) -> bool {
    let strip = |s: &DeploymentStatus| {
        let mut s = normalized(s);
        for c in s.conditions.iter_mut().flatten() {
            c.last_update_time = None;
            c.last_transition_time = None;
        }
        s
    };
    strip(a) == strip(b)
}

/// `DeploymentComplete`: every replica updated and available, and the spec observed.
pub fn deployment_complete(d: &Deployment, spec: &Spec, status: &DeploymentStatus) -> bool {
    let n = |v: Option<i32>| v.unwrap_or(0);
    n(status.updated_replicas) == spec.replicas
        && n(status.replicas) == spec.replicas
        && n(status.available_replicas) == spec.replicas
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: more updated, ready or available pods than before, or fewer old ones.
pub fn deployment_progressing(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};

    fn spec(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Spec {
        Spec::of(&Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment { max_surge: Some(surge), max_unavailable: Some(unavailable) }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn defaults() {
        let s = Spec::of(&Deployment::default());
        assert_eq!(s.replicas, 1);
        assert_eq!(s.progress_deadline_seconds, Some(600));
        assert_eq!(s.revision_history_limit, Some(10));
        assert_eq!(s.strategy, Strategy::RollingUpdate { max_surge: pct("25%"), max_unavailable: pct("25%") });
        // 25% of 1: surge rounds up to 1, unavailable rounds down to 0.
        assert_eq!(s.fenceposts(), (1, 0));
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        assert_eq!(spec(10, pct("25%"), pct("25%")).fenceposts(), (3, 2));
        assert_eq!(spec(3, pct("25%"), pct("25%")).fenceposts(), (1, 0));
        assert_eq!(spec(4, IntOrString::Int(1), IntOrString::Int(0)).fenceposts(), (1, 0));
        // Both zero: unavailability becomes 1.
        assert_eq!(spec(3, pct("0%"), pct("10%")).fenceposts(), (0, 1));
        assert_eq!(spec(3, pct("0%"), pct("10%")).max_unavailable(), 1);
        // Never more unavailable than replicas, none with zero replicas.
        assert_eq!(spec(2, IntOrString::Int(0), IntOrString::Int(5)).max_unavailable(), 2);
        assert_eq!(spec(0, IntOrString::Int(0), IntOrString::Int(5)).max_unavailable(), 0);
        assert_eq!(scaled_value(&pct("bogus"), 10, true), 0);
    }

    #[test]
    fn conditions_keep_transition_time_while_status_holds() {
        let mut status = DeploymentStatus::default();
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(200).unwrap();
        set_condition(&mut status, new_condition("Progressing", "True", reason::NEW_RS_CREATED, "a".into(), t0));
        set_condition(&mut status, new_condition("Available", "False", reason::MINIMUM_REPLICAS_UNAVAILABLE, "b".into(), t0));
        // Same status and reason: nothing changes, not even the update time.
        set_condition(&mut status, new_condition("Available", "False", reason::MINIMUM_REPLICAS_UNAVAILABLE, "c".into(), t1));
        assert_eq!(get_condition(&status, "Available").unwrap().message.as_deref(), Some("b"));
        // Same status, new reason: transition time kept, update time new, moved to the end.
        set_condition(&mut status, new_condition("Progressing", "True", reason::RS_UPDATED, "d".into(), t1));
        let p = get_condition(&status, "Progressing").unwrap();
        assert_eq!((p.last_transition_time.as_ref().unwrap().0, p.last_update_time.as_ref().unwrap().0), (t0, t1));
        assert_eq!(status.conditions.as_ref().unwrap()[1].type_, "Progressing");
        // Status flips: both times new.
        set_condition(&mut status, new_condition("Available", "True", reason::MINIMUM_REPLICAS_AVAILABLE, "e".into(), t1));
        assert_eq!(get_condition(&status, "Available").unwrap().last_transition_time.as_ref().unwrap().0, t1);
    }

    #[test]
    fn comparison_ignores_timestamps_and_empty_values() {
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(200).unwrap();
        let mut a = DeploymentStatus { replicas: Some(0), conditions: Some(vec![]), ..Default::default() };
        let b = DeploymentStatus::default();
        assert!(same_ignoring_times(&a, &b));
        set_condition(&mut a, new_condition("Available", "True", reason::MINIMUM_REPLICAS_AVAILABLE, "m".into(), t0));
        let mut c = DeploymentStatus::default();
        set_condition(&mut c, new_condition("Available", "True", reason::MINIMUM_REPLICAS_AVAILABLE, "m".into(), t1));
        assert!(same_ignoring_times(&a, &c));
        c.ready_replicas = Some(1);
        assert!(!same_ignoring_times(&a, &c));
    }

    #[test]
    fn rollback_keeps_revision_history() {
        let mut rs = ReplicaSet::default();
        let d = BTreeMap::from([("team".to_string(), "a".to_string()), (REVISION_ANNOTATION.to_string(), "9".to_string())]);
        assert!(set_new_rs_annotations(&d, &mut rs, 1, false, (3, 4)));
        assert_eq!(annotation(&rs, REVISION_ANNOTATION), Some("1"));
        assert_eq!(annotation(&rs, "team"), Some("a"));
        assert_eq!(annotation(&rs, DESIRED_REPLICAS_ANNOTATION), Some("3"));
        assert_eq!(annotation(&rs, MAX_REPLICAS_ANNOTATION), Some("4"));
        assert!(!set_new_rs_annotations(&d, &mut rs, 1, true, (3, 4)));
        assert!(set_new_rs_annotations(&d, &mut rs, 3, true, (3, 4)));
        assert!(set_new_rs_annotations(&d, &mut rs, 5, true, (3, 4)));
        assert_eq!(annotation(&rs, REVISION_ANNOTATION), Some("5"));
        assert_eq!(annotation(&rs, REVISION_HISTORY_ANNOTATION), Some("1,3"));
    }
}
