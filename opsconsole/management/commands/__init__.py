"""The project's management commands: `submit` (its lines are the API's answers) and `demo_setup`
(the demo's embedded PostgreSQL)."""
