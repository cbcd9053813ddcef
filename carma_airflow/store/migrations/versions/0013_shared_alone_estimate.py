"""A shared try's run alone as estimated from it (issue 44).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

``carma_activity_history.shared_alone_s``: beside ``shared_s`` (a first try's run time where it
shared its GPUs all along), its task's run alone as estimated from it: ``shared_s`` over the
slowdown the completion-time policy predicted when it placed the try
(core/policies/durations.py ``alone_from_shared``).  The policy prices a task that never ran
alone at the median of these, not at the other tasks' median; an executor that restarts reads them
back with the bounds.  NULL: no slowdown was predicted (placed alone, another policy), or the row
was written before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.add_column(sa.Column("shared_alone_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.drop_column("shared_alone_s")
