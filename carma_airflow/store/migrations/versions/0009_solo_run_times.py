"""The solo run time of each learned try that ran alone throughout (round 41).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05

``carma_activity_history.solo_s``: how long the ended try ran where it shared its GPUs with no
other try from start to end: its task's solo run time, the baseline of a collocated try's stretch
and what the completion-time policy prices with.  NULL where it shared its GPUs, ran too briefly
to tell, or the row was written before (an executor then learned its run times again after every
restart).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.add_column(sa.Column("solo_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.drop_column("solo_s")
