"""`gpuflow sandbox`: a whole cluster on one machine with real processes (docs/sandbox.md).

controlplane.py runs the real Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager) the sandbox stands on; kubelet.py runs each bound pod's command
as a local process and heartbeat.py keeps up its node's Node and Lease; network.py gives
each emulated node a network namespace when run as root; cluster.py starts and stops the
whole; remains.py records what a sandbox made and reaper.py removes it if the sandbox
dies without tearing down; gpuflow/sandbox_cmd.py is its command line. kube/ is the
strict Kubernetes API server that the operator's and API's tests still run against
(docs/kube-test-server.md).
"""
