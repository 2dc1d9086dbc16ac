"""Orchestration: the desired-state builder and reconciler per KfDef, kopf handlers, the process runner and
its probe server.
"""
