//! One voter of the quorum: a standalone instance, or a Redis Cluster
//! position that routes each request to the shard owning its slot.

use crate::transport::cluster::ClusterPosition;
use crate::transport::instance::{Instance, Request};

pub(crate) enum Voter {
    Standalone(Instance),
    Cluster(ClusterPosition),
}

impl Voter {
    /// How errors and metrics name it: `host:port/db`, or
    /// `cluster #i (seed, …)`.
    pub(crate) fn name(&self) -> &str {
        match self {
            Voter::Standalone(instance) => instance.name(),
            Voter::Cluster(cluster) => cluster.name(),
        }
    }

    /// Queues a request; never blocks.
    pub(crate) fn send(&self, req: Request) {
        match self {
            Voter::Standalone(instance) => instance.send(req),
            Voter::Cluster(cluster) => cluster.send(req),
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Voter::Cluster(_))
    }

    /// Sends `make()` to each server behind this voter (the instance, or
    /// every shard master known now) and returns their names, in the
    /// order sent.
    pub(crate) fn each_server(&self, mut make: impl FnMut(&str) -> Request) -> Vec<String> {
        match self {
            Voter::Standalone(instance) => {
                instance.send(make(instance.name()));
                vec![instance.name().to_string()]
            }
            Voter::Cluster(cluster) => cluster.each_shard(make),
        }
    }
}
