//! The Manager: what starts, leases and stops a process's controllers.
//!
//! Alone on its data dir, a control plane is the only one, and its controllers just
//! run. Replicas that share a store (on etcd) each compete for a Lease per controller
//! and run the controller while they hold it ([`crate::leader`]), so exactly one
//! replica runs each. On [`Manager::stop`] the controllers stop in the order they were
//! added, each awaited, and a replica then gives up every Lease it held, so another
//! takes over at once rather than after the Lease runs out.

use futures::future::BoxFuture;
use kube::Client;

use crate::leader::{self, Elector, Timing};
use crate::AbortOnDrop;

/// A controller's work: started anew each time its replica gains the Lease.
pub type Work = Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The controllers of one process.
pub struct Manager {
    client: Client,
    /// `Some` of this replica's identity when replicas share the controllers out.
    replica: Option<String>,
    timing: Timing,
    running: Vec<(&'static str, AbortOnDrop<()>)>,
}

impl Manager {
    /// A manager whose controllers use `client`. With `replica` (this replica's
    /// identity), each controller runs only while this replica holds its Lease.
    pub fn new(client: Client, replica: Option<String>) -> Self {
        Manager { client, replica, timing: Timing::default(), running: Vec::new() }
    }

    /// Starts a controller under the Lease `lease` (when replicated).
    pub fn add(&mut self, lease: &'static str, work: Work) {
        let task = match &self.replica {
            None => AbortOnDrop(tokio::spawn(work())),
            Some(identity) => {
                let mut elector = Elector::new(self.client.clone(), lease, identity.clone(), self.timing);
                AbortOnDrop(tokio::spawn(async move { elector.run(&work).await }))
            }
        };
        self.running.push((lease, task));
    }

    /// Starts a task that every replica runs, with no Lease of its own (the push-mode
    /// syncers, which share the clusters out by Leases of their own).
    pub fn add_unleased(&mut self, name: &'static str, task: BoxFuture<'static, ()>) {
        self.running.push((name, AbortOnDrop(tokio::spawn(task))));
    }

    /// Stops every controller, in the order they were added, each awaited; then, for a
    /// replica, gives up every Lease it held. Returns how many it gave up.
    pub async fn stop(self) -> usize {
        for (name, mut task) in self.running {
            task.0.abort();
            let _ = (&mut task.0).await;
            tracing::debug!(controller = name, "stopped");
        }
        match self.replica {
            Some(identity) => {
                let root = crate::clients::workspace(&self.client, placement_api::ROOT_WORKSPACE);
                leader::release_all(root, &identity).await
            }
            None => 0,
        }
    }
}
