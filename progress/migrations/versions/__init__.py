"""The schema revisions of the progress database, oldest first (Alembic reads them; see progress/migrate.py)."""
