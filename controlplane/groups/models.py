"""No tables: a group lives in the brokers (its coordinator keeps its members and
committed offsets), and the control plane reads and changes it there, through the
gateway (``controlplane.gateway.groups``). Changes are audited as ``groups.group``."""
