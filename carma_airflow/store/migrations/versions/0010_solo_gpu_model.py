"""The GPU model each solo run time was measured on (issue 44).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

``carma_activity_history.gpu_model``: the GPU model (its NVML name, as the placer sees it) of the
try whose solo run time ``solo_s`` is, so run times are kept per task and GPU model and the speed
ratios between models are learned from the tasks run alone on both (core/model_speed.py).  NULL
where the row has no solo run time, or was written before (its model is not known: such a run
counts for the task, not for any model).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.add_column(sa.Column("gpu_model", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.drop_column("gpu_model")
