"""`gpuflow sandbox up` and `gpuflow sandbox run`: a whole cluster on one machine.

gpuflow.cli registers them with `add_parsers(subparsers)`; gpuflow/sandbox/cluster.py
(the cluster) and gpuflow/sandbox/jobs.py (`run`'s jobs) do the work
(docs/sandbox.md). `up` runs until SIGINT or SIGTERM and prints how to reach it
(kubectl, the REST API); `run` applies DLJob files, waits for every job to end and
prints the results. Both run on the real control plane (gpuflow/sandbox/controlplane.py):
without its binaries they stop before starting anything, with one line saying how to
build them. Both tear down all they started (the control plane, processes, the API
service, namespaces, veths, bridge), also on errors; killed (kill -9), their reaper
does (gpuflow/sandbox/reaper.py), and a later start cleans what a dead one left.
Exit codes: 0 done, 1 a `run` that timed out or a sandbox that failed to start,
2 bad input or no binaries.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpuflow import options

EXIT_USAGE = 2


def add_parsers(sub: Any) -> None:
    """Register `sandbox up` and `sandbox run` on the CLI's subparsers object."""
    sb = sub.add_parser("sandbox", help="a whole cluster on one machine, real processes")
    actions = sb.add_subparsers(metavar="ACTION")
    up = actions.add_parser("up", help="start the sandbox and keep it running for kubectl")
    _common(up)
    up.add_argument(
        "--bare",
        action="store_true",
        help="only the control plane and the kubelets: gpuflow itself from `helm install`",
    )
    up.set_defaults(func=cmd_up)
    run = actions.add_parser("run", help="run DLJobs to the end in a fresh sandbox")
    _common(run)
    run.add_argument("jobs", nargs="+", metavar="JOB.yaml", help="DLJob manifests")
    run.add_argument("--timeout", type=options.wait_s, default=600.0, help="seconds (default 600)")
    run.add_argument("--json", action="store_true", help="print the results as JSON")
    run.set_defaults(func=cmd_run)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", default="1x4", help="NODESxGPUS (default 1x4)")
    p.add_argument("--policy", "-p", default="fifo", help="scheduling policy (default fifo)")
    p.add_argument(
        "--policy-opt",
        action="append",
        default=[],
        metavar="[POLICY:]KEY=VALUE",
        help="a policy option for the operator, as replay takes it (repeatable)",
    )
    p.add_argument(
        "--port", type=options.port, default=0, help="API server port (default: any free)"
    )
    p.add_argument("--dir", help="keep the sandbox's files (logs, volumes) here")
    p.add_argument("--workdir", help="the processes' working directory (default: repo root)")
    p.add_argument("-v", "--verbose", action="store_true", help="log the sandbox's INFO lines")


def _config(args: argparse.Namespace) -> Any:
    from gpuflow.sandbox.cluster import SandboxConfig, SandboxError, parse_nodes
    from policies.option_text import options_for
    from policies.registry import UnknownPolicyError, make_policy

    nodes, gpus = parse_nodes(args.nodes)
    try:
        scoped = options.parsed_policy_options(args.policy_opt)
        make_policy(args.policy, **options_for(scoped, args.policy))
    except (UnknownPolicyError, options.CliError) as exc:
        raise SandboxError(str(exc)) from None
    if not 0 <= args.port < 65536:
        raise SandboxError(f"--port {args.port}: expected 0..65535")
    return SandboxConfig(
        nodes=nodes,
        gpus_per_node=gpus,
        policy=args.policy,
        policy_options=scoped,
        port=args.port,
        directory=Path(args.dir).resolve() if args.dir else None,
        workdir=Path(args.workdir).resolve() if args.workdir else None,
        bare=bool(getattr(args, "bare", False)),
    )


def _check_binaries() -> None:
    """SandboxError with BinariesMissing's one line (how to build them) when the
    control plane's binaries are not there: checked after the input, before starting."""
    from gpuflow.sandbox.cluster import SandboxError
    from gpuflow.sandbox.controlplane import Binaries, BinariesMissing

    try:
        Binaries.find()
    except BinariesMissing as exc:
        raise SandboxError(str(exc)) from None


def _logging(verbose: bool) -> None:
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _usage_error(exc: Exception) -> int:
    sys.stderr.write(f"gpuflow: error: {exc}\n")
    return EXIT_USAGE


def _start_failed(exc: Exception) -> int:
    sys.stderr.write(f"gpuflow: error: the sandbox did not start: {exc}\n")
    return 1


def cmd_up(args: argparse.Namespace) -> int:
    from gpuflow.sandbox.cluster import Sandbox, SandboxError

    try:
        config = _config(args)
        _check_binaries()
    except SandboxError as exc:
        return _usage_error(exc)
    _logging(True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with Sandbox(config) as sandbox:
            sys.stdout.write(_up_banner(sandbox))
            sys.stdout.flush()
            stop.wait()
    except RuntimeError as exc:
        return _start_failed(exc)
    return 0


def _up_banner(sandbox: Any) -> str:
    config, service = sandbox.config, sandbox.service
    if config.bare:
        return _bare_banner(sandbox)
    return (
        f"sandbox up: {config.nodes} node(s) x {config.gpus_per_node} GPU(s), "
        f"policy {config.policy}, Kubernetes API server {sandbox.url}\n"
        f"  export KUBECONFIG={sandbox.kubeconfig}\n"
        "  kubectl get nodes,dljobs,pods -o wide\n"
        "  kubectl apply -f JOB.yaml   # DLJobs whose command runs on this machine\n"
        f"gpuflow API (cluster mode) {service.url}, log {service.log_path}\n"
        f"  GPUFLOW_DATABASE_URL={service.database_url} gpuflow admin create me  # a token\n"
        f"  export GPUFLOW_URL={service.root} GPUFLOW_TOKEN=gf_...\n"
        f'  curl -H "Authorization: Bearer $GPUFLOW_TOKEN" -H "Content-Type: application/json" \\\n'
        f"    {service.url}/jobs -d "
        """'{"num_gpus": 1, "duration_s": 60, "command": ["python", "-c", "print(1)"]}'\n"""
        "  gpuflow jobs\n"
        f"files (pod logs, volumes, database): {sandbox.directory}\n"
        "Ctrl-C stops it and removes everything it made.\n"
    )


def _bare_banner(sandbox: Any) -> str:
    config = sandbox.config
    return (
        f"sandbox up (bare): {config.nodes} node(s) x {config.gpus_per_node} GPU(s), "
        f"Kubernetes API server {sandbox.url}\n"
        f"  export KUBECONFIG={sandbox.kubeconfig}\n"
        "  helm install gpuflow helm/gpuflow -n gpuflow --create-namespace \\\n"
        "    --set postgresql.enabled=false,externalDatabase.url=postgresql://... \\\n"
        "    --set redis.enabled=false,externalRedis.url=redis://... \\\n"
        "    --set worker.enabled=false,agent.enforceBandwidth=false \\\n"
        f'    --set-json \'agent.extraArgs=["--topology-file={sandbox.topology_file}",'
        '"--node-type=$(NODE_NAME)"]\'\n'
        f"  pods reach this machine (its database, Redis, the API server) at "
        f"{sandbox.network.host_address}\n"
        f"files (pod logs, volumes): {sandbox.directory}\n"
        "Ctrl-C stops it and removes everything it made.\n"
    )


def cmd_run(args: argparse.Namespace) -> int:
    from gpuflow.sandbox.cluster import Sandbox, SandboxError
    from gpuflow.sandbox.jobs import job_results, load_jobs, run_jobs

    try:
        config = _config(args)
        jobs = load_jobs(args.jobs)
        if args.timeout <= 0:
            raise SandboxError("--timeout must be > 0")
        _check_binaries()
    except SandboxError as exc:
        return _usage_error(exc)
    _logging(args.verbose)
    t0 = time.monotonic()
    # SIGTERM unwinds like Ctrl-C, so that the sandbox is torn down either way.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        # The operator starts once the service has made the jobs' metrics Secrets.
        with Sandbox(dataclasses.replace(config, start_operator=False)) as sandbox:
            final, done = run_jobs(sandbox, jobs, args.timeout)
            control_plane = sandbox.control_plane_release()
    except RuntimeError as exc:
        return _start_failed(exc)
    rows = job_results(final)
    wall_s = round(time.monotonic() - t0, 3)
    if args.json:
        out = {"jobs": rows, "wall_s": wall_s, "control_plane": control_plane}
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        for j in rows:
            sys.stdout.write(" ".join(f"{k}={v}" for k, v in j.items()) + "\n")
        sys.stdout.write(f"wall_s={wall_s}\n")
    if not done:
        sys.stderr.write(f"gpuflow: error: jobs still running after --timeout {args.timeout}\n")
        return 1
    return 0
