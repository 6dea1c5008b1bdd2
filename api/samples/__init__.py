"""The live cluster's history: samples of the cluster, its nodes and GPUs, and its
tenants, taken every sampling period and kept for a stated retention (issue 30 item 4).

- `rows`: what one sample is, built from the backend's cluster view and the job
  database (pure);
- `readings`: each GPU's memory, temperature, power and ECC health, as each mode
  knows them (cluster mode: the node agents' annotations; local mode: the jobs');
- `sampler`: the thread that takes a sample every period and compacts;
- `compaction`: merges old samples into coarser bins and drops those past retention,
  so that the tables' size is bounded whatever the uptime;
- `series`: a window of samples as binned series, for api.routes.history.
"""
