"""Learned SM activity of each task (issue 13: learned activity and interference).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-14

``carma_activity_history`` holds one row per ended try whose solo SM activity could be measured
(0..1), with where the number came from: ``process`` (per-process SM utilisation), ``gpu-alone``
(the GPU's SM activity while the try was its only tenant) or ``hint`` (the DAG author's declared
value).  The activity estimate (``core.activity.estimate_activity``) reads a task's latest rows.
The learned interference coefficients need no table: the executor keeps them as the JSON
document ``model:interference`` in ``carma_snapshot``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "carma_activity_history",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=True),
        sa.Column("sm_activity", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=True),
        sa.CheckConstraint("source IN ('process', 'gpu-alone', 'hint')", name=op.f("ck_carma_activity_history_source")),
        sa.CheckConstraint("sm_activity >= 0 AND sm_activity <= 1", name=op.f("ck_carma_activity_history_sm_activity")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_carma_activity_history")),
    )
    op.create_index(
        op.f("ix_carma_activity_history_dag_id_task_id_at"), "carma_activity_history", ["dag_id", "task_id", "at"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_carma_activity_history_dag_id_task_id_at"), table_name="carma_activity_history")
    op.drop_table("carma_activity_history")
