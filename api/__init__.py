"""The gpuflow service: REST API, job database, Celery replays, local mode.

The top floor of the layers: imports controller and policies; nothing imports api
except `gpuflow serve` and its client commands (gpuflow/serve_cmd.py).
"""
