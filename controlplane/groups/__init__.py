"""Consumer groups: a tenant's groups as the brokers keep them — state, members, lag in
records and in time — and the changes a tenant makes to them (reset offsets, delete)."""
