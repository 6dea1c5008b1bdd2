"""The job database: the SQLAlchemy models, engines and sessions, Alembic migrations, and
the writes that must happen exactly once (group-committed submissions, idempotency keys,
a job row's end). Read and written by the routes and by both modes' followers."""
