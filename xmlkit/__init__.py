"""xmlkit: extreme multi-label classification tools.

The command-line tools (xml-train, xml-predict, xml-prune, xml-eval) are thin
layers over this Python API.
"""
from xmlkit._version import __version__
from xmlkit.driver import fit_folder
from xmlkit.errors import InputFormatError, XmlkitError
from xmlkit.models import REGISTRY, load_model
from xmlkit.models.embed import Embed
from xmlkit.models.fastxml import FastXML
from xmlkit.models.ldsm import LdSM
from xmlkit.models.linear import Linear
from xmlkit.models.pfastrexml import PfastreXML

__all__ = ["__version__", "XmlkitError", "InputFormatError", "FastXML", "PfastreXML", "LdSM",
           "Embed", "Linear", "REGISTRY", "load_model", "fit_folder"]
