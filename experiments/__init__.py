"""Research harnesses kept apart from the scheduling core: experiments that
reproduce a paper's setting, with inputs and models of their own, which no backend
runs.

- `coflow`: the coflow-benchmark replay (`gpuflow coflow`);
- `packing`: FGD's resource-aware placement experiment (`gpuflow placement`).

They import the core (`controller`, its network policies and trace rows); the core,
the policies, the operators and the API never import them (import-linter contracts
in pyproject.toml).
"""
