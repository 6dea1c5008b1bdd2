"""The network registry: what each model and the operator accept, and the refusals."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from controller.model import Cluster, JobSpec
from controller.network import registry
from controller.network.allocators import ALLOCATORS
from controller.network.phases import SHARING_RULES
from controller.network.phases.cassini import time_shifts
from controller.network.phases.form import LiveForm, PhaseForm
from controller.network.registry import (
    NETWORKS,
    PHASES,
    STEADY,
    Network,
    NetworkError,
    NoLiveFormError,
    check,
    check_live,
    live_names,
    live_network_help,
    names,
    network_help,
    phase_form,
)
from controller.placement import FirstFitPlacer
from controller.sim import SimConfig, Simulator
from policies.registry import make_policy
from tests.builders import make_cluster, make_job


def test_every_entry_is_whole() -> None:
    for name, entry in NETWORKS.items():
        assert entry.name == name
        assert entry.models, f"{name} runs in no model"
        assert entry.allocator is None or entry.allocator in ALLOCATORS
        assert entry.live or entry.not_live, f"{name}: neither live nor why not"
        assert not entry.time_dependent or entry.allocator is not None


def test_the_names_of_each_model_and_of_the_operator() -> None:
    assert names(STEADY) == ("dedicated", "fair", "sebf", "aalo", "aalo-strict", "sincronia")
    assert names(PHASES) == ("dedicated", "fair", "cassini", "crux", "mltcp")
    assert live_names() == (
        "dedicated",
        *("fair", "sebf", "aalo", "aalo-strict", "sincronia", "cassini", "crux"),
    )
    assert set(ALLOCATORS) <= set(names(STEADY))


@pytest.mark.parametrize(
    ("network", "model", "message"),
    [
        ("cassini", STEADY, "network 'cassini' needs the network model 'phases'"),
        ("aalo", PHASES, "network 'aalo' has no phase-level form (known: dedicated, fair, c"),
        ("fair", "bursty", "unknown network model 'bursty' (known: steady, phases)"),
        ("dedicated", "bursty", "unknown network model 'bursty'"),
        ("wan", STEADY, "unknown network 'wan' (known: dedicated, fair, sebf, aalo, a"),
    ],
)
def test_a_network_without_a_form_in_the_model_is_refused_in_one_line(
    network: str, model: str, message: str
) -> None:
    with pytest.raises(NetworkError) as err:
        check(network, model)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_dedicated_runs_everywhere_and_is_no_entry() -> None:
    assert check("dedicated", STEADY) is None and check("dedicated", PHASES) is None
    assert check_live("dedicated") is None
    fair = NETWORKS["fair"]
    assert check("fair", STEADY) is fair and check("fair", PHASES) is fair


def test_the_operator_refuses_what_cannot_run_live_saying_why() -> None:
    with pytest.raises(NoLiveFormError) as err:
        check_live("mltcp")
    assert str(err.value) == (
        "network 'mltcp' has no live form: its byte-weighted shares need MLTCP's congestion"
        " control in the kernel (live: cassini, crux)"
    )
    with pytest.raises(NetworkError, match=r"^unknown network 'wan' \(known: dedicated, fair"):
        check_live("wan")
    assert check_live("crux") is NETWORKS["crux"]
    assert check_live("sebf") is NETWORKS["sebf"]


def test_each_live_phase_form_has_what_it_publishes() -> None:
    cassini, crux = phase_form("cassini"), phase_form("crux")
    assert cassini.live is LiveForm.SLOTS and cassini.time_shifts is not None
    assert crux.live is LiveForm.LEVELS and crux.levels is not None and crux.floor_share > 0
    assert phase_form("fair").live is None and phase_form("mltcp").live is None
    assert {f.sharing for f in (cassini, crux, phase_form("mltcp"))} <= set(SHARING_RULES)
    with pytest.raises(NetworkError, match="'sebf' has no phase-level form"):
        phase_form("sebf")


def test_a_phase_form_refuses_parts_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="unknown sharing rule 'fifo'"):
        PhaseForm("fifo")
    with pytest.raises(ValueError, match="comm slots needs time_shifts"):
        PhaseForm("fair", live=LiveForm.SLOTS)
    with pytest.raises(ValueError, match="priority levels needs levels"):
        PhaseForm("priority", time_shifts=time_shifts, live=LiveForm.LEVELS)
    with pytest.raises(ValueError, match="floor_share"):
        PhaseForm("priority", floor_share=1.0)


def test_the_cli_help_is_read_from_the_table() -> None:
    assert network_help() == (
        "bandwidth sharing among multi-node jobs: dedicated (none), fair, sebf, aalo,"
        " aalo-strict or sincronia; with --network-model phases: fair, cassini, crux or mltcp"
    )
    assert live_network_help() == (
        "network allocator whose per-pod egress rates the agents enforce: fair, sebf, aalo,"
        " aalo-strict, sincronia; phase networks: cassini (comm slots), crux (priority"
        " levels); dedicated: none"
    )


def test_a_new_phase_network_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A network that combines parts already there (MLTCP's sharing, CASSINI's time
    shifts) runs in the simulator and is validated and refused live from its entry alone."""
    entry = Network(
        "shifted-mltcp",
        phases=PhaseForm("mltcp", time_shifts=time_shifts),
        not_live="a test network",
    )
    monkeypatch.setattr(registry, "NETWORKS", MappingProxyType({**NETWORKS, entry.name: entry}))
    assert names(PHASES)[-1] == "shifted-mltcp" and check("shifted-mltcp", PHASES) is entry
    with pytest.raises(NoLiveFormError, match="'shifted-mltcp' has no live form: a test"):
        check_live("shifted-mltcp")
    # Two equal jobs on node 1's NIC (first fit), started together: shifted apart, their
    # bursts take turns as under cassini, whatever the sharing rule.
    cluster = make_cluster(nodes=3, gpus=4)
    jobs = [make_job(j, 6, duration_s=2000, model="vgg16") for j in ("a", "b")]
    finish = {n: _finish(cluster, jobs, n) for n in ("shifted-mltcp", "cassini", "mltcp")}
    assert finish["shifted-mltcp"] == pytest.approx(finish["cassini"], rel=1e-3)
    assert finish["shifted-mltcp"] != finish["mltcp"]


def _finish(cluster: Cluster, jobs: list[JobSpec], network: str) -> dict[str, float | None]:
    cfg = SimConfig(round_interval_s=0.0, network=network, network_model=PHASES)
    result = Simulator(cluster, jobs, make_policy("fifo"), FirstFitPlacer(cluster), cfg).run()
    return {o.job_id: o.finish_s for o in result.jobs}
