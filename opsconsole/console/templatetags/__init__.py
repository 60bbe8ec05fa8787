"""The console's template filters and tags."""
