"""What if: the live cluster as either mode observes it, replayed from now under each
policy (`forecast`), with cluster mode's state read from the DLJobs and Nodes (`cluster`),
and a job's deadline beside its predicted finish (`deadline_outlook`)."""
