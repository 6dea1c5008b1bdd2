"""The control plane built from Go modules (controlplane/, docs/controlplane.md)."""
