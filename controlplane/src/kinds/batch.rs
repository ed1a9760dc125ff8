//! Jobs and CronJobs (kubernetes pkg/registry/batch).

use serde_json::{json, Value};

use super::apps::one_of;
use super::pod::{default_pod_spec, quantities_parse};
use super::print::{self, col, AGE, CONTAINERS, IMAGES, NAME};
use super::workload::{immutable, non_negative, template_cells, validate_restart_policy, validate_selected_template};
use super::{decode_typed, rules, set_default, Decoded, Strategy};
use crate::error::Cause;
use crate::objmeta::{self, human_duration};

/// batch/v1 Job: pods that run to completion. Its selector is generated from its uid
/// unless `manualSelector` is set, and its pod template is fixed at creation.
#[derive(Debug)]
pub struct Job;

/// batch/v1 CronJob: Jobs made from a template on a schedule.
#[derive(Debug)]
pub struct CronJob;

pub use placement_api::workload::job::{CONTROLLER_UID_LABEL, JOB_NAME_LABEL};

/// The longest name a CronJob may have: its Jobs append an 11-character suffix.
const CRONJOB_NAME_MAX: usize = 52;

impl Strategy for Job {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::batch::v1::Job>("Job", obj, old, status_write, quantities_parse)
    }

    fn default(&self, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
            default_job_spec(spec);
        }
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let manual = obj.pointer("/spec/manualSelector") == Some(&json!(true));
        let mut causes = validate_job_spec(obj, "spec", manual);
        match old {
            None if !manual && obj.pointer("/spec/selector").is_some_and(|s| !s.is_null()) => {
                causes.push(rules::invalid("spec.selector", &obj["spec"]["selector"], "`selector` not auto-generated"));
            }
            None => {}
            Some(_) => causes.extend(immutable(
                obj,
                old,
                &["spec.selector", "spec.template", "spec.completions", "spec.completionMode", "spec.podFailurePolicy"],
            )),
        }
        causes
    }

    /// As the Job strategy's PrepareForCreate: the selector and the pod labels that
    /// tie the pods to this Job, from its uid.
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.pointer("/spec/manualSelector") == Some(&json!(true)) {
            return;
        }
        let uid = objmeta::meta_str(obj, "uid").unwrap_or_default().to_string();
        let name = objmeta::meta_str(obj, "name").unwrap_or_default().to_string();
        let mut labels = vec![(CONTROLLER_UID_LABEL, uid.clone()), ("controller-uid", uid.clone())];
        if name.len() <= 63 {
            labels.extend([(JOB_NAME_LABEL, name.clone()), ("job-name", name)]);
        }
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("selector".into(), json!({"matchLabels": {CONTROLLER_UID_LABEL: uid}}));
        }
        set_default(obj, &["spec", "template", "metadata", "labels"], json!({}));
        if let Some(map) = obj.pointer_mut("/spec/template/metadata/labels").and_then(Value::as_object_mut) {
            for (k, v) in labels {
                map.insert(k.into(), json!(v));
            }
        }
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        Some(old.get("spec") != new.get("spec"))
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.successful"]
    }

    /// `status.successful` is the count of pods that succeeded, 0 until one has.
    fn field(&self, obj: &Value, field: &str) -> Option<String> {
        match field {
            "status.successful" => Some(print::n(obj, "/status/succeeded").to_string()),
            _ => super::field_value(obj, field),
        }
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Status", "string", 0, "Status of the job."),
            col("Completions", "string", 0, "Pods that succeeded, of the completions wanted."),
            col("Duration", "string", 0, "Time required to complete the job."),
            AGE,
            CONTAINERS,
            IMAGES,
            col("Selector", "string", 1, "Label selector for the job's pods."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let succeeded = print::n(obj, "/status/succeeded");
        let completions = match obj.pointer("/spec/completions").and_then(Value::as_i64) {
            Some(c) => format!("{succeeded}/{c}"),
            None => match print::n(obj, "/spec/parallelism") {
                p if p > 1 => format!("{succeeded}/1 of {p}"),
                _ => format!("{succeeded}/1"),
            },
        };
        let time = |p: &str| obj.pointer(p).and_then(Value::as_str).and_then(|t| t.parse::<jiff::Timestamp>().ok());
        let duration = match (time("/status/startTime"), time("/status/completionTime")) {
            (None, _) => String::new(),
            (Some(start), None) => human_duration(jiff::Timestamp::now().as_second() - start.as_second()),
            (Some(start), Some(end)) => human_duration(end.as_second() - start.as_second()),
        };
        let [containers, images, selector] = template_cells(obj, "/spec/template");
        vec![
            print::name(obj),
            json!(job_status(obj)),
            json!(completions),
            json!(duration),
            print::age_of(obj),
            containers,
            images,
            selector,
        ]
    }
}

/// The Status column of `kubectl get jobs`: the first true condition of Complete,
/// Failed, (deletion) Terminating, Suspended, FailureTarget and SuccessCriteriaMet,
/// else Running.
fn job_status(job: &Value) -> &'static str {
    let has = |t: &str| {
        job.pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if job.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
}

/// The Job defaults (batch/v1 SetDefaults_Job), for a Job's spec.
fn default_job_spec(spec: &mut Value) {
    if spec.get("completions").is_none_or(Value::is_null) && spec.get("parallelism").is_none_or(Value::is_null) {
        spec["completions"] = json!(1);
    }
    set_default(spec, &["parallelism"], json!(1));
    let per_index = spec.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null());
    set_default(spec, &["backoffLimit"], json!(if per_index { i32::MAX } else { 6 }));
    set_default(spec, &["completionMode"], json!("NonIndexed"));
    set_default(spec, &["suspend"], json!(false));
    let with_failure_policy = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    set_default(spec, &["podReplacementPolicy"], json!(if with_failure_policy { "Failed" } else { "TerminatingOrFailed" }));
    if let Some(pod) = spec.pointer_mut("/template/spec") {
        default_pod_spec(pod);
    }
}

/// A Job spec at `spec` (`spec`, or a CronJob's `spec.jobTemplate.spec`).
fn validate_job_spec(obj: &Value, spec: &str, require_selector: bool) -> Vec<Cause> {
    let mut causes = validate_selected_template(obj, spec, require_selector);
    causes.extend(validate_restart_policy(obj, &format!("{spec}.template"), &["OnFailure", "Never"]));
    for f in ["parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"] {
        causes.extend(non_negative(obj, &format!("{spec}.{f}")));
    }
    let deadline = format!("{spec}.activeDeadlineSeconds");
    if let Some(v) = obj.pointer(&format!("/{}", deadline.replace('.', "/"))).filter(|v| v.as_i64().is_some_and(|n| n <= 0)) {
        causes.push(rules::invalid(&deadline, v, "must be greater than 0"));
    }
    causes.extend(one_of(obj, &format!("{spec}.completionMode"), &["NonIndexed", "Indexed"]));
    causes
}

impl Strategy for CronJob {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::batch::v1::CronJob>("CronJob", obj, old, status_write, super::decoded)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "concurrencyPolicy"], json!("Allow"));
        set_default(obj, &["spec", "suspend"], json!(false));
        set_default(obj, &["spec", "successfulJobsHistoryLimit"], json!(3));
        set_default(obj, &["spec", "failedJobsHistoryLimit"], json!(1));
        if let Some(pod) = obj.pointer_mut("/spec/jobTemplate/spec/template/spec") {
            default_pod_spec(pod);
        }
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let name = objmeta::meta_str(obj, "name").unwrap_or_default();
        if name.len() > CRONJOB_NAME_MAX {
            causes.push(rules::invalid("metadata.name", &json!(name), &format!("must be no more than {CRONJOB_NAME_MAX} characters")));
        }
        match obj.pointer("/spec/schedule").and_then(Value::as_str) {
            None | Some("") => causes.push(rules::required("spec.schedule")),
            Some(s) if s.contains("TZ") => {
                causes.push(rules::invalid("spec.schedule", &json!(s), "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
            }
            Some(s) => {
                if let Err(e) = apimachinery::cron::parse(s) {
                    causes.push(rules::invalid("spec.schedule", &json!(s), &e.0));
                }
            }
        }
        if let Some(tz) = obj.pointer("/spec/timeZone").and_then(Value::as_str) {
            if jiff::tz::TimeZone::get(tz).is_err() {
                causes.push(rules::invalid("spec.timeZone", &json!(tz), &format!("unknown time zone {tz}")));
            }
        }
        causes.extend(one_of(obj, "spec.concurrencyPolicy", &["Allow", "Forbid", "Replace"]));
        for f in ["startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
            causes.extend(non_negative(obj, &format!("spec.{f}")));
        }
        causes.extend(validate_job_spec(obj, "spec.jobTemplate.spec", false));
        causes
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        Some(old.get("spec") != new.get("spec"))
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Schedule", "string", 0, "When Jobs are made, in cron format."),
            col("Timezone", "string", 0, "The time zone of the schedule."),
            col("Suspend", "boolean", 0, "Whether new Jobs are held back."),
            col("Active", "integer", 0, "The Jobs that are running."),
            col("Last Schedule", "string", 0, "When a Job was last made."),
            AGE,
            CONTAINERS,
            IMAGES,
            col("Selector", "string", 1, "Label selector for the jobs' pods."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let suspend = match obj.pointer("/spec/suspend").and_then(Value::as_bool) {
            Some(true) => "True",
            Some(false) => "False",
            None => "<unset>",
        };
        let last = obj.pointer("/status/lastScheduleTime").and_then(Value::as_str).map_or("<none>".into(), |t| objmeta::age(Some(t)));
        let active = obj.pointer("/status/active").and_then(Value::as_array).map_or(0, Vec::len);
        let tz = obj.pointer("/spec/timeZone").and_then(Value::as_str).unwrap_or("<none>");
        let [containers, images, selector] = template_cells(obj, "/spec/jobTemplate/spec/template");
        vec![
            print::name(obj),
            json!(print::s(obj, "/spec/schedule")),
            json!(tz),
            json!(suspend),
            json!(active),
            json!(last),
            print::age_of(obj),
            containers,
            images,
            selector,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "uid": "u-1"},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "pi", "image": "perl:5.34.0", "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]}]}},
                   "backoffLimit": 4}})
    }

    #[test]
    fn a_job_gets_its_defaults_and_a_selector_from_its_uid() {
        let mut j = Job.decode(job(), None, false).unwrap().value;
        Job.default(&mut j);
        assert!(Job.validate(&j, None).is_empty(), "{:?}", Job.validate(&j, None));
        Job.prepare_for_create(&mut j);
        assert_eq!(
            (j["spec"]["completions"].clone(), j["spec"]["parallelism"].clone(), j["spec"]["backoffLimit"].clone()),
            (json!(1), json!(1), json!(4))
        );
        assert_eq!(j["spec"]["completionMode"], "NonIndexed");
        assert_eq!(j["spec"]["selector"], json!({"matchLabels": {CONTROLLER_UID_LABEL: "u-1"}}));
        assert_eq!(j["spec"]["template"]["metadata"]["labels"][JOB_NAME_LABEL], "pi");
        assert!(Job.validate(&j, Some(&j)).is_empty(), "a generated selector matches its template");
    }

    #[test]
    fn a_job_refuses_restart_always_a_hand_written_selector_and_template_changes() {
        let mut j = job();
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        j["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        let fields: Vec<String> = Job.validate(&j, None).into_iter().map(|c| c.field).collect();
        assert!(fields.contains(&"spec.template.spec.restartPolicy".to_string()), "{fields:?}");
        assert!(fields.contains(&"spec.selector".to_string()), "{fields:?}");
        let old = job();
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("perl:5.36");
        let causes = Job.validate(&new, Some(&old));
        assert_eq!(causes[0].field, "spec.template");
        assert!(causes[0].message.ends_with(": field is immutable"), "{}", causes[0].message);
    }

    #[test]
    fn job_cells_show_status_completions_and_duration() {
        let mut j = job();
        j["spec"]["completions"] = json!(1);
        j["status"] = json!({"succeeded": 1, "startTime": "2026-12-02T10:00:00Z", "completionTime": "2026-12-02T10:00:07Z",
                             "conditions": [{"type": "Complete", "status": "True"}]});
        assert_eq!(Job.cells(&j)[1..4], [json!("Complete"), json!("1/1"), json!("7s")]);
        j["status"] = json!({});
        j["spec"]["completions"] = Value::Null;
        j["spec"]["parallelism"] = json!(3);
        assert_eq!(Job.cells(&j)[1..4], [json!("Running"), json!("0/1 of 3"), json!("")]);
    }

    fn cronjob(schedule: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "hello"},
               "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                   "containers": [{"name": "hello", "image": "busybox:1.28", "command": ["/bin/sh", "-c", "date"]}]}}}}}})
    }

    #[test]
    fn a_cronjob_needs_a_schedule_that_parses() {
        let mut c = cronjob("* * * * *");
        CronJob.default(&mut c);
        assert!(CronJob.validate(&c, None).is_empty(), "{:?}", CronJob.validate(&c, None));
        assert_eq!(CronJob.cells(&c)[1..6], [json!("* * * * *"), json!("<none>"), json!("False"), json!(0), json!("<none>")]);
        let causes = CronJob.validate(&cronjob("every minute"), None);
        assert_eq!(causes[0].message, "Invalid value: \"every minute\": expected exactly 5 fields, found 2: [every minute]");
        let causes = CronJob.validate(&cronjob("CRON_TZ=UTC * * * * *"), None);
        assert!(causes[0].message.ends_with("cannot use TZ or CRON_TZ in schedule, use timeZone field instead"));
        let mut zoned = cronjob("0 9 * * *");
        zoned["spec"]["timeZone"] = json!("Mars/Olympus");
        assert_eq!(CronJob.validate(&zoned, None)[0].field, "spec.timeZone");
    }
}
