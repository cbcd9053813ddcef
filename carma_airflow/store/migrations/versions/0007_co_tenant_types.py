"""The task types of the co-tenants each learned activity was measured beside (issue 23).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

``carma_activity_history.co_tasks``: a JSON list of the task types the ended try shared its GPUs
with while it ran (``[]``: alone throughout), so that what was learned of a task says whom it ran
with.  NULL for rows written before (and for a declared hint): not recorded, not "alone".  The
interference observations themselves (``model:interference`` in ``carma_snapshot``) name the
co-tenants' types per segment in their JSON, as they did since issue 19.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.add_column(sa.Column("co_tasks", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("carma_activity_history") as batch:
        batch.drop_column("co_tasks")
