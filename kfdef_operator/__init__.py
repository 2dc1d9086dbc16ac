"""kfdef-operator: deploys, heals and tears down stacks described by KfDef resources."""

__version__ = "0.1.0"
