"""xml-prune (not implemented yet: issue #5)."""
from xmlkit.cli.common import not_implemented

main = not_implemented("xml-prune", 5)
