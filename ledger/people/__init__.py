"""People's decisions: review (``review``: replays, resolutions, cancellations), approvals, conflict
decisions and bulk actions, each checked against the person's role in the workspace; and the pause
switches (``pause``) a person pulls and releases."""
