"""The region controller: one active process per region (see ``controller.Controller``),
run as ``python -m controlplane.controller --region NAME``."""
