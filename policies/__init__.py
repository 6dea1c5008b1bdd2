"""Scheduling policies: each module one policy, pure, registered in policies.registry."""
