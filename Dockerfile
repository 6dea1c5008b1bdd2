# The gpuflow image: operator, node agent, API, Celery workers and migrations
# (helm/gpuflow runs each with its own command). Build: docker build -t gpuflow:0.1.0 .
FROM python:3.11-slim

# tc (iproute2) for the node agent's bandwidth enforcer (docs/bandwidth.md).
RUN apt-get update \
    && apt-get install -y --no-install-recommends iproute2 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir .

# api/store/migrations.py and `alembic -c /app/alembic.ini` find alembic.ini and alembic/
# next to the api package, which the installed wheel does not carry: import the
# project from /app (the same code pip installed) so they are found.
# The containers run read-only with /tmp writable: numba's compiled-code cache (the
# coflow replay's kernels) and matplotlib's config go there.
ENV PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba

# The chart runs these containers read-only as this user (the agent as root, for tc).
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin gpuflow
USER 10001

ENTRYPOINT ["gpuflow"]
CMD ["--help"]
