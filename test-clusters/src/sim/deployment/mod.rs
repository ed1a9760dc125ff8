//! The deployment controller (pkg/controller/deployment): from a Deployment, the ReplicaSets
//! it controls and their pods, decide which ReplicaSets to create, scale or delete, and what
//! the Deployment's status is.
//!
//! The flow follows `syncDeployment`: deleted → status only; paused or a scaling event →
//! `sync` (proportional scaling, no rollout); otherwise `rolloutRolling` or
//! `rolloutRecreate`, then `syncRolloutStatus` with the `Available` and `Progressing`
//! conditions. Kubernetes writes the Deployment's status up to three times in one sync;
//! here the writes are merged into one `UpdateStatus`, made only when the status (compared
//! without its timestamps) or the revision annotation differs from what was read.
//!
//! Not simulated: the deprecated `rollbackTo` annotation, adopting or releasing ReplicaSets
//! by selector (ownership is by controller reference), and `ReplicaFailure` (pod creation
//! never fails here).

pub mod util;

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde_json::json;

use self::util::{reason, Spec, Strategy};
use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::pod;
use super::template_hash::{compute_hash, equal_ignore_hash, POD_TEMPLATE_HASH_LABEL};

/// What the controller sees of one Deployment.
#[derive(Debug, Clone)]
pub struct DeploymentInput<'a> {
    /// The Deployment.
    pub deployment: &'a Deployment,
    /// The ReplicaSets whose controller is the Deployment.
    pub replica_sets: Vec<&'a ReplicaSet>,
    /// The pods whose controller is one of those ReplicaSets.
    pub pods: Vec<&'a Pod>,
    /// The names of all ReplicaSets in the namespace, to detect pod-template-hash collisions.
    pub taken_names: BTreeSet<&'a str>,
}

/// What one sync decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// When the progress deadline may pass without any other change, the Deployment needs
    /// another look.
    pub wake_at: Option<Timestamp>,
}

/// Syncs one Deployment.
pub fn sync(input: &DeploymentInput<'_>, now: Timestamp, rec: &mut Recorder) -> DeploymentSync {
    let d = input.deployment;
    let mut rss: Vec<ReplicaSet> = input.replica_sets.iter().map(|rs| (*rs).clone()).collect();
    rss.sort_by(by_creation);
    let mut ctl = Controller {
        d,
        spec: Spec::of(d),
        status: d.status.clone().unwrap_or_default(),
        annotations: d.metadata.annotations.clone().unwrap_or_default(),
        rss,
        new: None,
        collided: false,
        pods: &input.pods,
        taken: &input.taken_names,
        now,
        actions: Vec::new(),
        rec,
    };
    ctl.sync_deployment();
    ctl.finish()
}

/// Orders ReplicaSets oldest first, then by name (`controller.ReplicaSetsByCreationTimestamp`).
/// One created in this pass has no timestamp yet and sorts as the newest.
fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    let ts = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(Timestamp::MAX);
    ts(a).cmp(&ts(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// The counts of one ReplicaSet at the moment the status is computed from.
#[derive(Debug, Clone, Copy)]
struct Counts {
    is_new: bool,
    spec: i32,
    actual: i32,
    ready: i32,
    available: i32,
}

struct Controller<'a, 'r> {
    d: &'a Deployment,
    spec: Spec,
    /// `d.Status` as the Go code mutates it during the sync.
    status: DeploymentStatus,
    /// `d.Annotations`, likewise.
    annotations: BTreeMap<String, String>,
    /// The controlled ReplicaSets as this sync has left them, oldest first.
    rss: Vec<ReplicaSet>,
    /// Index of the new ReplicaSet (template equal to the Deployment's) in `rss`.
    new: Option<usize>,
    /// A pod-template-hash collision was found; the sync stops after the status write.
    collided: bool,
    pods: &'a [&'a Pod],
    taken: &'a BTreeSet<&'a str>,
    now: Timestamp,
    actions: Vec<Action>,
    rec: &'r mut Recorder,
}

impl Controller<'_, '_> {
    fn name(&self) -> String {
        self.d.metadata.name.clone().unwrap_or_default()
    }

    fn generation(&self) -> i64 {
        self.d.metadata.generation.unwrap_or(0)
    }

    fn old_indices(&self) -> Vec<usize> {
        (0..self.rss.len()).filter(|i| Some(*i) != self.new).collect()
    }

    fn active_old_indices(&self) -> Vec<usize> {
        self.old_indices().into_iter().filter(|i| util::rs_replicas(&self.rss[*i]) > 0).collect()
    }

    fn sync_deployment(&mut self) {
        if self.d.metadata.deletion_timestamp.is_some() {
            // syncStatusOnly
            self.resolve_new(false);
            let view = self.view();
            self.status = self.calculate_status(&view);
            return;
        }
        if selects_everything(self.d) {
            // Kubernetes warns on every sync; once per generation is enough for describe.
            if self.status.observed_generation.unwrap_or(0) < self.generation() {
                let a = self.rec.warning(
                    Kind::Deployment,
                    &self.d.metadata,
                    component::DEPLOYMENT,
                    "SelectingAll",
                    "This deployment is selecting all pods. A non-empty selector is required.".into(),
                );
                self.actions.push(a);
                self.status.observed_generation = Some(self.generation());
            }
            return;
        }
        self.check_paused_conditions();
        if self.spec.paused || self.is_scaling_event() {
            self.sync_scale();
            return;
        }
        match self.spec.strategy {
            Strategy::Recreate => self.rollout_recreate(),
            Strategy::RollingUpdate { .. } => self.rollout_rolling(),
        }
    }

    /// Emits the one status write, if anything changed, and works out the next wake-up.
    fn finish(self) -> DeploymentSync {
        let Controller { d, spec, status, annotations, mut actions, now, .. } = self;
        let old_status = d.status.clone().unwrap_or_default();
        let old_annotations = d.metadata.annotations.clone().unwrap_or_default();
        if !util::same_ignoring_times(&status, &old_status) || annotations != old_annotations {
            let mut updated = d.clone();
            updated.metadata.annotations = Some(annotations).filter(|a| !a.is_empty());
            updated.status = Some(status.clone());
            actions.push(Action::UpdateStatus(Object::Deployment(Box::new(updated))));
        }
        // requeueStuckDeployment: look again once the progress deadline has passed.
        let wake_at = match (spec.progress_deadline_seconds, util::get_condition(&status, reason::PROGRESSING)) {
            (Some(deadline), Some(cond))
                if cond.reason.as_deref() != Some(reason::TIMED_OUT)
                    && cond.reason.as_deref() != Some(reason::NEW_RS_AVAILABLE)
                    && !spec.paused
                    && !util::deployment_complete(d, &spec, &status) =>
            {
                // A deadline already passed is handled by this sync; never ask to be woken "now".
                cond.last_update_time.as_ref().map(|t| t.0 + SignedDuration::from_secs(i64::from(deadline) + 1)).filter(|t| *t > now)
            }
            _ => None,
        };
        DeploymentSync { actions, wake_at }
    }

    /// `checkPausedConditions`: Progressing=Unknown while paused, and once more on resume.
    fn check_paused_conditions(&mut self) {
        if self.spec.progress_deadline_seconds.is_none() {
            return;
        }
        let current = util::get_condition(&self.status, reason::PROGRESSING).and_then(|c| c.reason.clone());
        if current.as_deref() == Some(reason::TIMED_OUT) {
            return;
        }
        let paused_shown = current.as_deref() == Some(reason::PAUSED);
        if self.spec.paused && !paused_shown {
            let c = util::new_condition(reason::PROGRESSING, "Unknown", reason::PAUSED, "Deployment is paused".into(), self.now);
            util::set_condition(&mut self.status, c);
        } else if !self.spec.paused && paused_shown {
            let c = util::new_condition(reason::PROGRESSING, "Unknown", reason::RESUMED, "Deployment is resumed".into(), self.now);
            util::set_condition(&mut self.status, c);
        }
    }

    /// `isScalingEvent`: an active ReplicaSet was last scaled for a different `spec.replicas`.
    fn is_scaling_event(&mut self) -> bool {
        self.resolve_new(false);
        let active = self.new.into_iter().chain(self.active_old_indices()).filter(|i| util::rs_replicas(&self.rss[*i]) > 0);
        let replicas = self.spec.replicas;
        active.into_iter().any(|i| {
            util::annotation(&self.rss[i], util::DESIRED_REPLICAS_ANNOTATION)
                .and_then(|v| v.parse::<i32>().ok())
                .is_some_and(|desired| desired != replicas)
        })
    }

    /// `getAllReplicaSetsAndSyncRevision`: finds the new ReplicaSet (the oldest whose template
    /// equals the Deployment's), brings its revision up to date, and creates it when asked
    /// and missing.
    fn resolve_new(&mut self, create: bool) {
        if self.new.is_some() || self.collided {
            return;
        }
        let template = self.d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        let found = self
            .rss
            .iter()
            .position(|rs| rs.spec.as_ref().and_then(|s| s.template.as_ref()).is_some_and(|t| equal_ignore_hash(t, &template)));
        let max_old_revision =
            self.rss.iter().enumerate().filter(|(i, _)| Some(*i) != found).map(|(_, rs)| util::revision(rs)).max().unwrap_or(0);
        let new_revision = max_old_revision + 1;
        let replicas_annotations = (self.spec.replicas, self.spec.replicas + self.spec.max_surge());

        if let Some(i) = found {
            let mut rs = self.rss[i].clone();
            let annotations_changed = util::set_new_rs_annotations(&self.annotations, &mut rs, new_revision, true, replicas_annotations);
            let min_ready_changed = rs.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0) != self.spec.min_ready_seconds;
            if annotations_changed || min_ready_changed {
                if let Some(s) = rs.spec.as_mut() {
                    s.min_ready_seconds = Some(self.spec.min_ready_seconds);
                }
                self.actions.push(Action::Patch {
                    target: ObjectRef::from_meta(Kind::ReplicaSet, &rs.metadata),
                    patch: json!({
                        "metadata": {"annotations": rs.metadata.annotations},
                        "spec": {"minReadySeconds": self.spec.min_ready_seconds},
                    }),
                });
            }
            let rev = util::annotation(&rs, util::REVISION_ANNOTATION).unwrap_or_default().to_string();
            self.set_deployment_revision(rev);
            if self.spec.progress_deadline_seconds.is_some() && util::get_condition(&self.status, reason::PROGRESSING).is_none() {
                let msg = format!("Found new replica set {:?}", rs.metadata.name.as_deref().unwrap_or_default());
                let c = util::new_condition(reason::PROGRESSING, "True", reason::FOUND_NEW_RS, msg, self.now);
                util::set_condition(&mut self.status, c);
            }
            self.rss[i] = rs;
            self.new = Some(i);
            return;
        }
        if !create {
            return;
        }

        let hash = compute_hash(&template, self.status.collision_count);
        let name = format!("{}-{hash}", self.name());
        if self.taken.contains(name.as_str()) {
            // Another ReplicaSet has this name but a different template (or owner): bump the
            // collision count so the next sync hashes differently.
            self.status.collision_count = Some(self.status.collision_count.unwrap_or(0) + 1);
            self.collided = true;
            return;
        }
        let mut labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
        labels.insert(POD_TEMPLATE_HASH_LABEL.to_string(), hash.clone());
        let mut rs_template = template.clone();
        rs_template.metadata.get_or_insert_with(Default::default).labels = Some(labels.clone());
        let mut selector: LabelSelector = self.d.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
        selector.match_labels.get_or_insert_with(BTreeMap::new).insert(POD_TEMPLATE_HASH_LABEL.to_string(), hash);
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: self.d.metadata.namespace.clone(),
                labels: Some(labels),
                owner_references: Some(vec![pod::controller_ref("apps/v1", "Deployment", &self.d.metadata)]),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: Some(self.spec.min_ready_seconds),
                selector,
                template: Some(rs_template),
            }),
            status: None,
        };
        self.rss.push(rs.clone());
        let idx = self.rss.len() - 1;
        let count = self.new_rs_new_replicas(idx);
        if let Some(s) = rs.spec.as_mut() {
            s.replicas = Some(count);
        }
        util::set_new_rs_annotations(&self.annotations, &mut rs, new_revision, false, replicas_annotations);
        self.rss[idx] = rs.clone();
        self.new = Some(idx);
        self.actions.push(Action::Create(Object::ReplicaSet(Box::new(rs))));
        if count > 0 {
            let a = self.rec.normal(
                Kind::Deployment,
                &self.d.metadata,
                component::DEPLOYMENT,
                "ScalingReplicaSet",
                format!("Scaled up replica set {name} from 0 to {count}"),
            );
            self.actions.push(a);
        }
        self.set_deployment_revision(new_revision.to_string());
        if self.spec.progress_deadline_seconds.is_some() {
            let c = util::new_condition(
                reason::PROGRESSING,
                "True",
                reason::NEW_RS_CREATED,
                format!("Created new replica set {name:?}"),
                self.now,
            );
            util::set_condition(&mut self.status, c);
        }
    }

    fn set_deployment_revision(&mut self, revision: String) {
        if self.annotations.get(util::REVISION_ANNOTATION) != Some(&revision) {
            self.annotations.insert(util::REVISION_ANNOTATION.to_string(), revision);
        }
    }

    /// `NewRSNewReplicas`: how big the new ReplicaSet may be now.
    fn new_rs_new_replicas(&self, new: usize) -> i32 {
        let new_spec = util::rs_replicas(&self.rss[new]);
        match self.spec.strategy {
            Strategy::Recreate => self.spec.replicas,
            Strategy::RollingUpdate { ref max_surge, .. } => {
                let surge = util::scaled_value(max_surge, self.spec.replicas, true);
                let current: i32 = self.rss.iter().map(util::rs_replicas).sum();
                let max_total = self.spec.replicas + surge;
                if current >= max_total {
                    return new_spec;
                }
                let up = (max_total - current).min(self.spec.replicas - new_spec);
                new_spec + up
            }
        }
    }

    /// The counts the status is computed from, taken before this sync scales anything (as
    /// Kubernetes computes from the objects it listed).
    fn view(&self) -> Vec<Counts> {
        self.rss
            .iter()
            .enumerate()
            .map(|(i, rs)| Counts {
                is_new: Some(i) == self.new,
                spec: util::rs_replicas(rs),
                actual: util::rs_actual(rs),
                ready: util::rs_ready(rs),
                available: util::rs_available(rs),
            })
            .collect()
    }

    /// `scaleReplicaSetAndRecordEvent`.
    fn scale_and_record(&mut self, i: usize, to: i32) -> bool {
        let from = util::rs_replicas(&self.rss[i]);
        if from == to {
            return false;
        }
        self.scale(i, to, if from < to { "up" } else { "down" })
    }

    /// `scaleReplicaSet`: sets the size and the replica annotations; true when the size changed.
    fn scale(&mut self, i: usize, to: i32, direction: &str) -> bool {
        let desired = self.spec.replicas;
        let max = desired + self.spec.max_surge();
        let rs = &mut self.rss[i];
        let from = util::rs_replicas(rs);
        let size_changes = from != to;
        if !size_changes && !util::replicas_annotations_need_update(rs, desired, max) {
            return false;
        }
        rs.spec.get_or_insert_with(Default::default).replicas = Some(to);
        util::set_replicas_annotations(rs, desired, max);
        let name = rs.metadata.name.clone().unwrap_or_default();
        self.actions.push(Action::Patch {
            target: ObjectRef::from_meta(Kind::ReplicaSet, &rs.metadata),
            patch: json!({
                "metadata": {"annotations": {
                    util::DESIRED_REPLICAS_ANNOTATION: desired.to_string(),
                    util::MAX_REPLICAS_ANNOTATION: max.to_string(),
                }},
                "spec": {"replicas": to},
            }),
        });
        if size_changes {
            let msg = format!("Scaled {direction} replica set {name} from {from} to {to}");
            let a = self.rec.normal(Kind::Deployment, &self.d.metadata, component::DEPLOYMENT, "ScalingReplicaSet", msg);
            self.actions.push(a);
        }
        size_changes
    }

    /// `sync`: scale without rolling out (paused, or `spec.replicas` changed), clean up old
    /// ReplicaSets when paused, and compute the status.
    fn sync_scale(&mut self) {
        self.resolve_new(false);
        let view = self.view();
        self.scale_proportionally();
        if self.spec.paused {
            self.cleanup();
        }
        self.status = self.calculate_status(&view);
    }

    /// `scale`: one active ReplicaSet takes all replicas; a saturated new ReplicaSet means
    /// the old ones go to zero; otherwise, for RollingUpdate, the change in size is spread
    /// over the active ReplicaSets in proportion to their sizes.
    fn scale_proportionally(&mut self) {
        let replicas = self.spec.replicas;
        let mut active: Vec<usize> =
            self.new.into_iter().chain(self.old_indices()).filter(|i| util::rs_replicas(&self.rss[*i]) > 0).collect();
        match active.len() {
            0 => {
                // FindActiveOrLatest: the new ReplicaSet, else the newest old one.
                let latest = self.new.or_else(|| self.old_indices().into_iter().max_by(|a, b| by_creation(&self.rss[*a], &self.rss[*b])));
                if let Some(i) = latest {
                    if util::rs_replicas(&self.rss[i]) != replicas {
                        self.scale_and_record(i, replicas);
                    }
                }
                return;
            }
            1 => {
                let i = active[0];
                if util::rs_replicas(&self.rss[i]) != replicas {
                    self.scale_and_record(i, replicas);
                }
                return;
            }
            _ => {}
        }
        if let Some(new) = self.new {
            if self.is_saturated(new) {
                for i in self.active_old_indices() {
                    self.scale_and_record(i, 0);
                }
                return;
            }
        }
        if !self.spec.is_rolling() {
            return;
        }
        let current: i32 = active.iter().map(|i| util::rs_replicas(&self.rss[*i])).sum();
        let allowed = if replicas > 0 { replicas + self.spec.max_surge() } else { 0 };
        let to_add = allowed - current;
        let rss = &self.rss;
        // Larger ReplicaSets first; on equal sizes the newer first when growing and the older
        // first when shrinking (ReplicaSetsBySizeNewer / BySizeOlder).
        active.sort_by(|a, b| {
            let (ra, rb) = (&rss[*a], &rss[*b]);
            util::rs_replicas(rb).cmp(&util::rs_replicas(ra)).then_with(
                || {
                    if to_add > 0 {
                        by_creation(rb, ra)
                    } else {
                        by_creation(ra, rb)
                    }
                },
            )
        });
        let direction = if to_add > 0 { "up" } else { "down" };
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::with_capacity(active.len());
        for &i in &active {
            let size = util::rs_replicas(&self.rss[i]);
            if to_add != 0 {
                let share = self.proportion(i, to_add, added);
                sizes.push(size + share);
                added += share;
            } else {
                sizes.push(size);
            }
        }
        if to_add != 0 {
            // Leftovers go to the largest ReplicaSet.
            sizes[0] = (sizes[0] + to_add - added).max(0);
        }
        for (&i, size) in active.iter().zip(sizes) {
            self.scale(i, size, direction);
        }
    }

    /// `IsSaturated`: the new ReplicaSet has all replicas, was scaled for them, and they are
    /// all available.
    fn is_saturated(&self, i: usize) -> bool {
        let rs = &self.rss[i];
        let desired = util::annotation(rs, util::DESIRED_REPLICAS_ANNOTATION).and_then(|v| v.parse::<i32>().ok());
        util::rs_replicas(rs) == self.spec.replicas && desired == Some(self.spec.replicas) && util::rs_available(rs) == self.spec.replicas
    }

    /// `GetProportion`: this ReplicaSet's share of `to_add`, never overshooting what is left.
    fn proportion(&self, i: usize, to_add: i32, added: i32) -> i32 {
        let rs = &self.rss[i];
        let size = util::rs_replicas(rs);
        if size == 0 || to_add == 0 || to_add == added {
            return 0;
        }
        let fraction = self.fraction(rs);
        let allowed = to_add - added;
        if to_add > 0 {
            fraction.min(allowed)
        } else {
            fraction.max(allowed)
        }
    }

    /// `getReplicaSetFraction`: how the ReplicaSet's size changes if it keeps its share of
    /// the Deployment's maximum size, taken from its `max-replicas` annotation.
    fn fraction(&self, rs: &ReplicaSet) -> i32 {
        let size = util::rs_replicas(rs);
        if self.spec.replicas == 0 {
            return -size;
        }
        let max_now = self.spec.replicas + self.spec.max_surge();
        let mut max_before = util::annotation(rs, util::MAX_REPLICAS_ANNOTATION).and_then(|v| v.parse::<i32>().ok()).unwrap_or(0);
        if max_before == 0 {
            max_before = self.status.replicas.unwrap_or(0);
            if max_before == 0 {
                return 0;
            }
        }
        let scaled = f64::from(size) * f64::from(max_now) / f64::from(max_before);
        // Go's math.Round rounds halves away from zero, as f64::round does.
        scaled.round() as i32 - size
    }

    /// `rolloutRolling`.
    fn rollout_rolling(&mut self) {
        self.resolve_new(true);
        if self.collided {
            return;
        }
        let view = self.view();
        if self.reconcile_new() || self.reconcile_old() {
            self.sync_rollout_status(&view);
            return;
        }
        if util::deployment_complete(self.d, &self.spec, &self.status) {
            self.cleanup();
        }
        self.sync_rollout_status(&view);
    }

    /// `reconcileNewReplicaSet`: grow the new ReplicaSet within the surge, or shrink it to size.
    fn reconcile_new(&mut self) -> bool {
        let Some(new) = self.new else { return false };
        let size = util::rs_replicas(&self.rss[new]);
        if size == self.spec.replicas {
            return false;
        }
        if size > self.spec.replicas {
            return self.scale_and_record(new, self.spec.replicas);
        }
        let to = self.new_rs_new_replicas(new);
        self.scale_and_record(new, to)
    }

    /// `reconcileOldReplicaSets`: shrink old ReplicaSets as far as availability allows,
    /// unhealthy replicas first.
    fn reconcile_old(&mut self) -> bool {
        let Some(new) = self.new else { return false };
        let old_active = self.active_old_indices();
        let old_pods: i32 = old_active.iter().map(|i| util::rs_replicas(&self.rss[*i])).sum();
        if old_pods == 0 {
            return false;
        }
        let all_pods: i32 = self.rss.iter().map(util::rs_replicas).sum();
        let min_available = self.spec.replicas - self.spec.max_unavailable();
        let new_unavailable = util::rs_replicas(&self.rss[new]) - util::rs_available(&self.rss[new]);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let cleaned = self.cleanup_unhealthy(&old_active, max_scaled_down);
        let scaled = self.scale_down_old_for_rolling(&old_active);
        cleaned + scaled > 0
    }

    /// `cleanupUnhealthyReplicas`: drop old replicas that are not available, oldest
    /// ReplicaSet first; their loss costs no availability.
    fn cleanup_unhealthy(&mut self, old_active: &[usize], max: i32) -> i32 {
        let mut total = 0;
        for &i in old_active {
            if total >= max {
                break;
            }
            let size = util::rs_replicas(&self.rss[i]);
            let available = util::rs_available(&self.rss[i]);
            if size == 0 || size <= available {
                continue;
            }
            let down = (max - total).min(size - available);
            self.scale_and_record(i, size - down);
            total += down;
        }
        total
    }

    /// `scaleDownOldReplicaSetsForRollingUpdate`: remove available old replicas beyond
    /// `replicas - maxUnavailable`, oldest ReplicaSet first.
    fn scale_down_old_for_rolling(&mut self, old_active: &[usize]) -> i32 {
        let min_available = self.spec.replicas - self.spec.max_unavailable();
        let available: i32 = old_active.iter().chain(self.new.iter()).map(|i| util::rs_available(&self.rss[*i])).sum();
        if available <= min_available {
            return 0;
        }
        let target = available - min_available;
        let mut total = 0;
        for &i in old_active {
            if total >= target {
                break;
            }
            let size = util::rs_replicas(&self.rss[i]);
            if size == 0 {
                continue;
            }
            let down = size.min(target - total);
            self.scale_and_record(i, size - down);
            total += down;
        }
        total
    }

    /// `rolloutRecreate`: old ReplicaSets to zero, wait until their pods are gone, then the
    /// new ReplicaSet at full size.
    fn rollout_recreate(&mut self) {
        self.resolve_new(false);
        let mut view = self.view();
        let mut scaled_down = false;
        for i in self.active_old_indices() {
            scaled_down |= self.scale_and_record(i, 0);
        }
        if scaled_down || self.old_pods_running() {
            self.sync_rollout_status(&view);
            return;
        }
        if self.new.is_none() {
            self.resolve_new(true);
            if self.collided {
                return;
            }
            view = self.view();
        }
        if let Some(new) = self.new {
            self.scale_and_record(new, self.spec.replicas);
        }
        if util::deployment_complete(self.d, &self.spec, &self.status) {
            self.cleanup();
        }
        self.sync_rollout_status(&view);
    }

    /// `oldPodsRunning`: old ReplicaSets still report pods, or pods outside the new
    /// ReplicaSet have not finished.
    fn old_pods_running(&self) -> bool {
        if self.old_indices().iter().map(|i| util::rs_actual(&self.rss[*i])).sum::<i32>() > 0 {
            return true;
        }
        let new_uid = self.new.and_then(|i| self.rss[i].metadata.uid.as_deref());
        self.pods.iter().any(|p| pod::controller_uid(&p.metadata) != new_uid && !pod::is_terminal(p))
    }

    /// `cleanupDeployment`: delete the oldest fully scaled-down ReplicaSets beyond
    /// `revisionHistoryLimit`.
    fn cleanup(&mut self) {
        let Some(limit) = self.spec.revision_history_limit else {
            return;
        };
        let mut candidates: Vec<&ReplicaSet> =
            self.old_indices().into_iter().map(|i| &self.rss[i]).filter(|rs| rs.metadata.deletion_timestamp.is_none()).collect();
        let excess = candidates.len() as i64 - i64::from(limit);
        if excess <= 0 {
            return;
        }
        candidates.sort_by(|a, b| util::revision(a).cmp(&util::revision(b)).then_with(|| by_creation(a, b)));
        let mut deletes = Vec::new();
        for rs in candidates.into_iter().take(excess as usize) {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation).unwrap_or(0);
            if util::rs_actual(rs) != 0 || util::rs_replicas(rs) != 0 || rs.metadata.generation.unwrap_or(0) > observed {
                continue;
            }
            deletes.push(Action::Delete { target: ObjectRef::from_meta(Kind::ReplicaSet, &rs.metadata), grace_period_seconds: None });
        }
        self.actions.extend(deletes);
    }

    /// `calculateStatus`.
    fn calculate_status(&self, view: &[Counts]) -> DeploymentStatus {
        let available: i32 = view.iter().map(|c| c.available).sum();
        let total: i32 = view.iter().map(|c| c.spec).sum();
        let nz = |n: i32| (n != 0).then_some(n);
        let mut status = DeploymentStatus {
            observed_generation: Some(self.generation()).filter(|g| *g != 0),
            replicas: nz(view.iter().map(|c| c.actual).sum()),
            updated_replicas: nz(view.iter().filter(|c| c.is_new).map(|c| c.actual).sum()),
            ready_replicas: nz(view.iter().map(|c| c.ready).sum()),
            available_replicas: nz(available),
            unavailable_replicas: nz((total - available).max(0)),
            collision_count: self.status.collision_count,
            conditions: self.status.conditions.clone(),
            terminating_replicas: None,
        };
        let condition = if available >= self.spec.replicas - self.spec.max_unavailable() {
            util::new_condition(
                reason::AVAILABLE,
                "True",
                reason::MINIMUM_REPLICAS_AVAILABLE,
                "Deployment has minimum availability.".into(),
                self.now,
            )
        } else {
            util::new_condition(
                reason::AVAILABLE,
                "False",
                reason::MINIMUM_REPLICAS_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
                self.now,
            )
        };
        util::set_condition(&mut status, condition);
        status
    }

    /// `syncRolloutStatus`: the status plus the Progressing condition.
    fn sync_rollout_status(&mut self, view: &[Counts]) {
        let mut new_status = self.calculate_status(view);
        let Some(deadline) = self.spec.progress_deadline_seconds else {
            util::remove_condition(&mut new_status, reason::PROGRESSING);
            util::remove_condition(&mut new_status, reason::REPLICA_FAILURE);
            self.status = new_status;
            return;
        };
        let new_rs_name = self.new.map(|i| self.rss[i].metadata.name.clone().unwrap_or_default());
        let about = |done: &str| match &new_rs_name {
            Some(rs) => format!("ReplicaSet {rs:?} {done}."),
            None => format!("Deployment {:?} {done}.", self.name()),
        };
        let current = util::get_condition(&self.status, reason::PROGRESSING).cloned();
        let n = |v: Option<i32>| v.unwrap_or(0);
        let rollout_done_before = n(new_status.replicas) == n(new_status.updated_replicas)
            && current.as_ref().is_some_and(|c| c.reason.as_deref() == Some(reason::NEW_RS_AVAILABLE));
        if !rollout_done_before {
            if util::deployment_complete(self.d, &self.spec, &new_status) {
                let c = util::new_condition(
                    reason::PROGRESSING,
                    "True",
                    reason::NEW_RS_AVAILABLE,
                    about("has successfully progressed"),
                    self.now,
                );
                util::set_condition(&mut new_status, c);
            } else if util::deployment_progressing(&self.status, &new_status) {
                // Progress refreshes the update time even when the reason stays the same.
                let mut c = util::new_condition(reason::PROGRESSING, "True", reason::RS_UPDATED, about("is progressing"), self.now);
                if let Some(cur) = &current {
                    if cur.status == "True" {
                        c.last_transition_time = cur.last_transition_time.clone();
                    }
                    util::remove_condition(&mut new_status, reason::PROGRESSING);
                }
                util::set_condition(&mut new_status, c);
            } else if self.timed_out(&new_status, deadline) {
                let c = util::new_condition(reason::PROGRESSING, "False", reason::TIMED_OUT, about("has timed out progressing"), self.now);
                util::set_condition(&mut new_status, c);
            }
        }
        util::remove_condition(&mut new_status, reason::REPLICA_FAILURE);
        self.status = new_status;
    }

    /// `DeploymentTimedOut`: no progress recorded for `progressDeadlineSeconds`.
    fn timed_out(&self, status: &DeploymentStatus, deadline: i32) -> bool {
        let Some(cond) = util::get_condition(status, reason::PROGRESSING) else {
            return false;
        };
        match cond.reason.as_deref() {
            Some(reason::NEW_RS_AVAILABLE) => false,
            Some(reason::TIMED_OUT) => true,
            _ => cond.last_update_time.as_ref().is_some_and(|t| t.0 + SignedDuration::from_secs(i64::from(deadline)) < self.now),
        }
    }
}

/// An empty selector selects every pod; the controller refuses to act on it.
fn selects_everything(d: &Deployment) -> bool {
    let Some(spec) = &d.spec else { return false };
    spec.selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && spec.selector.match_expressions.as_ref().is_none_or(|m| m.is_empty())
}

#[cfg(test)]
mod tests;
