//! Table tests of the cronjob controller's rule.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};

use super::*;

/// 2023-11-14T22:13:20Z plus `s` seconds: the first minute is 40 s away.
fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

/// The Unix minute of `t(s)`, as a Job's name says it.
fn minute(s: i64) -> i64 {
    t(s).as_second() / 60
}

/// A CronJob `hello` in `default`, created at `t(0)`, running every minute.
struct Cj(CronJob);

fn hello() -> Cj {
    Cj(serde_yaml::from_str(
        "metadata: {name: hello, namespace: default, uid: uid-hello, creationTimestamp: '2023-11-14T22:13:20Z'}
spec:
  schedule: '* * * * *'
  jobTemplate:
    metadata: {labels: {app: hello}}
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: hello, image: busybox:1.28}]
",
    )
    .unwrap())
}

impl Cj {
    fn spec(mut self, f: impl FnOnce(&mut CronJobSpec)) -> Self {
        f(self.0.spec.as_mut().unwrap());
        self
    }
    fn schedule(self, s: &str) -> Self {
        self.spec(|spec| spec.schedule = s.into())
    }
    fn policy(self, p: &str) -> Self {
        self.spec(|spec| spec.concurrency_policy = Some(p.into()))
    }
    fn last_scheduled(mut self, s: i64) -> Self {
        self.0.status.get_or_insert_with(Default::default).last_schedule_time = Some(Time(t(s)));
        self
    }
    fn status(mut self, status: CronJobStatus) -> Self {
        self.0.status = Some(status);
        self
    }
    fn annotate(mut self, k: &str, v: &str) -> Self {
        self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    fn annotate_template(self, k: &str, v: &str) -> Self {
        self.spec(|spec| {
            let meta = spec.job_template.metadata.get_or_insert_with(Default::default);
            meta.annotations.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        })
    }
    fn uid_less(mut self) -> Self {
        self.0.metadata.uid = None;
        self
    }
    fn plan(&self, jobs: &[Job], now: Timestamp) -> Plan {
        plan(&self.0, &jobs.iter().collect::<Vec<_>>(), now)
    }
}

/// One of hello's Jobs, started at `t(started)`: running until [`J::complete`] or
/// [`J::failed`].
struct J(Job);

fn job(name: &str, started: i64) -> J {
    J(Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(JobSpec::default()),
        status: Some(JobStatus { start_time: Some(Time(t(started))), ..Default::default() }),
    })
}

impl J {
    fn condition(mut self, type_: &str) -> Self {
        let condition = JobCondition { type_: type_.into(), status: "True".into(), ..Default::default() };
        self.0.status.as_mut().unwrap().conditions.get_or_insert_with(Vec::new).push(condition);
        self
    }
    fn complete(mut self, at: i64) -> Job {
        self.0.status.as_mut().unwrap().completion_time = Some(Time(t(at)));
        self.condition("Complete").0
    }
    fn failed(self) -> Job {
        self.condition("Failed").0
    }
    fn running(self) -> Job {
        self.0
    }
}

fn created_name(plan: &Plan) -> Option<&str> {
    plan.create.as_ref().and_then(|j| j.metadata.name.as_deref())
}

fn active_names(plan: &Plan) -> Vec<String> {
    plan.status.as_ref().and_then(|s| s.active.clone()).into_iter().flatten().filter_map(|r| r.name).collect()
}

#[test]
fn a_due_time_creates_the_job_named_for_its_minute_owned_by_the_cronjob() {
    let plan = hello().plan(&[], t(40));
    let job = plan.create.as_ref().expect("a Job at 22:14");
    assert_eq!(job.metadata.name.as_deref(), Some("hello-28333334"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(job.metadata.labels.as_ref().unwrap()["app"], "hello");
    assert_eq!(job.metadata.annotations.as_ref().unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION], "2023-11-14T22:14:00Z");
    let owner = OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: "hello".into(),
        uid: "uid-hello".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    assert_eq!(job.metadata.owner_references.as_deref(), Some(&[owner][..]));
    assert_eq!(job.spec, hello().0.spec.unwrap().job_template.spec, "the template's spec, as it is");
    assert_eq!(job.metadata.uid, None);
    assert_eq!(plan.events, [("SuccessfulCreate", "Created job hello-28333334".to_string())]);
    assert!(plan.delete.is_empty());
    // The new Job is not among `jobs` yet: it is listed as active once it is.
    let status = plan.status.as_ref().unwrap();
    assert_eq!(status.last_schedule_time, Some(Time(t(40))));
    assert_eq!(status.active, None);
}

#[test]
fn which_time_runs() {
    let every_minute = hello;
    let cases: &[(&str, Cj, i64, Option<i64>)] = &[
        ("before the first time, nothing", every_minute(), 39, None),
        ("at the first time", every_minute(), 40, Some(40)),
        ("missed times run only the latest", every_minute().last_scheduled(40), 40 + 5 * 60 + 10, Some(40 + 5 * 60)),
        ("of at most 100 missed times", every_minute().last_scheduled(40), 40 + 500 * 60, Some(40 + MAX_MISSED as i64 * 60)),
        ("the time already scheduled does not run again", every_minute().last_scheduled(40), 99, None),
        ("within startingDeadlineSeconds", every_minute().spec(|s| s.starting_deadline_seconds = Some(10)), 50, Some(40)),
        ("past startingDeadlineSeconds, nothing", every_minute().spec(|s| s.starting_deadline_seconds = Some(10)), 51, None),
        ("suspended, nothing", every_minute().spec(|s| s.suspend = Some(true)), 40, None),
    ];
    for (what, cj, now, want) in cases {
        let plan = cj.plan(&[], t(*now));
        let want_name = want.map(|s| format!("hello-{}", minute(s)));
        assert_eq!(created_name(&plan), want_name.as_deref(), "{what}");
        let scheduled = plan.create.as_ref().map(|j| j.metadata.annotations.as_ref().unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION].clone());
        assert_eq!(scheduled, want.map(|s| t(s).to_string()), "{what}");
        if want.is_none() {
            assert!(plan.events.is_empty() && plan.delete.is_empty(), "{what}");
        }
    }
}

#[test]
fn a_cronjob_being_deleted_not_stored_or_unparsable_gets_an_empty_plan() {
    let mut deleting = hello();
    deleting.0.metadata.deletion_timestamp = Some(Time(t(1)));
    assert_eq!(deleting.plan(&[job("hello-1", 0).running()], t(40)), Plan::default());
    assert_eq!(hello().uid_less().plan(&[], t(40)), Plan::default());
    assert_eq!(hello().schedule("61 * * * *").plan(&[], t(40)), Plan::default());
}

#[test]
fn concurrency_policy_decides_what_a_running_job_does_to_a_due_time() {
    struct Case {
        policy: &'static str,
        created: bool,
        replaced: &'static [&'static str],
        events: &'static [(&'static str, &'static str)],
        active: &'static [&'static str],
    }
    const CREATED: (&str, &str) = ("SuccessfulCreate", "Created job hello-28333334");
    let cases = [
        Case { policy: "Allow", created: true, replaced: &[], events: &[CREATED], active: &["hello-old"] },
        Case { policy: "Forbid", created: false, replaced: &[], events: &[], active: &["hello-old"] },
        Case {
            policy: "Replace",
            created: true,
            replaced: &["hello-old"],
            events: &[("SuccessfulDelete", "Deleted job hello-old"), CREATED],
            active: &[],
        },
    ];
    for case in cases {
        let policy = case.policy;
        let plan = hello().policy(policy).plan(&[job("hello-old", 0).running()], t(40));
        assert_eq!(plan.create.is_some(), case.created, "{policy}");
        let want: Vec<(String, DeleteReason)> = case.replaced.iter().map(|n| (n.to_string(), DeleteReason::Replaced)).collect();
        assert_eq!(plan.delete, want, "{policy}");
        let want: Vec<(&str, String)> = case.events.iter().map(|(r, m)| (*r, m.to_string())).collect();
        assert_eq!(plan.events, want, "{policy}");
        assert_eq!(active_names(&plan), case.active, "{policy}");
        let last = plan.status.as_ref().and_then(|s| s.last_schedule_time.clone());
        assert_eq!(last, case.created.then(|| Time(t(40))), "{policy}: only a Job made moves lastScheduleTime");
    }
}

#[test]
fn forbid_runs_the_held_back_time_late_once_the_running_job_ends() {
    let cj = hello().policy("Forbid").last_scheduled(40);
    let first = "hello-28333334";
    assert_eq!(created_name(&cj.plan(&[job(first, 40).running()], t(110))), None);
    let plan = cj.plan(&[job(first, 40).complete(105)], t(110));
    assert_eq!(created_name(&plan), Some("hello-28333335"), "the 22:15 time, 10 s late");
}

#[test]
fn a_job_of_that_name_already_there_is_not_made_again() {
    // The status write that says the time was scheduled was lost.
    let plan = hello().plan(&[job("hello-28333334", 40).running()], t(45));
    assert_eq!(plan.create, None);
    assert!(plan.events.is_empty());
    assert_eq!(active_names(&plan), ["hello-28333334"]);
}

#[test]
fn finished_jobs_beyond_the_history_limits_are_deleted_oldest_first() {
    let ok = |n: i64| job(&format!("hello-ok{n}"), n).complete(n + 1);
    let failed = |n: i64| job(&format!("hello-bad{n}"), n).failed();
    // Listed newest first: the order of `jobs` does not matter.
    let jobs = [ok(50), failed(45), ok(40), ok(30), failed(25), ok(20), failed(15), ok(10), job("hello-now", 60).running()];
    let all_ok = ["hello-ok10", "hello-ok20", "hello-ok30", "hello-ok40", "hello-ok50"];
    // The defaults keep 3 succeeded and 1 failed: succeeded ones go first, then failed.
    let cases: &[(Option<i32>, Option<i32>, &[&str])] = &[
        (None, None, &["hello-ok10", "hello-ok20", "hello-bad15", "hello-bad25"]),
        (Some(0), Some(3), &all_ok),
        (Some(5), Some(0), &["hello-bad15", "hello-bad25", "hello-bad45"]),
        (Some(-1), Some(10), &all_ok),
    ];
    for (successful, failed_limit, want) in cases {
        let cj = hello().last_scheduled(60).spec(|s| {
            s.successful_jobs_history_limit = *successful;
            s.failed_jobs_history_limit = *failed_limit;
        });
        let plan = cj.plan(&jobs, t(61));
        let want: Vec<(String, DeleteReason)> = want.iter().map(|n| (n.to_string(), DeleteReason::History)).collect();
        assert_eq!(plan.delete, want, "limits {successful:?} / {failed_limit:?}");
        assert!(plan.events.is_empty(), "no Event for a history delete");
    }
    // Replace's deletes come before the history's.
    let plan = hello().policy("Replace").last_scheduled(60).plan(&jobs, t(100));
    let first = plan.delete.first().cloned();
    assert_eq!(first, Some(("hello-now".to_string(), DeleteReason::Replaced)));
    assert_eq!(plan.delete.len(), 5);
}

#[test]
fn status_lists_running_jobs_and_the_last_success_and_is_none_when_unchanged() {
    let jobs =
        [job("hello-a", 10).complete(20), job("hello-b", 30).complete(35), job("hello-c", 40).failed(), job("hello-d", 50).running()];
    let plan = hello().last_scheduled(50).plan(&jobs, t(55));
    let status = plan.status.clone().expect("a new status");
    let active = ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: Some("hello-d".into()),
        namespace: Some("default".into()),
        uid: Some("uid-hello-d".into()),
        ..Default::default()
    };
    assert_eq!(
        status,
        CronJobStatus { active: Some(vec![active]), last_schedule_time: Some(Time(t(50))), last_successful_time: Some(Time(t(35))) }
    );
    // Stored as it is: nothing to write.
    assert_eq!(hello().status(status).plan(&jobs, t(56)).status, None);
    // A stored success later than any Job kept stays, with no Job completed.
    let kept = hello().status(CronJobStatus { last_successful_time: Some(Time(t(5))), ..Default::default() });
    assert_eq!(kept.plan(&[], t(39)).status, None);
}

#[test]
fn the_cronjobs_placement_goes_with_its_jobs_unless_the_template_names_one() {
    let cases: &[(Cj, Option<&str>)] = &[
        (hello(), None),
        (hello().annotate(PLACEMENT_ANNOTATION, "eu"), Some("eu")),
        (hello().annotate(PLACEMENT_ANNOTATION, "eu").annotate_template(PLACEMENT_ANNOTATION, "us"), Some("us")),
        (hello().annotate_template(PLACEMENT_ANNOTATION, "us"), Some("us")),
    ];
    for (cj, want) in cases {
        let plan = cj.plan(&[], t(40));
        let annotations = plan.create.unwrap().metadata.annotations.unwrap();
        assert_eq!(annotations.get(PLACEMENT_ANNOTATION).map(String::as_str), *want);
        assert!(annotations.contains_key(SCHEDULED_TIMESTAMP_ANNOTATION));
    }
    // The template's other annotations are kept; the CronJob's others are not copied.
    let cj = hello().annotate("team", "web").annotate_template("owner", "ops");
    let annotations = cj.plan(&[], t(40)).create.unwrap().metadata.annotations.unwrap();
    assert_eq!(annotations.keys().map(String::as_str).collect::<Vec<_>>(), ["batch.kubernetes.io/cronjob-scheduled-timestamp", "owner"]);
}

#[test]
fn wake_at_is_the_next_time_the_schedule_fires() {
    let cases: &[(&str, Cj, i64, Option<Timestamp>)] = &[
        ("every minute, before its first", hello(), 1, Some(t(40))),
        ("every minute, at one", hello(), 40, Some(t(100))),
        ("hourly", hello().schedule("0 * * * *"), 0, Some("2023-11-14T23:00:00Z".parse().unwrap())),
        ("@every 90s", hello().schedule("@every 90s"), 0, Some(t(90))),
        ("suspended still says when", hello().spec(|s| s.suspend = Some(true)), 40, Some(t(100))),
        ("never (30 February)", hello().schedule("0 0 30 2 *"), 0, None),
    ];
    for (what, cj, now, want) in cases {
        assert_eq!(cj.plan(&[], t(*now)).wake_at, *want, "{what}");
    }
}

#[test]
fn time_zone_shifts_the_schedule_to_its_wall_clock() {
    // 09:00 in Tokyo (UTC+9, no daylight saving) is 00:00 UTC.
    let nine = |zone: Option<&str>| hello().schedule("0 9 * * *").spec(|s| s.time_zone = zone.map(Into::into));
    let midnight: Timestamp = "2023-11-15T00:00:00Z".parse().unwrap();
    assert_eq!(nine(Some("Asia/Tokyo")).plan(&[], t(0)).wake_at, Some(midnight));
    let plan = nine(Some("Asia/Tokyo")).plan(&[], midnight + jiff::SignedDuration::from_secs(5));
    assert_eq!(created_name(&plan), Some(format!("hello-{}", midnight.as_second() / 60).as_str()));
    assert_eq!(plan.create.unwrap().metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION], "2023-11-15T00:00:00Z");
    // Without one, or with one unknown, it is UTC.
    let utc: Timestamp = "2023-11-15T09:00:00Z".parse().unwrap();
    assert_eq!(nine(None).plan(&[], t(0)).wake_at, Some(utc));
    assert_eq!(nine(Some("Mars/Olympus")).plan(&[], t(0)).wake_at, Some(utc));
}
