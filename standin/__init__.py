"""A stand-in external destination ("another company's API") for demos and fault tests."""

from standin.server import StandinServer, start_in_thread

__all__ = ["StandinServer", "start_in_thread"]
