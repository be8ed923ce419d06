"""Alembic's environment for the results database, run by `orchestrator.store.migrations.upgrade`
(never from the alembic command line): the caller's connection and transaction, the views
dropped before the revisions run and created from cell_stats.py's selects after them."""
from alembic import context

from orchestrator.store import cell_stats, schema

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("the orchestrator's migrations run through orchestrator.store.db.open_db, on a connection")

context.configure(connection=connection, target_metadata=schema.Base.metadata, render_as_batch=True)
with context.begin_transaction():  # the caller's transaction, which holds the write lock
    cell_stats.drop_views(connection)
    context.run_migrations()
    cell_stats.create_views(connection)
