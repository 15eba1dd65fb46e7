"""Transactions and half messages: a tenant's transactional ids (their producer, state
and open transaction, with its partitions and age) and half messages (pending, checked
back, decided) as the brokers' transaction coordinators keep them, and the changes an
operator makes to them (abort a hanging transaction, decide a half message)."""
