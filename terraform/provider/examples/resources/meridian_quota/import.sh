# by tenant slug
terraform import meridian_quota.acme acme
