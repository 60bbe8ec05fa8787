"""The engine: the worker's side of an operation's life. Claim due operations, perform them, record
what came of each under the claim's fencing token (succeeded, failed, attempts, fencing), the retry
schedule, lookups of ambiguous tries, destination health, django-q2 brokers and schedules."""
