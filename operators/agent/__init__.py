"""The node agent (a DaemonSet): GPU discovery, utilisation reports, bandwidth enforcement."""
