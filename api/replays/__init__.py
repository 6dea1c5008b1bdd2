"""Replays over REST: traces checked in child processes, stored replays run by Celery
workers or by the API's own child processes, shared fairly across tenants by the
dispatcher, recovered when their runner dies, and their series read for the dashboard."""
