"""xml-predict (not implemented yet: issue #3)."""
from xmlkit.cli.common import not_implemented

main = not_implemented("xml-predict", 3)
