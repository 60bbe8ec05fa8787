"""The shared kernel every room builds on: the one verb that moves states (transitions), the audit
chain and its heads, selectors, tallies, nudges, policies, configuration versions, privacy, roles,
accounts (workspaces, tokens, members), the time pause switches held and the set-based SQL helpers.
It imports no other room."""
