"""The quota tree live: the cluster-scoped Quota resources an admin defines (and, for one
release, the deprecated Queue ones) with the calls on them (`resources`), turned into the
controller's quota tree and its state written back into their status (`tree`), and the
copy of Queues to Quotas (`migrate`). Called by the operator's round, the API's quota
store and `gpuflow quotas migrate`."""
