"""Queues, quotas and fair sharing between tenants (issue 18), composed with every policy.

`spec` loads a queue tree (controller.model.quotas) from YAML; the admission and
reclaim step that sits between the policy and the backend lives beside it.
"""
