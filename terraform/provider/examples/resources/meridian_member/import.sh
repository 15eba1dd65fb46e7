# by <tenant>/<username> (or the numeric id)
terraform import meridian_member.alice acme/alice
