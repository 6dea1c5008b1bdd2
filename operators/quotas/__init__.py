"""The quota tree live: the cluster-scoped Queue resources an admin defines (`resources`,
the calls on them) turned into the controller's quota tree and its state written back into
their status (`tree`). Called by the operator's round and by the API's quota store."""
