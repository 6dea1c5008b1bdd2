import json
import subprocess
import sys

# What a job's container must not load: it talks to gpuflow over HTTP only.
FORBIDDEN = ["kubernetes", "sqlalchemy", "fastapi", "api", "operators", "celery", "torch"]


def test_importing_the_library_loads_neither_the_cluster_side_nor_torch() -> None:
    code = (
        "import json, sys, gpuflow.train; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert "gpuflow" in loaded
    assert loaded.isdisjoint(FORBIDDEN), loaded & set(FORBIDDEN)
