"""Reads for people: finding an operation, failure groups, the dashboard's figures and CSV exports.
Nothing here writes an operation."""
