# by client id, <tenant>--<name> (or the numeric id); the secret is not imported
terraform import meridian_service_account.billing acme--billing
