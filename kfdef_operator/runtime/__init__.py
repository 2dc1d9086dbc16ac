"""What keeps a stack alive between reconciles: ownership stamps, the watch-fed tracker, healing, status
conditions, events and metrics.
"""
