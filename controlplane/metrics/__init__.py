"""Rate and lag history: what the console charts.

``collect`` reads the brokers through the gateway every ``METRICS_INTERVAL_S`` (produce
rates of topics, consume rates and lag of consumer groups), ``store`` keeps the points in
two tiers (``tiers``) and rolls and prunes them, ``services`` answers the API's reads.
"""
