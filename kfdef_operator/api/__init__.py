"""The KfDef API: the typed model of a KfDef and every name this operator puts on the wire.

The lowest layer: it imports nothing else of the package.
"""
