"""The schema's history; a migration that changes a SQL function freezes a copy of its text."""
