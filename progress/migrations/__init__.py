"""Alembic's script folder for the progress database: env.py and the revisions in versions/ (progress/migrate.py
runs them; nothing here is imported by the app)."""
