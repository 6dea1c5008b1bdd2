"""Cluster mode: jobs are DLJobs on Kubernetes, run by the operator, and the job database
follows them. `backend.ClusterBackend` is the routes' `JobBackend`; the follower, adoption,
history and reaper keep the database and the DLJobs in step; `describe` reads Nodes and
DLJobs into the cluster view. Reaches Kubernetes only through the operators package."""
