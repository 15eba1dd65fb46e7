# by the entry's numeric id
terraform import meridian_topic_acl.billing_reads_orders 42
