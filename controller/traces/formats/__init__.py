"""The trace formats, one module each: a format's reader of its rows (and its name,
`FORMAT`), registered by name in controller/traces/registry.py and recognised, where its
files can be, by controller/traces/detection.py."""
