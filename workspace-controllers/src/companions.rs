//! Companions go where the workloads that need them go.
//!
//! This controller runs once, in the control plane process. In every namespace of
//! every workspace it gives each companion of an assigned Deployment the assignment
//! labels (`state.workload.flotilla.io/<target>=Sync`) of the Deployments it follows,
//! and the label `workload.flotilla.io/referenced`, which says that this controller
//! manages those labels. When no assigned Deployment needs the object any more, both
//! go again. Which objects follow which Deployment ([`Rule`], after the table of
//! synced kinds, [`placement_api::synced`]):
//! - a ConfigMap, Secret or ServiceAccount that its pod template names;
//! - a Service whose selector matches its pod template's labels (a Service without a
//!   selector selects no pods, and follows nothing);
//! - a NetworkPolicy or PodDisruptionBudget whose selector matches them (an empty
//!   selector matches every pod of the namespace);
//! - an Ingress with a backend (a rule's or the default) that names such a Service;
//! - a HorizontalPodAutoscaler whose scale target is the Deployment.
//!
//! An object several Deployments need goes to the union of their clusters.
//!
//! The syncers then treat a companion like any assigned object: each watches only
//! what is labelled for its own cluster, which is also all that a pull-mode syncer's
//! token may read. A named object that does not exist yet is looked for again every
//! [`MISSING_RETRY`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apimachinery::selector::LabelSelector;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use kube::Client;
use placement_api::synced::Follows;
use placement_api::workload::Workload;
use placement_api::{sync_state_label, sync_target_of_label, WorkloadPlacement, REFERENCED_LABEL, SYNC_STATE_SYNC};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use placement_api::references::References;
use placement_api::synced::Kind;
use runtime::clients;
use runtime::controller::Next;
use runtime::errors::{failed, is_not_found, Failed};
use runtime::followers::Followers;
use runtime::key::{self as cache, Cache};
use runtime::Key;

/// How many companions are labelled at once. A failover relabels every companion of
/// every workload that moved at once: each label is one small patch, and the new
/// clusters' syncers wait for them.
const LABELLERS: usize = 16;
/// How often a named object that does not exist yet is looked for.
pub const MISSING_RETRY: Duration = Duration::from_secs(2);

/// The clusters a workload is assigned to, from its labels.
pub fn assigned_targets(labels: Option<&BTreeMap<String, String>>) -> BTreeSet<String> {
    labels
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_str() == SYNC_STATE_SYNC)
        .filter_map(|(k, _)| sync_target_of_label(k).map(String::from))
        .collect()
}

/// All that [`Index`] reads of one Deployment: the clusters it is assigned to, its pod
/// template's labels, and what the template names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    targets: BTreeSet<String>,
    pod_labels: BTreeMap<String, String>,
    references: Option<References>,
}

impl Summary {
    /// The summary of `d`.
    pub fn of<W: Workload + kube::Resource>(d: &W) -> Self {
        let template = d.pod_template();
        Self {
            targets: assigned_targets(d.meta().labels.as_ref()),
            pod_labels: template.and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default(),
            references: template.and_then(|t| t.spec.as_ref()).map(References::of),
        }
    }

    /// The objects the template names.
    fn named(&self) -> Vec<Obj> {
        let Some(r) = &self.references else { return Vec::new() };
        let named = |kind: Kind, names: &mut dyn Iterator<Item = &String>| names.map(|n| (kind, n.clone())).collect::<Vec<_>>();
        [
            named(Kind::ConfigMap, &mut r.config_maps.iter()),
            named(Kind::Secret, &mut r.secrets.iter()),
            named(Kind::ServiceAccount, &mut r.service_account.iter()),
            named(Kind::PersistentVolumeClaim, &mut r.claims.iter()),
        ]
        .concat()
    }

    /// Its pod template's labels, as pairs.
    fn pairs(&self) -> impl Iterator<Item = Pair> + '_ {
        self.pod_labels.iter().map(|(k, v)| (k.clone(), v.clone()))
    }
}

/// What decides which Deployments an object that is not named by them follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Pods whose labels this selector matches.
    Selects(LabelSelector),
    /// The Services of these names.
    Backends(BTreeSet<String>),
    /// The Deployment of this name.
    ScaleTarget(String),
    /// Nothing: an ExternalName Service or one without a selector, a scale target of
    /// another kind, or a selector that does not parse.
    Nothing,
}

impl Rule {
    /// The rule of an object of `kind`, as JSON; `None` for kinds a template names.
    pub fn of(kind: Kind, o: &Value) -> Option<Rule> {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        let selector = |v: &Value| match LabelSelector::from_label_selector(v) {
            Ok(s) if !s.matches_nothing() => Rule::Selects(s),
            _ => Rule::Nothing,
        };
        Some(match (kind.follows(), kind) {
            (Follows::SelectsPods, Kind::Service) => {
                let external = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
                match spec.get("selector").and_then(Value::as_object) {
                    Some(m) if !m.is_empty() && !external => selector(&json!({"matchLabels": m})),
                    _ => Rule::Nothing,
                }
            }
            (Follows::SelectsPods, Kind::NetworkPolicy) => selector(spec.get("podSelector").unwrap_or(&json!({}))),
            (Follows::SelectsPods, _) => selector(spec.get("selector").unwrap_or(&Value::Null)),
            (Follows::Backends, _) => {
                let service = |b: &Value| b.pointer("/service/name").and_then(Value::as_str).map(String::from);
                let rules = spec.get("rules").and_then(Value::as_array).into_iter().flatten();
                let paths = rules.flat_map(|r| r.pointer("/http/paths").and_then(Value::as_array).into_iter().flatten());
                let names = paths.filter_map(|p| p.get("backend").and_then(service)).chain(spec.get("defaultBackend").and_then(service));
                Rule::Backends(names.filter(|n| !n.is_empty()).collect())
            }
            (Follows::ScaleTarget, _) => {
                let target = spec.get("scaleTargetRef").unwrap_or(&Value::Null);
                let group = target.get("apiVersion").and_then(Value::as_str).and_then(|v| v.split_once('/')).map(|(g, _)| g);
                let kind = target.get("kind").and_then(Value::as_str);
                match (group, kind, target.get("name").and_then(Value::as_str)) {
                    (Some("apps"), Some("Deployment" | "StatefulSet"), Some(name)) if !name.is_empty() => Rule::ScaleTarget(name.into()),
                    _ => Rule::Nothing,
                }
            }
            (Follows::Named | Follows::Scheduled | Follows::Never, _) => return None,
        })
    }

    /// Whether this rule follows Deployment `name` of `summary` directly (an Ingress
    /// follows through its Services).
    fn follows(&self, name: &str, summary: &Summary) -> bool {
        match self {
            Rule::Selects(s) => s.matches(&summary.pod_labels),
            Rule::ScaleTarget(target) => target == name,
            Rule::Backends(_) | Rule::Nothing => false,
        }
    }

    /// The label every pod a selector rule matches must have (the first `key=value`
    /// it requires), under which it is indexed; `None` for a selector that pins no
    /// label (empty, or only other operators), which any pod may match.
    fn pinned(selector: &LabelSelector) -> Option<Pair> {
        selector.requirements().iter().find_map(|r| selector.requires_exact_match(r.key()).map(|v| (r.key().to_string(), v.to_string())))
    }
}

/// A companion of one namespace: its kind and name.
type Obj = (Kind, String);
/// A label: key and value.
type Pair = (String, String);

fn add<K: std::hash::Hash + Eq, V: Ord>(map: &mut HashMap<K, BTreeSet<V>>, k: K, v: V) {
    map.entry(k).or_default().insert(v);
}

fn take<K: std::hash::Hash + Eq, V: Ord>(map: &mut HashMap<K, BTreeSet<V>>, k: K, v: &V) {
    if let std::collections::hash_map::Entry::Occupied(mut e) = map.entry(k) {
        e.get_mut().remove(v);
        if e.get().is_empty() {
            e.remove();
        }
    }
}

/// What the controller knows of one namespace of one workspace, indexed both ways, so
/// that an event costs work in proportion to the objects it concerns, not to the
/// namespace: a namespace of a thousand apps is as cheap per event as one of one.
#[derive(Debug, Default)]
struct Namespace {
    deployments: HashMap<String, Summary>,
    /// The Deployments, by each label of their pods.
    by_pod_label: HashMap<Pair, BTreeSet<String>>,
    /// The Deployments, by each object their template names.
    by_named: HashMap<Obj, BTreeSet<String>>,
    rules: HashMap<Obj, Rule>,
    /// The objects with a selector, by the label it pins ([`Rule::pinned`]).
    selecting: HashMap<Option<Pair>, BTreeSet<Obj>>,
    /// The autoscalers, by the Deployment they scale.
    scaling: HashMap<String, BTreeSet<String>>,
    /// The Ingresses, by each Service they name.
    routing: HashMap<String, BTreeSet<String>>,
}

impl Namespace {
    /// Puts Deployment `name` in with `summary` (`None`: takes it out); returns what it
    /// had.
    fn set_deployment(&mut self, name: &str, summary: Option<Summary>) -> Option<Summary> {
        let old = match summary {
            Some(s) => self.deployments.insert(name.to_string(), s),
            None => self.deployments.remove(name),
        };
        if let Some(old) = &old {
            for pair in old.pairs() {
                take(&mut self.by_pod_label, pair, &name.to_string());
            }
            for o in old.named() {
                take(&mut self.by_named, o, &name.to_string());
            }
        }
        if let Some(now) = self.deployments.get(name) {
            let (pairs, named): (Vec<Pair>, Vec<Obj>) = (now.pairs().collect(), now.named());
            for pair in pairs {
                add(&mut self.by_pod_label, pair, name.to_string());
            }
            for o in named {
                add(&mut self.by_named, o, name.to_string());
            }
        }
        old
    }

    /// Puts companion `obj`'s rule in (`None`: takes it out); returns the one it had.
    fn set_rule(&mut self, obj: &Obj, rule: Option<Rule>) -> Option<Rule> {
        let old = match rule {
            Some(r) => self.rules.insert(obj.clone(), r),
            None => self.rules.remove(obj),
        };
        for (rule, adding) in [(old.as_ref(), false), (self.rules.get(obj), true)] {
            let Some(rule) = rule.cloned() else { continue };
            match rule {
                Rule::Selects(s) if adding => add(&mut self.selecting, Rule::pinned(&s), obj.clone()),
                Rule::Selects(s) => take(&mut self.selecting, Rule::pinned(&s), obj),
                Rule::ScaleTarget(t) if adding => add(&mut self.scaling, t, obj.1.clone()),
                Rule::ScaleTarget(t) => take(&mut self.scaling, t, &obj.1),
                Rule::Backends(services) => {
                    for svc in services {
                        if adding {
                            add(&mut self.routing, svc, obj.1.clone());
                        } else {
                            take(&mut self.routing, svc, &obj.1);
                        }
                    }
                }
                Rule::Nothing => {}
            }
        }
        old
    }

    /// The Ingresses whose backends name Service `service`.
    fn ingresses_of(&self, service: &str) -> impl Iterator<Item = &String> + '_ {
        self.routing.get(service).into_iter().flatten()
    }

    /// The objects whose rules follow Deployment `name` of `summary`: directly, and
    /// Ingresses through such Services.
    fn following(&self, name: &str, summary: &Summary) -> Vec<Obj> {
        let pinned = summary.pod_labels.iter().filter_map(|(k, v)| self.selecting.get(&Some((k.clone(), v.clone()))));
        let selecting = pinned.chain(self.selecting.get(&None)).flatten();
        let scaling = self.scaling.get(name).into_iter().flatten().map(|h| (Kind::HorizontalPodAutoscaler, h.clone()));
        let direct: BTreeSet<Obj> =
            selecting.filter(|o| self.rules.get(*o).is_some_and(|r| r.follows(name, summary))).cloned().chain(scaling).collect();
        let routed: Vec<Obj> = direct
            .iter()
            .filter(|(kind, _)| *kind == Kind::Service)
            .flat_map(|(_, svc)| self.ingresses_of(svc).map(|i| (Kind::Ingress, i.clone())))
            .collect();
        direct.into_iter().chain(routed).collect()
    }

    /// The Deployments that `rule` follows directly, by name.
    fn followed_by<'a>(&'a self, rule: &Rule) -> Vec<&'a String> {
        let matching = |names: Vec<&'a String>| -> Vec<&'a String> {
            names.into_iter().filter(|n| self.deployments.get(*n).is_some_and(|s| rule.follows(n, s))).collect()
        };
        match rule {
            Rule::Selects(s) => match Rule::pinned(s) {
                Some(pair) => matching(self.by_pod_label.get(&pair).into_iter().flatten().collect()),
                None => matching(self.deployments.keys().collect()),
            },
            Rule::ScaleTarget(t) => self.deployments.get_key_value(t).map(|(n, _)| n).into_iter().collect(),
            Rule::Backends(_) | Rule::Nothing => Vec::new(),
        }
    }

    /// The Deployments that `obj` follows (an Ingress through its Services), by name.
    fn followed(&self, obj: &Obj) -> BTreeSet<&String> {
        match (obj.0.follows(), self.rules.get(obj)) {
            (Follows::Named, _) => self.by_named.get(obj).into_iter().flatten().collect(),
            (Follows::Backends, Some(Rule::Backends(services))) => services
                .iter()
                .filter_map(|svc| self.rules.get(&(Kind::Service, svc.clone())))
                .flat_map(|rule| self.followed_by(rule))
                .collect(),
            (Follows::SelectsPods | Follows::ScaleTarget, Some(rule)) => self.followed_by(rule).into_iter().collect(),
            _ => BTreeSet::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.deployments.is_empty() && self.rules.is_empty()
    }
}

/// Which Deployments each companion follows, per namespace, kept up to date one event
/// at a time: an event costs work in proportion to the objects it concerns, never to
/// its namespace or to the whole control plane (an object whose selector pins no label
/// is the exception: any pod of its namespace may match it).
#[derive(Debug, Default)]
pub struct Index {
    namespaces: HashMap<(String, String), Namespace>,
}

impl Index {
    fn namespace(&mut self, key: &Key) -> &mut Namespace {
        self.namespaces.entry((key.workspace.clone(), key.namespace.clone())).or_default()
    }

    fn get(&self, key: &Key) -> Option<&Namespace> {
        self.namespaces.get(&(key.workspace.clone(), key.namespace.clone()))
    }

    fn forget_if_empty(&mut self, key: &Key) {
        let at = (key.workspace.clone(), key.namespace.clone());
        if self.namespaces.get(&at).is_some_and(Namespace::is_empty) {
            self.namespaces.remove(&at);
        }
    }

    /// Takes in Deployment `key`'s summary after an event (`None`: it is gone), and
    /// returns the objects whose labels may have to change: those it needed before or
    /// needs now. Status writes, finalizers and the like change nothing and return
    /// nothing.
    pub fn update(&mut self, key: &Key, now: Option<Summary>) -> BTreeSet<Key> {
        let ns = self.namespace(key);
        if now.is_some() && ns.deployments.get(&key.name) == now.as_ref() {
            return BTreeSet::new();
        }
        let old = ns.set_deployment(&key.name, now);
        let ns = &*ns;
        let summaries = old.iter().chain(ns.deployments.get(&key.name));
        let touched = summaries
            .flat_map(|s| s.named().into_iter().chain(ns.following(&key.name, s)))
            .map(|(kind, name)| Key::new(kind, &key.workspace, &key.namespace, &name))
            .collect();
        self.forget_if_empty(key);
        touched
    }

    /// Takes in the rule of companion `key` after an event (`None`: it is gone), and
    /// returns the objects whose labels may have to change: itself, and for a Service
    /// the Ingresses that name it.
    pub fn update_rule(&mut self, key: &Key, now: Option<Rule>) -> BTreeSet<Key> {
        let ns = self.namespace(key);
        let obj = (key.kind, key.name.clone());
        let changed = ns.rules.get(&obj) != now.as_ref();
        if changed {
            ns.set_rule(&obj, now);
        }
        let mut touched = BTreeSet::from([key.clone()]);
        if changed && key.kind == Kind::Service {
            touched.extend(ns.ingresses_of(&key.name).map(|i| Key::new(Kind::Ingress, &key.workspace, &key.namespace, i)));
        }
        self.forget_if_empty(key);
        touched
    }

    /// The clusters `object` must be on: the union of the clusters of the Deployments
    /// it follows.
    pub fn wanted(&self, object: &Key) -> BTreeSet<String> {
        let Some(ns) = self.get(object) else { return BTreeSet::new() };
        let followed = ns.followed(&(object.kind, object.name.clone()));
        followed.into_iter().filter_map(|n| ns.deployments.get(n)).flat_map(|s| s.targets.iter().cloned()).collect()
    }

    /// The Deployments of `object`'s namespace that it follows (an Ingress through
    /// its Services), by name.
    pub fn followed(&self, object: &Key) -> BTreeSet<String> {
        let Some(ns) = self.get(object) else { return BTreeSet::new() };
        ns.followed(&(object.kind, object.name.clone())).into_iter().cloned().collect()
    }

    /// What follows Deployment `key`: the objects its template names, and the
    /// companions whose rules follow it.
    pub fn companions_of(&self, key: &Key) -> Vec<Key> {
        let Some(ns) = self.get(key) else { return Vec::new() };
        let Some(summary) = ns.deployments.get(&key.name) else { return Vec::new() };
        let mut out: Vec<Key> = summary
            .named()
            .into_iter()
            .chain(ns.following(&key.name, summary))
            .map(|(kind, name)| Key::new(kind, &key.workspace, &key.namespace, &name))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every object some Deployment names, and every companion with a rule.
    pub fn objects(&self) -> Vec<Key> {
        let mut out = Vec::new();
        for ((ws, namespace), ns) in &self.namespaces {
            let named = ns.by_named.keys();
            out.extend(named.chain(ns.rules.keys()).map(|(kind, name)| Key::new(*kind, ws, namespace, name)));
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The merge patch of `metadata.labels` that gives an object with `labels` exactly the
/// assignment labels of `targets`, or `None` if it has them already. An object without
/// the `referenced` label keeps assignment labels someone else put on it.
pub fn label_patch(labels: Option<&BTreeMap<String, String>>, targets: &BTreeSet<String>) -> Option<Value> {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let managed = labels.contains_key(REFERENCED_LABEL);
    let mut patch = Map::new();
    if managed {
        for k in labels.keys() {
            if sync_target_of_label(k).is_some_and(|t| !targets.contains(t)) {
                patch.insert(k.clone(), Value::Null);
            }
        }
    }
    for t in targets {
        let k = sync_state_label(t);
        if labels.get(&k).map(String::as_str) != Some(SYNC_STATE_SYNC) {
            patch.insert(k, json!(SYNC_STATE_SYNC));
        }
    }
    match (managed, targets.is_empty()) {
        (false, false) => {
            patch.insert(REFERENCED_LABEL.into(), json!("true"));
        }
        (true, true) => {
            patch.insert(REFERENCED_LABEL.into(), Value::Null);
        }
        _ => {}
    }
    (!patch.is_empty()).then(|| json!({"metadata": {"labels": patch}}))
}

struct Controller {
    base: Client,
    /// The workloads of every kind.
    deployments: Arc<Cache<Deployment>>,
    stateful_sets: Arc<Cache<StatefulSet>>,
    daemon_sets: Arc<Cache<DaemonSet>>,
    jobs: Arc<Cache<Job>>,
    /// Per companion kind: the named ones labelled already, and every object of the
    /// other kinds (their rules are read from them).
    companions: HashMap<Kind, Arc<Cache<DynamicObject>>>,
    /// The WorkloadPlacements, whose `status.companions` this controller keeps, under
    /// their Deployments' keys.
    placements: Arc<Cache<WorkloadPlacement>>,
    index: Mutex<Index>,
}

/// The field manager of a WorkloadPlacement's `status.companions`, which this
/// controller writes with merge patches.
pub const FIELD_MANAGER: &str = "flotilla-companions";

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path. Where each companion must be is also published in `followers`, for
/// the push-mode syncers of this process ([`runtime::followers`]).
pub async fn run(base: Client, resync: Duration, followers: Arc<Followers>) {
    // A Deployment event queues the objects it needed or needs; an event on a
    // companion with a rule queues that object (and a Service's Ingresses). Each
    // also queues the Deployments whose lists of companions may change.
    let mut labels = runtime::controller::Controller::<Key>::new("companion-labels").concurrency(LABELLERS);
    let mut lists = runtime::controller::Controller::<Key>::new("companion-lists").concurrency(2);
    let (tx, mut rx) = mpsc::unbounded_channel::<Key>();
    let wildcard = clients::workspace(&base, "*");
    let all = watcher::Config::default();
    let referenced = watcher::Config::default().labels(REFERENCED_LABEL);
    let companions = Kind::companions()
        .map(|kind| {
            let config = if kind.follows() == Follows::Named { referenced.clone() } else { all.clone() };
            let api = Api::all_with(wildcard.clone(), &kind.api_resource());
            (kind, cache::spawn(api, config, kind, Key::upstream, tx.clone(), kind.row().plural))
        })
        .collect();
    // A WorkloadPlacement's changes come as its Deployment's key, on a channel of
    // their own: they only refresh its list.
    let (placements_tx, placements_rx) = mpsc::unbounded_channel::<Key>();
    let c = Arc::new(Controller {
        deployments: cache::spawn(Api::all(wildcard.clone()), all.clone(), Kind::Deployment, Key::upstream, tx.clone(), "deployments"),
        stateful_sets: cache::spawn(Api::all(wildcard.clone()), all.clone(), Kind::StatefulSet, Key::upstream, tx.clone(), "statefulsets"),
        daemon_sets: cache::spawn(Api::all(wildcard.clone()), all.clone(), Kind::DaemonSet, Key::upstream, tx.clone(), "daemonsets"),
        jobs: cache::spawn(Api::all(wildcard.clone()), all.clone(), Kind::Job, Key::upstream, tx.clone(), "jobs"),
        placements: cache::spawn(Api::all(wildcard.clone()), all, Kind::Deployment, Key::upstream, placements_tx, "workloadplacements"),
        companions,
        index: Mutex::default(),
        base,
    });
    followers.attach(c.companions.clone());
    {
        let (objects_tx, lists_tx, c) = (labels.trigger(), lists.trigger(), c.clone());
        let followers = followers.clone();
        labels.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                // What is published is complete once every cache has listed and
                // this task has taken in all that their lists queued.
                let k = tokio::select! {
                    k = rx.recv() => match k { Some(k) => k, None => return },
                    _ = tick.tick(), if !followers.synced() => {
                        if c.synced() && rx.is_empty() {
                            followers.set_synced();
                        }
                        continue;
                    }
                };
                let deployment = |name: &String| Key::new(Kind::Deployment, &k.workspace, &k.namespace, name);
                let (touched, lists): (BTreeSet<Key>, Vec<Key>) = match k.kind.follows() {
                    Follows::Scheduled => {
                        // The index knows workloads by name, as WorkloadPlacements do.
                        let k = k.with_kind(Kind::Deployment);
                        let now = c.summary(&k);
                        let touched = c.index().update(&k, now);
                        let lists = if touched.is_empty() { vec![] } else { vec![k.clone()] };
                        (touched, lists)
                    }
                    Follows::Named => {
                        let lists = c.index().followed(&k).iter().map(deployment).collect();
                        (BTreeSet::from([k.clone()]), lists)
                    }
                    Follows::Never => (BTreeSet::new(), vec![]),
                    _ => {
                        let now = c.companions.get(&k.kind).and_then(|cache| cache.get(&k)).and_then(|o| Rule::of(k.kind, &o.data));
                        let mut index = c.index();
                        let mut followed = index.followed(&k);
                        let touched = index.update_rule(&k, now);
                        // An Ingress naming a changed Service changes lists too.
                        for t in &touched {
                            followed.extend(index.followed(t));
                        }
                        (touched, followed.iter().map(deployment).collect())
                    }
                };
                {
                    let index = c.index();
                    for o in &touched {
                        followers.publish(o, index.wanted(o), *o == k);
                    }
                }
                for o in touched {
                    if objects_tx.send(o).is_err() {
                        return;
                    }
                }
                for d in lists {
                    let _ = lists_tx.send(d);
                }
            }
        });
    }
    lists.fan_in(placements_rx, |k| [k]);
    let c2 = c.clone();
    labels.resync(resync, move || {
        let known = c2.index().objects();
        let labelled = c2.companions.values().flat_map(|cache| cache.entries_where(|_, o| labelled(o)));
        known.into_iter().chain(labelled).collect::<BTreeSet<_>>()
    });
    let labelling = labels.run(|object| {
        let c = c.clone();
        async move { c.reconcile(&object).await }
    });
    let listing = lists.run(|deployment| {
        let c = c.clone();
        async move { c.refresh_list(&deployment).await }
    });
    tokio::join!(labelling, listing);
}

/// Whether this controller manages `o`'s assignment labels.
fn labelled(o: &DynamicObject) -> bool {
    o.metadata.labels.as_ref().is_some_and(|l| l.contains_key(REFERENCED_LABEL))
}

impl Controller {
    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn synced(&self) -> bool {
        self.deployments.synced()
            && self.stateful_sets.synced()
            && self.daemon_sets.synced()
            && self.jobs.synced()
            && self.companions.values().all(|c| c.synced())
    }

    /// The summary of the workload named by `key`, of whichever kind: the one that
    /// is assigned, when another kind has the same name (only one of them is placed,
    /// since a WorkloadPlacement has its workload's name).
    fn summary(&self, key: &Key) -> Option<Summary> {
        let at = |kind: Kind| key.with_kind(kind);
        let all = [
            self.deployments.get(&at(Kind::Deployment)).map(|w| Summary::of(&*w)),
            self.stateful_sets.get(&at(Kind::StatefulSet)).map(|w| Summary::of(&*w)),
            self.daemon_sets.get(&at(Kind::DaemonSet)).map(|w| Summary::of(&*w)),
            self.jobs.get(&at(Kind::Job)).map(|w| Summary::of(&*w)),
        ];
        let mut found = all.into_iter().flatten();
        let first = found.next()?;
        if !first.targets.is_empty() {
            return Some(first);
        }
        Some(found.find(|s| !s.targets.is_empty()).unwrap_or(first))
    }

    fn api(&self, key: &Key) -> Api<DynamicObject> {
        Api::namespaced_with(clients::workspace(&self.base, &key.workspace), &key.namespace, &key.kind.api_resource())
    }

    async fn reconcile(&self, key: &Key) -> Result<Next, Failed> {
        if !self.synced() {
            return Ok(Next::After(MISSING_RETRY));
        }
        let targets = self.index().wanted(key);
        // A named object that does not exist (yet) is looked for again while something
        // needs it; one with a rule comes back with its own events.
        let missing = || if targets.is_empty() || key.kind.follows() != Follows::Named { Next::Done } else { Next::After(MISSING_RETRY) };
        let Some(labels) = self.labels(key).await? else { return Ok(missing()) };
        let Some(patch) = label_patch(labels.as_ref(), &targets) else { return Ok(Next::Done) };
        match self.api(key).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => tracing::debug!(clusters = ?targets, "labelled"),
            Err(e) if is_not_found(&e) => return Ok(missing()),
            Err(e) => return Err(failed(format!("labelling {key}"))(e)),
        }
        Ok(Next::Done)
    }

    /// Keeps `status.companions` of Deployment `key`'s WorkloadPlacement: what follows
    /// it and exists (a named object that does not exist yet is not listed).
    async fn refresh_list(&self, key: &Key) -> Result<Next, Failed> {
        if !self.synced() || !self.placements.synced() {
            return Ok(Next::After(MISSING_RETRY));
        }
        let Some(wp) = self.placements.get(key) else { return Ok(Next::Done) };
        let companions = self.index().companions_of(key);
        let exists = |k: &Key| self.companions.get(&k.kind).is_some_and(|c| c.get(k).is_some());
        let list: Vec<String> = companions.iter().filter(|k| exists(k)).map(|k| format!("{}/{}", k.kind.name(), k.name)).collect();
        let mut list = list;
        list.sort();
        if wp.status.as_ref().map(|s| &s.companions) == Some(&list) || (wp.status.is_none() && list.is_empty()) {
            return Ok(Next::Done);
        }
        let api: Api<WorkloadPlacement> = Api::namespaced(clients::workspace(&self.base, &key.workspace), &key.namespace);
        // A merge patch replaces the list whole, so it reads in order; the field is
        // this controller's alone.
        let companions = if list.is_empty() { Value::Null } else { json!(list) };
        let patch = json!({"status": {"companions": companions}});
        let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match api.patch_status(&key.name, &pp, &Patch::Merge(patch)).await {
            Ok(_) => tracing::debug!(companions = list.len(), "listed"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(failed(format!("listing the companions of {key}"))(e)),
        }
        Ok(Next::Done)
    }

    /// The labels of a companion: from the cache if it is there, else read; `None`
    /// if it does not exist.
    async fn labels(&self, key: &Key) -> Result<Option<Option<BTreeMap<String, String>>>, Failed> {
        let cache = self.companions.get(&key.kind);
        if let Some(o) = cache.and_then(|c| c.get(key)) {
            return Ok(Some(o.metadata.labels.clone()));
        }
        if key.kind.follows() != Follows::Named {
            // The cache holds every object of these kinds.
            return Ok(None);
        }
        let read = self.api(key).get_metadata_opt(&key.name).await;
        read.map(|o| o.map(|o| o.metadata.labels)).map_err(failed(format!("reading {key}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(labels: &[(&str, &str)], config_map: &str, secret: &str) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>()},
            "spec": {"selector": {}, "template": {"spec": {
                "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": config_map}}]}],
                "volumes": [{"name": "s", "secret": {"secretName": secret}}]}}}
        }))
        .unwrap()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn key(kind: Kind, name: &str) -> Key {
        Key::new(kind, "ws", "default", name)
    }

    #[test]
    fn a_referenced_object_goes_to_every_cluster_of_every_referrer() {
        let a = deployment(&[("state.workload.flotilla.io/east", "Sync"), ("app", "a")], "shared", "a-secret");
        let b = deployment(&[("state.workload.flotilla.io/west", "Sync")], "shared", "b-secret");
        let unassigned = deployment(&[("app", "c")], "lonely", "lonely");
        let pending = deployment(&[("state.workload.flotilla.io/north", "Pending")], "p", "p");
        let mut index = Index::default();
        for (name, d) in [("a", &a), ("b", &b), ("c", &unassigned), ("p", &pending)] {
            index.update(&key(Kind::Deployment, name), Some(Summary::of(d)));
        }
        assert_eq!(index.wanted(&key(Kind::ConfigMap, "shared")), set(&["east", "west"]));
        assert_eq!(index.wanted(&key(Kind::Secret, "a-secret")), set(&["east"]));
        assert_eq!(index.wanted(&key(Kind::Secret, "b-secret")), set(&["west"]));
        assert_eq!(index.wanted(&key(Kind::ConfigMap, "lonely")), set(&[]), "an unassigned referrer wants nothing");
        assert_eq!(index.wanted(&key(Kind::Secret, "p")), set(&[]), "nor does one only Pending somewhere");
        assert_eq!(index.wanted(&key(Kind::Secret, "shared")), set(&[]), "a ConfigMap's name says nothing of a Secret");
        // One referrer goes: the shared ConfigMap follows the other alone.
        let touched = index.update(&key(Kind::Deployment, "a"), None);
        assert_eq!(touched, BTreeSet::from([key(Kind::ConfigMap, "shared"), key(Kind::Secret, "a-secret")]));
        assert_eq!(index.wanted(&key(Kind::ConfigMap, "shared")), set(&["west"]));
        assert_eq!(index.wanted(&key(Kind::Secret, "a-secret")), set(&[]));
        assert!(!index.objects().contains(&key(Kind::Secret, "a-secret")), "an object no one references is forgotten");
    }

    #[test]
    fn only_events_that_change_assignment_or_references_count() {
        let mut index = Index::default();
        let d = key(Kind::Deployment, "d");
        let (cfg, sec) = (key(Kind::ConfigMap, "cfg"), key(Kind::Secret, "sec"));
        let east = deployment(&[("state.workload.flotilla.io/east", "Sync")], "cfg", "sec");
        assert_eq!(index.update(&d, Some(Summary::of(&east))), BTreeSet::from([cfg.clone(), sec.clone()]), "first sight");
        let mut status_only = east.clone();
        status_only.metadata.finalizers = Some(vec!["workload.flotilla.io/syncer-east".into()]);
        status_only.status = Some(Default::default());
        assert!(index.update(&d, Some(Summary::of(&status_only))).is_empty(), "a finalizer and a status change nothing");
        let moved = deployment(&[("state.workload.flotilla.io/west", "Sync")], "cfg", "sec");
        assert_eq!(index.update(&d, Some(Summary::of(&moved))), BTreeSet::from([cfg.clone(), sec.clone()]), "reassigned");
        let other = deployment(&[("state.workload.flotilla.io/west", "Sync")], "cfg2", "sec");
        let cfg2 = key(Kind::ConfigMap, "cfg2");
        assert_eq!(
            index.update(&d, Some(Summary::of(&other))),
            BTreeSet::from([cfg.clone(), cfg2.clone(), sec.clone()]),
            "another ConfigMap"
        );
        assert_eq!(index.update(&d, None), BTreeSet::from([cfg2, sec]), "gone");
        assert!(index.objects().is_empty() && index.namespaces.is_empty(), "nothing is kept of an empty namespace");
    }

    fn app(name: &str, targets: &[&str], pod_labels: &[(&str, &str)], account: Option<&str>) -> (Key, Summary) {
        let labels: Map<String, Value> = targets.iter().map(|t| (sync_state_label(t), json!("Sync"))).collect();
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": {}, "template": {
                "metadata": {"labels": pod_labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>()},
                "spec": {"containers": [{"name": "c"}], "serviceAccountName": account}}}
        }))
        .unwrap();
        (key(Kind::Deployment, name), Summary::of(&d))
    }

    fn rule(index: &mut Index, kind: Kind, name: &str, o: Value) -> (Key, BTreeSet<Key>) {
        let k = key(kind, name);
        let touched = index.update_rule(&k, Rule::of(kind, &o));
        (k, touched)
    }

    #[test]
    fn companions_follow_by_selector_backend_scale_target_and_account() {
        let mut index = Index::default();
        let (web, w) = app("web", &["east"], &[("app", "web"), ("tier", "front")], Some("runner"));
        let (api, a) = app("api", &["west"], &[("app", "api"), ("tier", "front")], None);
        index.update(&web, Some(w));
        index.update(&api, Some(a));
        let (svc, _) = rule(&mut index, Kind::Service, "web", json!({"spec": {"selector": {"app": "web"}}}));
        let (front, _) = rule(&mut index, Kind::Service, "front", json!({"spec": {"selector": {"tier": "front"}}}));
        let (bare, _) = rule(&mut index, Kind::Service, "bare", json!({"spec": {"ports": [{"port": 80}]}}));
        let (ext, _) = rule(&mut index, Kind::Service, "ext", json!({"spec": {"type": "ExternalName", "selector": {"app": "web"}}}));
        let (ing, _) = rule(
            &mut index,
            Kind::Ingress,
            "ing",
            json!({"spec": {"rules": [{"http": {"paths": [{"backend": {"service": {"name": "web"}}}]}}]}}),
        );
        let (deflt, _) = rule(&mut index, Kind::Ingress, "default", json!({"spec": {"defaultBackend": {"service": {"name": "front"}}}}));
        let (pdb, _) = rule(&mut index, Kind::PodDisruptionBudget, "pdb", json!({"spec": {"selector": {"matchLabels": {"app": "api"}}}}));
        let (all, _) = rule(&mut index, Kind::NetworkPolicy, "all", json!({"spec": {"podSelector": {}}}));
        let (hpa, _) = rule(
            &mut index,
            Kind::HorizontalPodAutoscaler,
            "hpa",
            json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}}),
        );
        let (rs_hpa, _) = rule(
            &mut index,
            Kind::HorizontalPodAutoscaler,
            "rs",
            json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"}}}),
        );
        let account = key(Kind::ServiceAccount, "runner");
        let names = |keys: Vec<Key>| keys.iter().map(|k| format!("{}/{}", k.kind.name(), k.name)).collect::<Vec<_>>();
        assert_eq!(
            names(index.companions_of(&web)),
            [
                "ServiceAccount/runner",
                "Service/front",
                "Service/web",
                "Ingress/default",
                "Ingress/ing",
                "NetworkPolicy/all",
                "HorizontalPodAutoscaler/hpa"
            ]
        );
        assert_eq!(index.followed(&deflt), set(&["api", "web"]), "through the Service it names");
        assert_eq!(index.followed(&account), set(&["web"]));
        assert_eq!(index.followed(&bare), set(&[]));
        for (k, want) in [
            (&svc, &["east"][..]),
            (&front, &["east", "west"]),
            (&bare, &[]),
            (&ext, &[]),
            (&ing, &["east"]),
            (&deflt, &["east", "west"]),
            (&pdb, &["west"]),
            (&all, &["east", "west"]),
            (&hpa, &["east"]),
            (&rs_hpa, &[]),
            (&account, &["east"]),
        ] {
            assert_eq!(index.wanted(k), set(want), "{k}");
        }

        // web's pods change their labels: its Service, and the Ingress through it, are
        // touched and no longer follow it.
        let (_, relabelled) = app("web", &["east"], &[("app", "web2"), ("tier", "front")], Some("runner"));
        let touched = index.update(&web, Some(relabelled));
        for k in [&svc, &front, &ing, &deflt, &all, &hpa, &account] {
            assert!(touched.contains(k), "{k} not in {touched:?}");
        }
        assert!(!touched.contains(&pdb), "api's budget has nothing to do with web: {touched:?}");
        assert_eq!(index.wanted(&svc), set(&[]));
        assert_eq!(index.wanted(&ing), set(&[]));
        assert_eq!(index.wanted(&hpa), set(&["east"]), "the scale target is by name");

        // The Service's selector is edited: the Ingress naming it is touched too.
        let (_, touched) = rule(&mut index, Kind::Service, "web", json!({"spec": {"selector": {"app": "web2"}}}));
        assert_eq!(touched, BTreeSet::from([svc.clone(), ing.clone()]));
        assert_eq!(index.wanted(&ing), set(&["east"]));
        // An unchanged Service touches only itself.
        let (_, touched) = rule(&mut index, Kind::Service, "web", json!({"spec": {"selector": {"app": "web2"}}}));
        assert_eq!(touched, BTreeSet::from([svc.clone()]));
        // Deleted, the Ingress loses its clusters.
        index.update_rule(&svc, None);
        assert_eq!(index.wanted(&ing), set(&[]));
    }

    /// The index against the rules read the slow way, over a random series of
    /// events in one namespace: after each, every object's clusters are what a scan of
    /// every Deployment gives, every Deployment's companions are those that follow it,
    /// and every object whose clusters changed was among those the event returned.
    #[test]
    fn the_index_agrees_with_a_scan_of_the_namespace_after_every_event() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let values = ["a", "b", "c"];
        let selector = |r: usize, v: usize, w: usize| match r {
            0 => json!({}),
            1 => json!({"matchLabels": {"app": values[v]}}),
            2 => json!({"matchLabels": {"app": values[v], "tier": values[w]}}),
            3 => json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": [values[v], values[w]]}]}),
            _ => {
                json!({"matchLabels": {"tier": values[v]}, "matchExpressions": [{"key": "app", "operator": "NotIn", "values": [values[w]]}]})
            }
        };
        let names = ["d0", "d1", "d2", "d3"];
        let objects: Vec<Key> = [
            (Kind::Service, "s0"),
            (Kind::Service, "s1"),
            (Kind::NetworkPolicy, "n0"),
            (Kind::PodDisruptionBudget, "p0"),
            (Kind::HorizontalPodAutoscaler, "h0"),
            (Kind::Ingress, "i0"),
            (Kind::Ingress, "i1"),
            (Kind::ServiceAccount, "a0"),
            (Kind::ConfigMap, "c0"),
        ]
        .iter()
        .map(|(k, n)| key(*k, n))
        .collect();
        let mut index = Index::default();
        let mut deployments: BTreeMap<String, Summary> = BTreeMap::new();
        let mut rules: BTreeMap<Key, Rule> = BTreeMap::new();
        let follows = |deployments: &BTreeMap<String, Summary>, rules: &BTreeMap<Key, Rule>, o: &Key, name: &str| {
            let s = &deployments[name];
            match (o.kind.follows(), rules.get(o)) {
                (Follows::Named, _) => s.references.as_ref().is_some_and(|r| r.names(o.kind, &o.name)),
                (Follows::Backends, Some(Rule::Backends(services))) => {
                    services.iter().any(|svc| rules.get(&key(Kind::Service, svc)).is_some_and(|r| r.follows(name, s)))
                }
                (_, Some(rule)) => rule.follows(name, s),
                _ => false,
            }
        };
        let scan = |deployments: &BTreeMap<String, Summary>, rules: &BTreeMap<Key, Rule>, o: &Key| -> BTreeSet<String> {
            deployments.iter().filter(|(n, _)| follows(deployments, rules, o, n)).flat_map(|(_, s)| s.targets.clone()).collect()
        };
        let mut wanted: BTreeMap<Key, BTreeSet<String>> = objects.iter().map(|o| (o.clone(), BTreeSet::new())).collect();
        for step in 0..3_000 {
            let touched = match next(3) {
                0 => {
                    let name = names[next(names.len())];
                    let targets: Vec<&str> = ["east", "west"].into_iter().filter(|_| next(2) == 0).collect();
                    let labels = [("app", values[next(3)]), ("tier", values[next(3)])];
                    let account = ["a0", "other"][next(2)];
                    let (k, s) = app(name, &targets, &labels[..1 + next(2)], Some(account).filter(|_| next(3) > 0));
                    let s = if next(2) == 0 {
                        let with_config: Deployment = deployment(&[], "c0", "x");
                        Summary { references: Summary::of(&with_config).references, ..s }
                    } else {
                        s
                    };
                    deployments.insert(name.to_string(), s.clone());
                    index.update(&k, Some(s))
                }
                1 => {
                    let name = names[next(names.len())];
                    deployments.remove(name);
                    index.update(&key(Kind::Deployment, name), None)
                }
                _ => {
                    let o = objects[next(objects.len() - 2)].clone();
                    let (r, v, w) = (next(5), next(3), next(3));
                    let body = match o.kind {
                        Kind::Service => json!({"spec": {"selector": selector(1 + next(2), v, w)["matchLabels"]}}),
                        Kind::NetworkPolicy => json!({"spec": {"podSelector": selector(r, v, w)}}),
                        Kind::HorizontalPodAutoscaler => {
                            json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": names[v]}}})
                        }
                        Kind::Ingress => {
                            let service = ["s0", "s1", "s9"][v];
                            json!({"spec": {"defaultBackend": {"service": {"name": service}}}})
                        }
                        _ => json!({"spec": {"selector": selector(r, v, w)}}),
                    };
                    let rule = (next(5) > 0).then(|| Rule::of(o.kind, &body).unwrap());
                    match &rule {
                        Some(r) => rules.insert(o.clone(), r.clone()),
                        None => rules.remove(&o),
                    };
                    index.update_rule(&o, rule)
                }
            };
            for o in &objects {
                let now = scan(&deployments, &rules, o);
                assert_eq!(index.wanted(o), now, "step {step}: the clusters of {o}");
                if wanted[o] != now {
                    assert!(touched.contains(o), "step {step}: {o} moved from {:?} to {now:?}, but was not returned", wanted[o]);
                }
                wanted.insert(o.clone(), now);
            }
            for name in deployments.keys() {
                let mut expected: Vec<Key> = objects.iter().filter(|o| follows(&deployments, &rules, o, name)).cloned().collect();
                expected.sort();
                let found: Vec<Key> =
                    index.companions_of(&key(Kind::Deployment, name)).into_iter().filter(|k| objects.contains(k)).collect();
                assert_eq!(found, expected, "step {step}: the companions of {name}");
            }
        }
        for name in names {
            index.update(&key(Kind::Deployment, name), None);
        }
        for o in &objects {
            index.update_rule(o, None);
        }
        assert!(index.namespaces.is_empty(), "every index entry goes with its object: {:?}", index.namespaces);
    }

    #[test]
    fn labels_are_added_moved_and_removed_but_only_managed_ones_are_taken() {
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>();
        // A fresh object gets the clusters' labels and the marker.
        assert_eq!(
            label_patch(Some(&labels(&[("app", "x")])), &set(&["east"])),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": "Sync", REFERENCED_LABEL: "true"}}}))
        );
        // A managed object moves from east to west.
        let managed = labels(&[(REFERENCED_LABEL, "true"), ("state.workload.flotilla.io/east", "Sync")]);
        assert_eq!(
            label_patch(Some(&managed), &set(&["west"])),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": null, "state.workload.flotilla.io/west": "Sync"}}}))
        );
        // Nothing to do when it is right.
        assert_eq!(label_patch(Some(&managed), &set(&["east"])), None);
        // No referrer left: both labels go.
        assert_eq!(
            label_patch(Some(&managed), &BTreeSet::new()),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": null, REFERENCED_LABEL: null}}}))
        );
        // Someone else's assignment label on an unmanaged object stays.
        let theirs = labels(&[("state.workload.flotilla.io/north", "Sync")]);
        assert_eq!(label_patch(Some(&theirs), &BTreeSet::new()), None);
        assert_eq!(
            label_patch(Some(&theirs), &set(&["east"])),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": "Sync", REFERENCED_LABEL: "true"}}}))
        );
        assert_eq!(label_patch(None, &BTreeSet::new()), None);
    }
}
