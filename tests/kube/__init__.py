"""A strict in-memory Kubernetes API server for tests (see docs/kube-test-server.md)."""
