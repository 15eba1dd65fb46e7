# by <tenant>/<name>
terraform import meridian_lane.ppe acme/ppe
