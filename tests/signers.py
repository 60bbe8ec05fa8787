"""Webhook senders signing with code we did not write: each function signs a body
with the scheme's own third-party library and returns the headers a real sender would send with it.

- Standard Webhooks: the `standardwebhooks` Python library (requirements-dev.txt).
- GitHub: `@octokit/webhooks-methods`' `sign`; Stripe: the `stripe` npm package's
  `webhooks.generateTestHeaderString`. Both run in a `node` process (tests/signers.mjs), one per
  signature, from the repository's node_modules: package.json and package-lock.json, installed by
  `make node_modules` (which `make test` runs first).

Without node_modules (or with other versions than the lock's) the npm signers raise `SignerUnavailable`
naming `make node_modules`: a test that needs them fails, it is not skipped. Only a machine with no
`node` at all skips them, through `needs_node`, with the reason in the run's summary.
"""

import json
import shutil
import subprocess
from datetime import UTC, datetime
from math import floor
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).with_name("signers.mjs")
NODE_PACKAGES = ("@octokit/webhooks-methods", "stripe")
INSTALL = "make node_modules"

# For the tests that sign with the npm packages: skipped, with this reason, only where there is no node.
needs_node = pytest.mark.skipif(
    shutil.which("node") is None,
    reason="no `node` on PATH: the GitHub and Stripe senders sign with npm packages (Node.js 20+)",
)


class SignerUnavailable(RuntimeError):
    """The npm signers cannot run: node or the locked packages are missing."""


def standard_webhooks(secret: str, msg_id: str, body: bytes, timestamp: datetime) -> dict[str, str]:
    """Standard Webhooks headers for `body` (`secret`: `whsec_<base64>`). A naive `timestamp` is UTC,
    as the library reads it."""
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(floor(timestamp.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, timestamp, body),
    }


def github(secret: str, body: bytes, *, event: str, delivery: str) -> dict[str, str]:
    """GitHub's headers for `body`, signed by `@octokit/webhooks-methods`."""
    return {
        "X-Hub-Signature-256": _node_sign("github", secret, body),
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "Content-Type": "application/json",
    }


def stripe(secret: str, body: bytes, timestamp: int) -> dict[str, str]:
    """Stripe's `Stripe-Signature` for `body` at `timestamp` (Unix seconds), by the `stripe` package.
    The secret is used as given (`whsec_...` included), as Stripe does."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp <= 0:
        # stripe-node takes a missing or zero timestamp as "now": refuse it rather than sign another.
        raise ValueError(f"timestamp must be a positive int (Unix seconds), not {timestamp!r}")
    return {"Stripe-Signature": _node_sign("stripe", secret, body, timestamp=timestamp)}


def _node_sign(scheme: str, secret: str, body: bytes, **extra) -> str:
    node = shutil.which("node")
    if node is None:
        raise SignerUnavailable(f"no `node` on PATH: the {scheme} sender signs with an npm package (Node.js 20+)")
    check_node_modules()
    # Both packages sign a JS string, which they hash as UTF-8: the body must be UTF-8 to be signed
    # byte for byte (webhook bodies are JSON). JSON carries the text to node unchanged.
    payload = body.decode("utf-8")
    request = json.dumps({"scheme": scheme, "secret": secret, "payload": payload, **extra})
    run = subprocess.run(
        [node, str(SCRIPT)], input=request, capture_output=True, text=True, cwd=ROOT, timeout=30, check=False
    )
    if run.returncode != 0:
        raise SignerUnavailable(f"the {scheme} signer failed (node exit {run.returncode}): {run.stderr.strip()}")
    return json.loads(run.stdout)["header"]


def check_node_modules(
    packages: tuple[str, ...] = NODE_PACKAGES,
    *,
    needed_for: str = "to sign",
    error: type[RuntimeError] = SignerUnavailable,
) -> None:
    """`packages` (the npm signers' by default) are installed at the versions package-lock.json pins;
    else `error` names `make node_modules` (tests/third_party.py checks its servers' the same way)."""
    try:
        locked = json.loads((ROOT / "package-lock.json").read_text())["packages"]
    except (OSError, ValueError, KeyError) as failure:
        raise error(f"cannot read {ROOT / 'package-lock.json'}: {failure}") from failure
    for name in packages:
        want = locked[f"node_modules/{name}"]["version"]
        manifest = ROOT / "node_modules" / name / "package.json"
        try:
            have = json.loads(manifest.read_text())["version"]
        except (OSError, ValueError, KeyError):
            have = None
        if have != want:
            found = f"version {have} is installed" if have else "it is not installed"
            raise error(
                f"npm package {name} {want} (package-lock.json) is needed {needed_for} and {found} "
                f"in {ROOT / 'node_modules'}: run `{INSTALL}` (`make test` runs it)"
            )
