"""A bare django-ninja service: the baseline of the peers' HTTP intake (bench/scenario_peers.py)."""
