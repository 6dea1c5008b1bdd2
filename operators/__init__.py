"""The Kubernetes backend and node agent: the only package that imports kubernetes and pynvml."""
