"""`gpuflow operator run` and `gpuflow agent run`: the Kubernetes side's commands.

gpuflow.cli registers them with `add_parsers(subparsers)`. The operator schedules
DLJobs with a policy (operators/operator.py); the agent publishes its node's GPUs
(operators/agent/main.py). Both take --kubeconfig (default: in-cluster, then
~/.kube/config). Exit codes: 0 stopped, 1 the API failed (the CRDs refused, the agent
unable to publish), 2 bad input, 3 no NVML (agent). An operator that loses its Lease
steps down and rejoins the election; it does not exit.

The operator stops cleanly on SIGTERM or SIGINT: its round finishes, its writes
are flushed and its Lease is released, so that a standby leads at its next retry.
Logs are key=value lines (`--log-format json`: one JSON object a line) on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from typing import Any

from controller.model.perf.matrix import ThroughputMatrix
from controller.model.sharing import DEFAULT_SHARING, SharingMode
from gpuflow import options


def add_parsers(sub: Any) -> None:
    """Register `operator run` and `agent run` on the CLI's subparsers object."""
    from controller.network.registry import live_network_help

    op = sub.add_parser("operator", help="the Kubernetes operator").add_subparsers(metavar="ACTION")
    run = op.add_parser("run", help="schedule DLJobs on a Kubernetes cluster")
    _common(run)
    run.add_argument("--policy", "-p", default="fifo", help="scheduling policy (default fifo)")
    run.add_argument("--placement", default="consolidated", help="placement (default consolidated)")
    run.add_argument(
        "--policy-opt",
        action="append",
        default=[],
        metavar="[POLICY:]KEY=VALUE",
        help="a policy option, as replay takes it (repeatable); with POLICY: only while that"
        " policy is active (after a switch too)",
    )
    run.add_argument("--namespace", help="watch DLJobs of this namespace only (default: all)")
    run.add_argument(
        "--throughputs",
        metavar="FILE",
        help="a throughput matrix in Gavel's JSON format, as replay takes it: the speeds"
        " the policies plan with and the pair rates Gavel's packed policies pair jobs by"
        " (default: the performance model)",
    )
    run.add_argument(
        "--network",
        default="fair",
        help=f"{live_network_help()} (default fair; docs/bandwidth.md, docs/network.md)",
    )
    run.add_argument(
        "--interval", type=options.wait_s, default=5.0, help="seconds between rounds at most"
    )
    run.add_argument("--identity", default=None, help="leader-election identity (default host:pid)")
    run.add_argument("--lease-namespace", default="default")
    run.add_argument("--lease-duration", type=options.wait_s, default=15.0)
    run.add_argument("--renew-deadline", type=options.wait_s, default=10.0)
    run.add_argument("--retry-period", type=options.wait_s, default=2.0)
    run.add_argument(
        "--install-crd",
        action="store_true",
        help="create or update the DLJob and Quota CRDs first (RBAC on customresourcedefinitions)",
    )
    run.add_argument(
        "--metrics-port",
        type=options.port,
        default=8080,
        help="serve Prometheus metrics on this port at /metrics (default 8080; 0: off)",
    )
    run.add_argument(
        "--api-url",
        default="",
        help="the gpuflow API's REST root as worker pods reach it (http://HOST/api/v1),"
        " given to them as GPUFLOW_API_URL for metrics reports (default: not set)",
    )
    run.set_defaults(func=cmd_operator_run)

    agent = sub.add_parser("agent", help="the node agent").add_subparsers(metavar="ACTION")
    arun = agent.add_parser("run", help="publish this node's GPUs on its Node")
    _common(arun)
    arun.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="(env NODE_NAME)")
    arun.add_argument("--topology-file", help="YAML node type for a machine without NVML")
    arun.add_argument("--node-type", help="which node type of --topology-file (if several)")
    arun.add_argument(
        "--nic-gbps", type=options.positive_float, default=100.0, help="NIC speed (default 100)"
    )
    arun.add_argument(
        "--interval", type=options.wait_s, default=30.0, help="seconds between reports"
    )
    arun.add_argument("--once", action="store_true", help="publish once and exit")
    arun.add_argument(
        "--proc-root",
        default="/proc",
        help="the host's /proc, where each GPU process's cgroup names its pod (default"
        " /proc: the agent runs with hostPID)",
    )
    arun.add_argument(
        "--sharing",
        choices=[m.value for m in SharingMode],
        default=DEFAULT_SHARING.value,
        help="how this node runs jobs that share a GPU: mps (an MPS control daemon serves"
        f" its GPUs) or time-slicing (default {DEFAULT_SHARING.value}); the scheduler"
        " rates shared jobs by it",
    )
    arun.add_argument(
        "--enforce-bandwidth",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="shape each pod's egress to its gpuflow.dev/egress-gbps with tc (default on;"
        " off: only report the rates on the Node)",
    )
    arun.add_argument("--interface", help="device to shape (default: the one of the default route)")
    arun.add_argument("--netns", help="network namespace of --interface (default: the agent's)")
    arun.add_argument(
        "--leaf-qdisc",
        default="fq_codel",
        help="queue of each pod's class (default fq_codel; pfifo where the kernel lacks it)",
    )
    arun.set_defaults(func=cmd_agent_run)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--context")
    p.add_argument("-v", "--verbose", action="store_true", help="also log at DEBUG")
    p.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="log lines (default text)"
    )


def cmd_operator_run(args: argparse.Namespace) -> int:
    from operators import crd
    from operators.kube import API_ERRORS, KubeApi, KubeConfigError, api_client
    from operators.kube.leader import LeaseConfig
    from operators.network import UnknownNetworkError
    from operators.operator import Operator, OperatorConfig
    from policies.registry import UnknownPolicyError

    _logging(args.verbose, args.log_format)
    lease = LeaseConfig(
        namespace=args.lease_namespace,
        lease_duration_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_s=args.retry_period,
    )
    try:
        scoped = options.parsed_policy_options(args.policy_opt)
        matrix = _matrix(args.throughputs)
    except options.CliError as exc:
        sys.stderr.write(f"gpuflow: error: {exc}\n")
        return 2
    config = OperatorConfig(
        identity=args.identity or f"{socket.gethostname()}:{os.getpid()}",
        policy=args.policy,
        placement=args.placement,
        namespace=args.namespace,
        interval_s=args.interval,
        lease=lease,
        metrics_port=args.metrics_port or None,
        api_url=args.api_url,
        network=args.network,
        policy_options=scoped,
        throughputs=matrix,
    )
    try:
        api = KubeApi(api_client(args.kubeconfig, args.context))
        operator = Operator(api, config)
    except (UnknownPolicyError, UnknownNetworkError, KubeConfigError) as exc:
        sys.stderr.write(f"gpuflow: error: {exc}\n")
        return 2
    if args.install_crd:
        try:
            api.apply_crd(crd.load_crd_manifest())
            api.apply_crd(crd.load_crd_manifest(crd.QUOTA_CRD_PATH))
        except API_ERRORS:
            return 1  # KubeApi logged the error
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: operator.stop())
    return operator.run()


def _matrix(path: str | None) -> ThroughputMatrix | None:
    """The matrix of `--throughputs`, or None; CliError (one line) for a bad file."""
    if not path:
        return None
    from controller.model.perf.matrix import MatrixError, load_matrix

    try:
        return load_matrix(path)
    except MatrixError as exc:
        raise options.CliError(f"--throughputs {exc}") from None


def cmd_agent_run(args: argparse.Namespace) -> int:
    from operators.agent.main import AgentOptions, run_agent

    _logging(args.verbose, args.log_format)
    options = AgentOptions(
        node_name=args.node_name,
        kubeconfig=args.kubeconfig,
        context=args.context,
        topology_file=args.topology_file,
        node_type=args.node_type,
        nic_gbps=args.nic_gbps,
        interval_s=args.interval,
        once=args.once,
        enforce_bandwidth=args.enforce_bandwidth,
        interface=args.interface,
        netns=args.netns,
        leaf_qdisc=args.leaf_qdisc,
        sharing=SharingMode(args.sharing),
        proc_root=args.proc_root,
    )
    return run_agent(options)


def _logging(verbose: bool, log_format: str = "text") -> None:
    from operators.logs import JsonFormatter

    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
        handler.setFormatter(logging.Formatter(fmt))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    # The kubernetes client and urllib3 log each request and retry at DEBUG: with -v
    # the operator's own lines would drown in them.
    for noisy in ("kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Run these commands without the rest of the CLI: `python -m gpuflow.operator_cmd`."""
    parser = argparse.ArgumentParser(prog="gpuflow")
    add_parsers(parser.add_subparsers(metavar="COMMAND"))
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
