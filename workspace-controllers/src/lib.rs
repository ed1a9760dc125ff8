//! The controllers that keep objects in the workspaces right, from what users, the
//! scheduler and the syncers write: [`aggregate`] sums each workload's status from its
//! clusters' reports, [`companion_status`] sums the load balancer addresses and
//! autoscaler replicas of its companions (Services, Ingresses, HorizontalPodAutoscalers)
//! from theirs, [`companions`] labels what follows each assigned workload (its
//! Services, Ingresses, ServiceAccount, disruption budgets, network policies,
//! autoscalers, ConfigMaps and Secrets), so that it goes to the same clusters, and
//! [`revisions`] keeps a Deployment's rollout history as ReplicaSets, and
//! [`controller_revisions`] a StatefulSet's or DaemonSet's as ControllerRevisions, and
//! [`job_ttl`] deletes finished Jobs whose `ttlSecondsAfterFinished` is up, and
//! [`cronjobs`] runs CronJobs' schedules, making their Jobs in the workspace. One of
//! each runs in the control plane's process.

#![warn(missing_docs)]

pub mod aggregate;
pub mod companion_status;
pub mod companions;
pub mod controller_revisions;
pub mod cronjobs;
pub mod job_ttl;
pub mod revisions;
