"""Model families behind one interface: ``fit(X, Y)``, ``predict(X, k)``,
``save(folder)``, ``load(folder)``; REGISTRY maps family names to them."""
from xmlkit import store
from xmlkit.errors import XmlkitError
from xmlkit.models.embed import Embed
from xmlkit.models.tree_family import stored_trees
from xmlkit.models.fastxml import FastXML
from xmlkit.models.ldsm import LdSM
from xmlkit.models.linear import Linear
from xmlkit.models.parabel import Parabel
from xmlkit.models.pfastrexml import PfastreXML

REGISTRY = {cls.algorithm: cls
            for cls in (FastXML, PfastreXML, Parabel, LdSM, Embed, Linear)}


def get_class(algorithm):
    try:
        return REGISTRY[algorithm]
    except KeyError:
        raise XmlkitError(f"unknown algorithm '{algorithm}' (known: "
                          f"{', '.join(sorted(REGISTRY))})") from None


def _is_cpp_folder(folder):
    from xmlkit.models.cpp_model import is_cpp_model
    return not store.is_model_folder(folder) and is_cpp_model(folder)


def load_model(folder, trees=None, threads=1):
    """Load an xmlkit model folder, or a C++ FastXML model folder (`threads`
    read compact tree files in parallel; mapped tree files are opened in
    place and verified before their first use: see
    xmlkit.models.folders.load_folder)."""
    if _is_cpp_folder(folder):
        from xmlkit.models.cpp_model import load_cpp_model
        return load_cpp_model(folder, trees)
    m = store.read_manifest(folder)
    return get_class(m["algorithm"]).load(folder, trees, threads=threads)


def tree_indices(folder):
    """Indices of the trees stored in a model folder (xmlkit or C++)."""
    from pathlib import Path
    if _is_cpp_folder(folder):
        return sorted(int(p.stem) for p in Path(folder).glob("*.tree")
                      if p.stem.isascii() and p.stem.isdigit() and len(p.stem) < 10)
    return stored_trees(folder, store.read_manifest(folder))
