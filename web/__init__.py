"""The web console, mounted by the control plane at ``/console/``."""
