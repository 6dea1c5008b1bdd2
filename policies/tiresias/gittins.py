"""The Gittins index of a job's attained service, from samples of the service distribution.

Used by `policies.tiresias` (discretized 2D-Gittins index, Gu et al., NSDI 2019, §3.2):
with S a job's total service (GPU-seconds) and a the service it has attained,

    G(a, Δ) = P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]

the chance of finishing within the next Δ of service over the service that Δ is
expected to cost. Over n sorted samples s_1 <= ... <= s_n with prefix sums, let i be
the number of samples <= a and j the number <= a + Δ; both conditionings divide by
n - i, which cancels:

    G(a, Δ) = (j - i) / (sum_{i<k<=j} (s_k - a) + (n - j)·Δ)

so one index costs two bisections. A job past every sample (i = n) gets 0, as in the
Tiresias simulator (`run_sim.py` `get_gittins_index`): nothing is known of it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True)
class ServiceDistribution:
    """Sorted service samples (GPU-seconds) and their prefix sums."""

    samples: tuple[float, ...]
    prefix: tuple[float, ...]  # prefix[k] = s_1 + ... + s_k; prefix[0] = 0

    @classmethod
    def from_samples(cls, samples: Iterable[float]) -> ServiceDistribution:
        ordered = tuple(sorted(float(s) for s in samples))
        if not ordered:
            raise ValueError("a service distribution needs at least one sample")
        if ordered[0] <= 0:
            raise ValueError(f"service samples must be > 0, got {ordered[0]}")
        return cls(ordered, (0.0, *accumulate(ordered)))

    def index(self, attained: float, delta: float) -> float:
        """G(attained, delta); `delta` may be `math.inf` (run to completion)."""
        if not delta > 0:
            raise ValueError(f"the service quantum must be > 0, got {delta}")
        s, prefix = self.samples, self.prefix
        n = len(s)
        i = bisect_right(s, attained)
        if i == n:
            return 0.0
        if delta == math.inf:
            j, beyond = n, 0.0
        else:
            j = bisect_right(s, attained + delta)
            beyond = (n - j) * delta
        expected = prefix[j] - prefix[i] - (j - i) * attained + beyond
        return (j - i) / expected
