"""English formats, which LANGUAGE_CODE en-us falls back to (formats.py beside this)."""
