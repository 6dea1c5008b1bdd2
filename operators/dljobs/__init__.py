"""The DLJob custom resource as the operator reads and writes it: its names, labels and
finalizer (`crd`), what each DLJob is doing now (`state`), DLJobs to and from the
controller's model (`resources`), and the queue position written into its status
(`queue_status`)."""
