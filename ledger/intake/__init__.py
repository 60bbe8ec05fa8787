"""Intake, where events arrive: an arriving event validated, keyed and reserved once (submit, decoding, reservation,
ordering of versions). Every entry point (the HTTP API, the command line, a replay) comes through
here."""
