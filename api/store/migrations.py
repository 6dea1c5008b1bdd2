"""Migrating the job database with Alembic (alembic/ at the project root).

Called by `gpuflow serve` and `gpuflow admin create` (upgrade to head before use)
and by the tests.
"""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from sqlalchemy import Engine

from alembic import command

ROOT = Path(__file__).resolve().parents[2]


def alembic_config() -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.attributes["configure_logger"] = False
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    with engine.begin() as conn:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
