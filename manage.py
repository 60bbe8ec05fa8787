#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opsconsole.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:
        # What the settings refuse (DATABASE_URL unset, SECRET_KEY without DEBUG, ...) says what to
        # set in its own words: one line, not the import machinery's forty.
        sys.exit(f"manage.py: {error}")


if __name__ == "__main__":
    main()
