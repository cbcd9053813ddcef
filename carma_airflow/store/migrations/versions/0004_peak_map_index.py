"""The map index of each learned memory peak (per-instance memory of mapped tasks).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-09

``carma_memory_history.map_index`` says which instance of a mapped task a peak came from (-1: an
unmapped task), so the history estimator can size each instance from its own earlier runs.
Rows written before this revision keep ``map_index`` NULL: they count for the task as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_memory_history") as batch:
        batch.add_column(sa.Column("map_index", sa.Integer(), nullable=True))
    op.create_index(
        op.f("ix_carma_memory_history_dag_id_task_id_map_index_at"),
        "carma_memory_history",
        ["dag_id", "task_id", "map_index", "at"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_carma_memory_history_dag_id_task_id_map_index_at"), table_name="carma_memory_history")
    with op.batch_alter_table("carma_memory_history") as batch:
        batch.drop_column("map_index")
