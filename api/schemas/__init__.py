"""Request and response bodies, one module per resource (JobCreate, JobPublic, ...)."""
