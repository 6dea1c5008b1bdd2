"""`gpuflow sandbox`: a whole cluster on one machine with real processes (docs/sandbox.md).

kube/ is the strict Kubernetes API server; kubelet.py runs each bound pod's command as
a local process; network.py gives each emulated node a network namespace when run as
root; cluster.py starts and stops the whole; gpuflow/sandbox_cmd.py is its command line.
"""
