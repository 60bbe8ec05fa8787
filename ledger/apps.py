"""The ledger app: an operation's life, from intake to its outcome."""

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self):
        from ledger import checks  # noqa: F401  (registers the system checks)
        from ledger.engine import cluster_workers  # noqa: F401  (a cluster worker freezes what it loaded)
        from ledger.integrations import configured  # noqa: F401  (the configured HTTP actions join the registry)
