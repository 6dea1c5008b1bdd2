"""`gpuflow quotas migrate`: a cluster's deprecated Queue objects copied to Quotas.

gpuflow.cli registers it with `add_parser(subparsers)`; the work is
operators/quotas/migrate.py. It prints kubectl's kind of line per Queue
(`quota.gpuflow.dev/team-a created`), or with --json one object per Queue. Exit codes:
0 done, 1 the API server failed a call or a Quota of a Queue's name has another spec
(`conflict`: nothing is overwritten; the Queue stays), 2 bad input (no kubeconfig,
the Quota CRD not installed). Docs: docs/quotas.md, "From Queue to Quota".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """Register `quotas migrate` on the CLI's subparsers object."""
    quotas = sub.add_parser("quotas", help="the quota tree's Kubernetes resources")
    actions = quotas.add_subparsers(metavar="ACTION")
    mig = actions.add_parser(
        "migrate",
        help="copy the deprecated Queue objects to Quota objects (the operator reads both"
        " meanwhile)",
    )
    mig.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    mig.add_argument("--context")
    mig.add_argument(
        "--delete",
        action="store_true",
        help="then delete each Queue whose Quota holds its spec (default: keep them)",
    )
    mig.add_argument(
        "--dry-run", action="store_true", help="say what would be done; change nothing"
    )
    mig.add_argument("--json", action="store_true", help="one JSON object per Queue, in a list")
    mig.set_defaults(func=cmd_quotas_migrate)


def cmd_quotas_migrate(args: argparse.Namespace) -> int:
    from operators.kube import API_ERRORS, KubeApi, KubeConfigError, api_client
    from operators.kube.errors import error_message
    from operators.quotas.migrate import CONFLICT, MissingQuotaCrd, migrate

    _quiet_api_log()
    try:
        client = api_client(args.kubeconfig, args.context)
    except KubeConfigError as exc:
        sys.stderr.write(f"gpuflow: error: {exc}\n")
        return 2
    try:
        done = migrate(KubeApi(client), delete=args.delete, dry_run=args.dry_run)
    except MissingQuotaCrd as exc:
        sys.stderr.write(f"gpuflow: error: {exc}\n")
        return 2
    except API_ERRORS as exc:
        sys.stderr.write(f"gpuflow: error: the API server: {error_message(exc)}\n")
        return 1
    finally:
        client.close()
    if args.json:
        rows = [{"name": m.name, "result": m.result, "deleted": m.deleted} for m in done]
        sys.stdout.write(json.dumps(rows) + "\n")
    else:
        for m in done:
            sys.stdout.write(m.line(args.dry_run) + "\n")
        if not done:
            sys.stdout.write("no Queue objects: nothing to migrate\n")
    return 1 if any(m.result == CONFLICT for m in done) else 0


def _quiet_api_log() -> None:
    """The API wrapper logs each failed call (operators.kube); with no logging set up,
    Python would print that line too, beside the command's own one-line error."""
    logger = logging.getLogger("operators")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
