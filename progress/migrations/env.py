"""Alembic's environment for the progress database: run the revisions on the connection progress/migrate.py
passes in ``config.attributes["connection"]`` (already inside its locked transaction), never on a URL of its own."""

from alembic import context

context.configure(connection=context.config.attributes["connection"], transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
