from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self):
        from ledger import actions, checks  # noqa: F401  (registers actions and system checks)
