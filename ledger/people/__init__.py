"""People's decisions: review (replay, resolve, cancel), approvals, conflict decisions and bulk actions,
each checked against the person's role in the workspace."""
