"""Builds: kfctl-compatible kustomization generation and ``kustomize build`` of each application, with a render cache.
"""
