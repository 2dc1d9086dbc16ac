"""The ``kfdef-operator`` command line.
"""
