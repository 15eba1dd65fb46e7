# by <tenant>/<name>; the document is read back as the control plane holds it
terraform import meridian_databus_config.checkout acme/checkout
