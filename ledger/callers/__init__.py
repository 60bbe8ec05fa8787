"""Operations their callers perform (docs/claims.md): an automation claims one (``claims``), acts
at its own destination under the claim's idempotency key, heartbeats while it works, and reports
what came of it (``reports``). Every call with a claim's token is fenced by it."""
