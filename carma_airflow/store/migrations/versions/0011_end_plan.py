"""Each try's retry plan is recorded with its placement (issue 43, item 2).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

``carma_placement.end_plan``: a JSON object, the try's retry for each way it can end (a CUDA OOM
past its cap or on a full GPU, a GPU fault, a kill by a signal, any other failure: retry or fail,
and the reason Airflow shows), decided once by the executor when it launched the try
(core/recovery.py ``EndPlan.as_json``) and handed to the try in ``CARMA_END_PLAN``; with it the
counts it was decided from (the author's retries, the OOM retries, the earlier OOM tries).  An
executor that restarts and adopts the try ends it by the same plan.  NULL: a try not launched yet,
refused before it was planned, or written before (by an older writer).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_placement") as batch:
        batch.add_column(sa.Column("end_plan", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("carma_placement") as batch:
        batch.drop_column("end_plan")
