"""API upgrades: objects of API versions the cluster no longer serves converted to served ones (pure).
"""
