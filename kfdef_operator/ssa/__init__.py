"""A server-side-apply resource manager that knows nothing of KfDefs.

API client, discovery, object identities and inventory ids, apply stages, staged apply with a change set,
prune, waits and health. Ownership and live-state lookups are passed in through small interfaces.
"""
