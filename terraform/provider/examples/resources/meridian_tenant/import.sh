# by slug
terraform import meridian_tenant.acme acme
