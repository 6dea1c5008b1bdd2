"""What every request passes through: the bearer-token and body-size guard, the check of
unknown query parameters, the exception handlers that turn a dependency's failure into a
503, the Prometheus middleware, and the tokens' hashing. `api.app.create_app` installs
them; `api.deps` reads the guard's verdict."""
