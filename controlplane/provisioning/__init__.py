"""Provisioners: who starts a cluster's brokers. The contract (``Provisioner``) and the
choice per cluster (``get_provisioner``) are the regions app's
(``controlplane.regions.provisioners``); this app holds the implementations and
registers them when Django starts (``apps.ProvisioningConfig``)."""
