"""The trace formats by name: the names `--format` accepts and the loader of each.

Read by `load_trace` and `detect_format`; adding a format means adding its loader
here and, if its files can be recognised, a rule in `detection.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from controller.traces.formats import (
    adaptdl,
    alibaba,
    canonical,
    elasticflow,
    gavel,
    helios,
    philly,
    tiresias,
)
from controller.traces.trace import Parsed

Loader = Callable[[Path], Parsed]

FORMATS: Mapping[str, Loader] = MappingProxyType(
    {
        canonical.FORMAT: canonical.load_canonical,
        philly.JSON_FORMAT: philly.load_philly_json,
        philly.CSV_FORMAT: philly.load_philly_csv,
        adaptdl.FORMAT: adaptdl.load_adaptdl,
        tiresias.FORMAT: tiresias.load_tiresias,
        elasticflow.FORMAT: elasticflow.load_elasticflow,
        gavel.FORMAT: gavel.load_gavel,
        helios.FORMAT: helios.load_helios,
        alibaba.PAI_FORMAT: alibaba.load_alibaba_pai,
        alibaba.OPENB_FORMAT: alibaba.load_alibaba_openb,
    }
)
