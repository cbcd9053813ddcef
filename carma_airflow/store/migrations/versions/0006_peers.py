"""Several schedulers: executors' heartbeats, published reservations, each try's owner (issue 17).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

``carma_executor`` holds one row per CarmaExecutor (one per scheduler) with its heartbeat;
``carma_reservation`` the GPU memory each try holds, published by the executor that placed it,
so that a peer's placement pass counts it; ``carma_placement.owner`` names the executor that
placed (or adopted) the try, so that a restarted executor reconciles only tries whose owner is gone.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "carma_executor",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_carma_executor")),
    )
    op.create_table(
        "carma_reservation",
        sa.Column("key", sa.String(length=1024), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("label", sa.String(length=1024), nullable=False),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("mib", sa.Integer(), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("exclusive", sa.Boolean(), nullable=False),
        sa.Column("activity", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_carma_reservation")),
    )
    op.create_index(op.f("ix_carma_reservation_owner"), "carma_reservation", ["owner"])
    with op.batch_alter_table("carma_placement") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("carma_placement") as batch:
        batch.drop_column("owner")
    op.drop_index(op.f("ix_carma_reservation_owner"), table_name="carma_reservation")
    op.drop_table("carma_reservation")
    op.drop_table("carma_executor")
