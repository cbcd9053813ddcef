"""Task process identity on placements (restart reconciliation) and executor snapshots (UI page).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

``pid`` and ``pid_start`` (the process start time in clock ticks since boot, from
/proc/PID/stat) identify a try's process across an executor restart without trusting a
reused PID; ``ti_id`` is the Airflow task-instance UUID (it names the try's result file).
``carma_snapshot`` holds one JSON document per name (an executor's live view of its GPUs and
queue), rewritten every few seconds and read by the UI page.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_placement") as batch:
        batch.add_column(sa.Column("pid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("pid_start", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("ti_id", sa.String(length=64), nullable=True))
    op.create_table(
        "carma_snapshot",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_carma_snapshot")),
    )


def downgrade() -> None:
    op.drop_table("carma_snapshot")
    with op.batch_alter_table("carma_placement") as batch:
        batch.drop_column("ti_id")
        batch.drop_column("pid_start")
        batch.drop_column("pid")
