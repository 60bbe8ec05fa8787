"""A bare django-ninja service: the baseline of issue 28's HTTP intake (bench/scenario_peers.py)."""
