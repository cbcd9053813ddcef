"""Each try's fence margin travels with its reservation and its placement (issue 22).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

``carma_reservation.fence`` and ``carma_placement.fence``: a JSON object with the try's
``kept_margin_mib``, what the placer keeps above its reservation for its life under the fence it
started with (``null``: unfenced, counted as the paper counts).  A peer scheduler lays a published
reservation over its view with that margin, and an executor that restarts holds a try it finds
running with it, instead of with its own host's configured fence.  NULL (rows written before, by
an older writer): not published, the reader's host's fence is assumed as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("carma_reservation", "carma_placement")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("fence", sa.JSON(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("fence")
