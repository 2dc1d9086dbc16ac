"""Sources: fetching the repositories a KfDef names (https tarballs, git, local trees) into a local cache.
"""
