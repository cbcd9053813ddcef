"""GPU hosts and their agents (multi-host dispatch through Celery).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

``carma_host`` holds one row per GPU host, rewritten by the host's agent every sampling period:
its heartbeat and the newest reading of each of its GPUs as JSON (one row per host keeps the
write load at one small upsert per host per period), and the heartbeat of the host's Celery
worker (``worker_at``, written by the worker itself).  ``carma_dispatch`` records every try sent
to a host's Celery queue, so a worker can check that the try is still wanted before it runs it
(a host that came back after being declared lost must not run its old tries).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "carma_host",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("agent_version", sa.String(length=64), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("worker_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("worker_pid", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_carma_host")),
    )
    op.create_table(
        "carma_dispatch",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=1024), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("celery_id", sa.String(length=64), nullable=False),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.CheckConstraint("state IN ('sent', 'ended', 'lost')", name=op.f("ck_carma_dispatch_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_carma_dispatch")),
        sa.UniqueConstraint("key", name=op.f("uq_carma_dispatch_key")),
    )
    op.create_index(op.f("ix_carma_dispatch_host_state"), "carma_dispatch", ["host", "state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_carma_dispatch_host_state"), table_name="carma_dispatch")
    op.drop_table("carma_dispatch")
    op.drop_table("carma_host")
