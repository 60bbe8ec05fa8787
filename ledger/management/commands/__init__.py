"""The management commands: thin callers of the services, one module each (``manage.py help``)."""
