"""The dashboard's source, shipped as package data and served as it is (no build step).

`src/` holds the browser's files: ES modules with JSDoc types (`dashboard.js` the shell,
one module per page), `index.html` and `dashboard.css`. `api/dashboard.py` serves that
folder at `/static/dashboard/`, found through `importlib.resources`, so a wheel
(`pip install .`) serves the same files as a source checkout. `package.json` pins the
TypeScript that checks their types (`npm ci && npm run typecheck` here; `make lint`
runs it). This module holds no code: it makes `web` a package whose data the
distribution installs.
"""
