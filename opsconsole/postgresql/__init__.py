"""Django's PostgreSQL backend with a health check that sends nothing (``base.DatabaseWrapper``)."""
