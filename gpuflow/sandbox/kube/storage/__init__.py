"""The test API server's storage: objects by kind and key with resource versions
(`store`), the history watches read from (`history`), generation and status rules
(`objects`), finalizers and garbage collection (`deletion`), and patches (`patch`)."""
