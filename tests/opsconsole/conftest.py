import io
import logging
from contextlib import contextmanager

from opsconsole.logging import JsonFormatter


@contextmanager
def json_log(logger_name: str):
    """What ``logger_name`` writes while the block runs, through the project's JSON formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
