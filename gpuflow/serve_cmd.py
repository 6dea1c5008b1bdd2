"""`gpuflow serve`, `submit`, `jobs`, `cancel` and `admin create`: the service commands.

gpuflow.cli registers them with `add_parsers(subparsers)`. `serve` runs the API in
local mode (the simulator on the wall clock, no Kubernetes); the others talk to it
through api.client (--url/--token or GPUFLOW_URL/GPUFLOW_TOKEN). Each handler
returns an exit code: 0 ok, 1 the server or the database refused or could not be
reached, 2 bad input or, for `serve` in local mode, a database another server holds
(api.local_mode.server_lock).

`serve --workers N` runs N uvicorn worker processes on one port, each its own app
over the database (submissions, group commits, followers: all stateless over it, as
several API replicas are). The rule: N > 1 only in cluster mode with a broker. Local
mode keeps its scheduler, the LiveCluster, in the memory of one process (one server
per database, api.local_mode.server_lock), and without a broker each process would run the
replays it found at start (api.tasks.start_replays) as its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from typing import Any

from controller.model.precision import CHOICES as PRECISIONS
from gpuflow import options

DEFAULT_URL = "http://127.0.0.1:8000"


def add_parsers(sub: Any) -> None:
    """Register the service commands on the CLI's subparsers object."""
    serve = sub.add_parser("serve", help="run the API and a local simulated cluster")
    serve.add_argument("--cluster", "-c", help="preset or NODESxGPUS (default 16x4)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=options.port, default=8000, help="TCP port (default 8000)")
    serve.add_argument("--policy", "-p", help="scheduling policy (default fifo)")
    serve.add_argument(
        "--time-scale",
        type=options.positive_float,
        dest="time_scale",
        help="simulated seconds per wall second (default 1)",
    )
    serve.add_argument("--data-dir", dest="data_dir", help="SQLite, uploads, plots")
    serve.add_argument(
        "--workers",
        type=options.bounded_int(1, 64),
        default=1,
        help="HTTP worker processes (default 1); more than 1 in cluster mode with a"
        " broker only: local mode's scheduler lives in one process",
    )
    serve.set_defaults(func=cmd_serve)

    submit = sub.add_parser("submit", help="submit a job to a running server")
    _client_options(submit)
    submit.add_argument("--gpus", "-g", type=options.positive_int, required=True)
    submit.add_argument("--duration", type=options.positive_float, help="seconds on --gpus GPUs")
    submit.add_argument("--iterations", type=options.positive_float)
    submit.add_argument("--model", "-m", default="generic")
    submit.add_argument("--name", "-n", default="job")
    submit.add_argument("--priority", type=options.integer, default=0)
    submit.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="what the job trains in (default tf32; docs/clusters.md, 'Speeds')",
    )
    submit.add_argument(
        "--image", help="cluster mode: the worker's image (default: GPUFLOW_KUBE_IMAGE's)"
    )
    submit.add_argument(
        "--command",
        help="cluster mode: the worker's command line, split as a shell would"
        " (e.g. 'python -m examples.train.train --steps=2000')",
    )
    submit.set_defaults(func=cmd_submit)

    jobs = sub.add_parser("jobs", help="list jobs on a running server")
    _client_options(jobs)
    jobs.add_argument("--status", help="e.g. Running, Queued, Succeeded")
    jobs.add_argument("--limit", type=options.bounded_int(1, 1000), default=100)
    jobs.set_defaults(func=cmd_jobs)

    cancel = sub.add_parser("cancel", help="cancel a job on a running server")
    _client_options(cancel)
    cancel.add_argument("job_id")
    cancel.set_defaults(func=cmd_cancel)

    admin = sub.add_parser("admin", help="administer the job database").add_subparsers(
        metavar="ACTION"
    )
    create = admin.add_parser("create", help="create an admin user; prints its token once")
    create.add_argument("name")
    create.add_argument("--tenant", default="admin")
    create.add_argument("--data-dir", dest="data_dir")
    create.set_defaults(func=cmd_admin_create)


def _client_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=os.environ.get("GPUFLOW_URL", DEFAULT_URL))
    p.add_argument("--token", default=os.environ.get("GPUFLOW_TOKEN"))
    p.add_argument("--json", action="store_true", help="print the server's JSON")


def _settings(args: argparse.Namespace) -> Any:
    from api.settings import Settings

    overrides = {
        k: v
        for k, v in {
            "cluster": getattr(args, "cluster", None),
            "policy": getattr(args, "policy", None),
            "time_scale": getattr(args, "time_scale", None),
            "data_dir": getattr(args, "data_dir", None),
        }.items()
        if v is not None
    }
    return Settings(**overrides)


def _settings_env(args: argparse.Namespace) -> dict[str, str]:
    """The command line's settings as GPUFLOW_* variables, for worker processes."""
    given = {arg: getattr(args, arg, None) for arg in ("cluster", "policy", "time_scale")}
    given["data_dir"] = getattr(args, "data_dir", None)
    return {f"GPUFLOW_{arg.upper()}": str(v) for arg, v in given.items() if v is not None}


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"gpuflow: error: {message}\n")
    return code


def _database_unusable(settings: Any, exc: Exception) -> int:
    """One line for a database that is down, missing or refuses us (no password shown)."""
    from sqlalchemy.engine import make_url

    url = make_url(settings.sqlalchemy_url()).render_as_string(hide_password=True)
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return _fail(f"cannot use the database {url}: {reason[0] if reason else 'error'}", 1)


def cmd_serve(args: argparse.Namespace) -> int:
    import psycopg
    import uvicorn
    from pydantic import ValidationError
    from sqlalchemy.exc import OperationalError

    from api.app import create_app
    from api.local_mode import server_lock
    from api.store.db import make_engine
    from api.store.migrations import upgrade

    try:
        settings = _settings(args)
    except (ValidationError, ValueError) as exc:
        return _fail(" ".join(str(exc).split()), 2)
    workers: int = getattr(args, "workers", 1)
    if workers > 1 and not settings.cluster_mode:
        return _fail(
            f"--workers {workers} needs cluster mode: local mode schedules in one process", 2
        )
    if workers > 1 and not settings.broker_url:
        why = "replays must run in Celery workers, not in each process"
        return _fail(f"--workers {workers} needs a broker (GPUFLOW_BROKER_URL): {why}", 2)
    lock = None
    lost: list[str] = []

    def stop_serving(message: str) -> None:
        # Another server took the database while our lock's session was gone: stop
        # scheduling (uvicorn shuts down on SIGTERM).
        lost.append(message)
        os.kill(os.getpid(), signal.SIGTERM)

    try:
        if settings.live and not settings.cluster_mode:
            # One scheduler per database, checked before anything is migrated or read.
            lock = server_lock.acquire(settings, on_lost=stop_serving)
        engine = make_engine(settings)
        try:
            upgrade(engine)
        finally:
            engine.dispose()
        if workers > 1:
            # Each worker builds its app from the environment (api.app.create_app).
            os.environ.update(_settings_env(args))
            uvicorn.run(
                "api.app:create_app",
                factory=True,
                workers=workers,
                host=args.host,
                port=args.port,
                log_level="info",
            )
        else:
            uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info")
    except server_lock.ServerLockHeld as exc:
        return _fail(str(exc), 2)
    except (OperationalError, psycopg.OperationalError) as exc:
        return _database_unusable(settings, exc)
    except (ValidationError, ValueError) as exc:
        return _fail(" ".join(str(exc).split()), 2)
    finally:
        if lock is not None:
            lock.release()
    if lost:
        return _fail(f"stopped: {lost[0]}", 1)
    return 0


def cmd_admin_create(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import IntegrityError, OperationalError

    from api.http.security import create_admin
    from api.store.db import make_engine, make_sessionmaker
    from api.store.migrations import upgrade

    settings = _settings(args)
    engine = make_engine(settings)
    try:
        upgrade(engine)
        with make_sessionmaker(engine)() as session:
            token = create_admin(session, args.name, args.tenant)
    except IntegrityError:
        return _fail(f"user {args.name!r} exists", 2)
    except OperationalError as exc:
        return _database_unusable(settings, exc)
    finally:
        engine.dispose()
    sys.stdout.write(
        f"created admin {args.name!r} (tenant {args.tenant!r}); its token, shown once:\n{token}\n"
    )
    return 0


def _with_client(args: argparse.Namespace, call: Any) -> int:
    """Run `call` with a client; a refusal is one `field: message` line per error."""
    from api.client import Client, ClientError
    from gpuflow.api_output import error_lines, jobs_table

    try:
        with Client(args.url, args.token) as client:
            result = call(client)
    except ClientError as exc:
        sys.stderr.writelines(
            f"gpuflow: error: {line}\n" for line in error_lines(exc.status, exc.detail)
        )
        return 1
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write(jobs_table(result.get("data", [result])))
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    spec = {
        "name": args.name,
        "num_gpus": args.gpus,
        "model": args.model,
        "priority": args.priority,
        "duration_s": args.duration,
        "iterations": args.iterations,
        "precision": args.precision,
    }
    if args.duration is None and args.iterations is None:
        return _fail("give --duration or --iterations", 2)
    spec["image"] = args.image
    if args.command is not None:
        try:
            spec["command"] = shlex.split(args.command)
        except ValueError as exc:  # an unclosed quote
            return _fail(f"--command: {exc}", 2)
        if not spec["command"]:
            return _fail("--command: empty", 2)
    return _with_client(
        args, lambda c: c.submit_job({k: v for k, v in spec.items() if v is not None})
    )


def cmd_jobs(args: argparse.Namespace) -> int:
    return _with_client(args, lambda c: c.list_jobs(status=args.status, limit=args.limit))


def cmd_cancel(args: argparse.Namespace) -> int:
    return _with_client(args, lambda c: c.cancel_job(args.job_id))
