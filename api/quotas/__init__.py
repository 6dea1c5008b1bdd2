"""The quota tree (Kueue's ClusterQueues and cohorts; gpuflow's quotas): the tree an
admin defines over REST, where cluster mode keeps it (the cluster-scoped Quota resources),
and each quota's GPUs over time. The wait order is another thing: api.routes.order."""
