"""How long a first try ran where it shared its GPUs all along (issue 41).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

``carma_activity_history.shared_s``: the run time of a task's first try that shared its GPUs from
start to end, so its run alone was never measured.  It bounds the task's run alone from above (a
co-tenant only slows it): the completion-time policy prices a task without solo run times at most
that long (core/policies/durations.py ``DurationBook.bound``), and an executor that restarts reads
the bounds back.  ``gpu_model`` is now also kept with it.  NULL: the try ran alone (``solo_s``), was
a retry, or the row was written before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.add_column(sa.Column("shared_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.drop_column("shared_s")
