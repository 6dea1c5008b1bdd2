"""A strict in-memory Kubernetes API server (see docs/kube-test-server.md).

Stdlib `http.server` plus PyYAML; the tests' `kube_server` fixture and `gpuflow sandbox`
run it. It imports nothing else of the project.
"""
