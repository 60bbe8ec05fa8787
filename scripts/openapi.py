"""Writes the app's published OpenAPI document to clients/openapi.json (`make clients-openapi`).

The document is the one `GET /api/v1/openapi.json` serves, asked of the app through Django's test
client: no server, no database (the route reads none). It is written pretty-printed with sorted keys,
so a change of the API shows as a readable diff; the TypeScript client's types are generated from it
(clients/typescript, `npm run generate`), and tests/connectors/test_openapi_drift.py fails when either
differs from what is committed.

``python scripts/openapi.py`` writes the file; ``--print`` writes the document to standard output.
"""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "clients" / "openapi.json"
ROUTE = "/api/v1/openapi.json"
# The settings need these to load (DEBUG spares the production-only secrets); the route reads neither
# a secret nor the database.
SETTINGS_FOR_READING = {
    "DJANGO_SETTINGS_MODULE": "opsconsole.settings",
    "SECRET_KEY": "openapi-export-only",
    "DEBUG": "1",
    "DATABASE_URL": "postgres://127.0.0.1:1/none",
}


def published_document() -> str:
    """The app's OpenAPI document as the committed file holds it."""
    for name, value in SETTINGS_FOR_READING.items():
        os.environ.setdefault(name, value)
    sys.path.insert(0, str(ROOT))
    import django
    from django.test import Client

    django.setup()
    response = Client().get(ROUTE)
    if response.status_code != 200:
        raise SystemExit(f"{ROUTE} answered {response.status_code}, not 200: {response.content[:200]!r}")
    return as_committed(response.json())


def as_committed(document: dict) -> str:
    """The document as clients/openapi.json holds it: two-space indents, sorted keys, a last newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(arguments: list[str]) -> None:
    document = published_document()
    if "--print" in arguments:
        sys.stdout.write(document)
        return
    DOCUMENT.write_text(document, encoding="utf-8")
    print(f"wrote {DOCUMENT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
