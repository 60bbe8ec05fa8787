"""The project's management commands: those that answer as the API does or start the embedded PostgreSQL."""
