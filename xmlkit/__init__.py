"""xmlkit: extreme multi-label classification tools.

The command-line tools (xml-train, xml-predict, xml-prune, xml-eval) are thin
layers over this Python API.
"""
from importlib import import_module

from xmlkit._version import __version__
from xmlkit.errors import InputFormatError, XmlkitError

#: the API's names and the modules that hold them, imported when first used
#: (so that a command imports what it runs: xml-predict starts sooner)
_LAZY = {"FastXML": "xmlkit.models.fastxml", "PfastreXML": "xmlkit.models.pfastrexml",
         "LdSM": "xmlkit.models.ldsm", "Embed": "xmlkit.models.embed",
         "Linear": "xmlkit.models.linear", "Parabel": "xmlkit.models.parabel",
         "REGISTRY": "xmlkit.models",
         "load_model": "xmlkit.models", "fit_folder": "xmlkit.driver",
         "Calibrated": "xmlkit.models.calibrated"}

__all__ = ["__version__", "XmlkitError", "InputFormatError", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'xmlkit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
