"""The estimator conventions every model family follows (scikit-learn's).

A family's ``__init__`` takes keyword-only parameters and stores each one
unchanged under its own name: the signature is the one place for defaults
(the command-line tools read them from it), ``help(cls)`` shows them, and
``get_params`` / ``set_params`` / ``sklearn.base.clone`` work from it.
Parameters are checked when ``fit`` starts, against the constraints a family
declares once in ``_parameter_constraints``; a violation raises
InvalidParameterError (a ValueError) naming the parameter.
"""
import inspect
import math
import numbers
from types import SimpleNamespace

import numpy as np

from xmlkit.errors import InvalidParameterError, XmlkitError


class Constraint:
    """A test on a parameter value and the phrase that describes it."""

    def __init__(self, phrase, test, values=()):
        self.phrase = phrase
        self.test = test
        self.values = values        # the values it takes, when they are a list

    def __call__(self, value):
        try:
            return bool(self.test(value))
        except (TypeError, ValueError):
            return False


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _is_real(v):
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


#: the largest value of a C int: the bound of the integer parameters the
#: kernels take as int
C_INT_MAX = 2 ** 31 - 1
#: the most trees a model may ask for (what is allocated per wanted tree
#: up front stays small)
MAX_TREES = 100_000


def integer(lo=None, hi=C_INT_MAX):
    """An integer in [lo, hi] (either bound may be None; hi is a C int's
    largest value unless given)."""
    phrase = ("an integer" + (f" >= {lo}" if lo is not None and hi is None else "")
              + (f" <= {hi}" if hi is not None and lo is None else "")
              + (f" in [{lo}, {hi}]" if lo is not None and hi is not None else ""))
    return Constraint(phrase, lambda v: _is_int(v) and (lo is None or v >= lo)
                      and (hi is None or v <= hi))


def real(lo=None, hi=None, lo_open=False, hi_open=False):
    """A finite number between lo and hi (open ends as asked)."""
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi}")
    phrase = "a finite number" + (" " + " and ".join(parts) if parts else "")

    def test(v):
        if not _is_real(v) or not math.isfinite(v):
            return False
        if lo is not None and (v <= lo if lo_open else v < lo):
            return False
        return hi is None or (v < hi if hi_open else v <= hi)
    return Constraint(phrase, test)


def one_of(*values):
    return Constraint("one of " + ", ".join(repr(v) for v in values),
                      lambda v: isinstance(v, str) and v in values, values)


def boolean():
    return Constraint("True or False", lambda v: isinstance(v, (bool, np.bool_)))


def optional(c):
    return Constraint(f"None or {c.phrase}", lambda v: v is None or c(v))


def auto_or(c):
    """"auto" (the family picks a value from the data) or a value that `c` takes."""
    return Constraint(f"'auto' or {c.phrase}", lambda v: v == "auto" or c(v))


#: the label-set parameters of a family whose scores rank labels but are not
#: probabilities: its label sets come from a calibration, which maps the
#: scores (xmlkit.models.calibrated.Calibrated, or a model folder calibrated by
#: xml-calibrate or xml-train)
RANKED_DECISION = {"decision": ("scores", one_of("scores", "threshold")),
                   "threshold": (None, optional(real(0, 1)))}


def check_ranked_decision(name, used):
    """The rule of RANKED_DECISION: the family itself gives scores only."""
    if used["decision"] != RANKED_DECISION["decision"][0] or used["threshold"] is not None:
        raise InvalidParameterError(
            ("decision", "threshold"),
            f"{name}: its scores rank the labels but are not probabilities, so its label sets "
            "and probability cuts need a calibration: xmlkit.Calibrated, or a model folder "
            "holding one (xml-calibrate, or xml-train's calibration)")


def array_like():
    return Constraint("an array of numbers", lambda v: np.asarray(v, dtype=np.float64).ndim == 1)


def machine_threads():
    """The cores this process may run on."""
    import os
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def usable_threads(threads, work=None):
    """The threads worth starting for `threads` asked: at most the cores
    this process may run on and (when given) the pieces of `work`, at least
    1. Results never depend on the count (same seed, same bytes), so a
    larger number only costs memory: a grower or a buffer per thread."""
    n = min(int(threads), machine_threads())
    if work is not None:
        n = min(n, int(work))
    return max(1, n)


#: random seeds: non-negative 64-bit integers
SEED = integer(0, 2 ** 63 - 1)


class Estimator:
    """Parameters, their checks and their copies, the scikit-learn way.

    A subclass writes a keyword-only ``__init__`` that stores its arguments
    unchanged, and declares ``_parameter_constraints`` (name -> Constraint);
    checks that involve several parameters go in ``_check_more``.
    """

    #: family name (xml-train --algorithm, model folder manifests)
    algorithm = None
    #: parameter name -> Constraint, checked when fit starts
    _parameter_constraints = {}
    #: the parameters by purpose: ((title, (name, ...)), ...), every
    #: parameter once, in the signature's order; the __init__ docstring's
    #: sections ("<title> parameters") and xml-train --help's ("<title>
    #: options") follow it
    PARAM_GROUPS = ()
    #: the parameters that define a trained model (recorded in its folder);
    #: the others only say how to train it
    MODEL_KEYS = ()
    #: predict()'s own parameters (beyond X, k, threads, progress): name ->
    #: (default, Constraint), their one declaration. A fitted model records
    #: them (predict_params_, saved in its folder's manifest); predict()
    #: takes None for "the model's": the recorded value, else the default.
    #: The commands read their xml-predict options from here.
    PREDICT_PARAMS = {}

    @classmethod
    def predict_defaults(cls):
        """Predict parameter name -> its declared default."""
        return {name: default for name, (default, _) in cls.PREDICT_PARAMS.items()}

    def _predict_params(self, **given):
        """The predict parameters to use: each given one (not None), else the
        model's recorded one, else its default; checked against its
        constraint and the family's rules between them (_check_predict:
        InvalidParameterError naming the parameter)."""
        recorded = getattr(self, "predict_params_", None) or {}
        out = {}
        for name, (default, c) in self.PREDICT_PARAMS.items():
            value = given.get(name)
            if value is None:
                value = recorded.get(name, default)
            if not c(value):
                raise InvalidParameterError(
                    name, f"{type(self).__name__}: {name} must be {c.phrase}, got {value!r}")
            out[name] = value
        self._check_predict(given, out)
        return out

    #: the predict parameters that decide label sets from the scores (or
    #: which labels are scored) without changing a score: other_scores
    #: leaves them out; every other one is taken to change the scores
    KEEPS_SCORES = ("decision", "threshold")

    def other_scores(self, **given):
        """The predict parameters among `given` whose values change the
        scores themselves from the model's own (not which labels are scored,
        nor how they are decided): a calibration maps the model's own
        scores (xmlkit.models.calibrated.other_scoring). Each one not in
        KEEPS_SCORES whose value differs from the model's own, so that a
        new predict parameter counts as changing the scores until its family
        says otherwise."""
        own, used = self._predict_params(), self._predict_params(**given)
        return [n for n in self.PREDICT_PARAMS if n not in self.KEEPS_SCORES
                and used[n] != own[n]]

    def predict_params(self, **given):
        """The predict parameters predict() would use for these (None or
        missing: the model's recorded value, else the default), checked:
        what the commands pass on to predict()."""
        return self._predict_params(**given)

    def _check_predict(self, given, used):
        """Rules between the predict parameters `used` (and those `given`
        explicitly): none by default."""

    def fold_params(self, Y):
        """Parameters of a copy trained on some of the rows of labels Y that
        make it score as the model of all of them does, where the family
        derives something from the data's size (the calibration at training,
        xmlkit.models.calibrated.fit_held_out): none by default."""
        return {}

    def needs_all_rows(self, **params):
        """Whether predict() with these predict parameters must see every row
        at once (not a piece at a time): no family by default."""
        return False

    @classmethod
    def _checked_predict_params(cls, recorded, where):
        """A manifest's predict parameters, checked: each recorded one must be
        a predict parameter of the family and take a value it allows; one the
        manifest does not record (a folder saved before the parameter
        existed, or before any was recorded: `recorded` None) takes its
        declared default, so that adding a predict parameter to a family
        leaves its saved folders as they were. Raises XmlkitError naming
        `where`."""
        recorded = {} if recorded is None else recorded
        if not isinstance(recorded, dict):
            raise XmlkitError(f"{where}: the manifest's predict_params must be a mapping of "
                              f"{sorted(cls.PREDICT_PARAMS)}, got {recorded!r}")
        unknown = sorted(set(recorded) - set(cls.PREDICT_PARAMS))
        if unknown:
            raise XmlkitError(f"{where}: the manifest's predict_params name {unknown}, which "
                              f"a {cls.algorithm} model does not take (it takes "
                              f"{sorted(cls.PREDICT_PARAMS)})")
        out = cls.predict_defaults()
        for name, (_, c) in cls.PREDICT_PARAMS.items():
            if name in recorded and not c(recorded[name]):
                raise XmlkitError(f"{where}: the manifest's predict_params: {name} must be "
                                  f"{c.phrase}, got {recorded[name]!r}")
            out[name] = recorded.get(name, out[name])
        return out

    @classmethod
    def param_group(cls, name):
        """The title of the group of parameter `name` in PARAM_GROUPS (the
        parameters by purpose), or None."""
        for title, names in cls.PARAM_GROUPS:
            if name in names:
                return title
        return None

    @classmethod
    def param_choices(cls, name):
        """The values parameter `name` takes when they are a list of names
        (its constraint's: the commands' choices), else ()."""
        c = cls._parameter_constraints.get(name)
        values = tuple(getattr(c, "values", ()) or ())
        return values if values and all(isinstance(v, str) for v in values) else ()

    @classmethod
    def _get_param_names(cls):
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind == p.KEYWORD_ONLY)

    @classmethod
    def param_defaults(cls):
        """Parameter name -> default value, from the signature."""
        sig = inspect.signature(cls.__init__)
        return {p.name: p.default for p in sig.parameters.values()
                if p.name != "self" and p.kind == p.KEYWORD_ONLY}

    def get_params(self, deep=True):
        """The parameters as given (deep: no parameter is an estimator here)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params):
        valid = set(self._get_param_names())
        for name, value in params.items():
            if name not in valid:
                raise InvalidParameterError(
                    name, f"{type(self).__name__} has no parameter {name!r} "
                          f"(its parameters: {', '.join(sorted(valid))})")
            setattr(self, name, value)
        return self

    def __repr__(self):
        defaults = self.param_defaults()
        changed = []
        for name in self._get_param_names():
            value = getattr(self, name)
            default = defaults[name]
            if value is default or (not isinstance(value, np.ndarray)
                                    and not isinstance(default, np.ndarray)
                                    and value == default):
                continue
            changed.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_tags__(self):
        """What scikit-learn's tools (clone, GridSearchCV, ...) ask of an
        estimator, when scikit-learn is installed: sparse input, a required
        target (the label matrix), no classifier type (so that
        cross-validation splits by KFold, not by class)."""
        from sklearn.utils import InputTags, Tags, TargetTags
        return Tags(estimator_type=None, target_tags=TargetTags(required=True),
                    input_tags=InputTags(sparse=True, two_d_array=True))

    @property
    def params(self):
        """The parameters as a read-only namespace (for the family's code);
        `threads` bounded by the machine (usable_threads)."""
        p = self.get_params()
        if isinstance(p.get("threads"), int) and p["threads"] >= 1:
            p["threads"] = usable_threads(p["threads"])
        return SimpleNamespace(**p)

    def _validate_params(self):
        """Check every parameter against its constraint; raises
        InvalidParameterError naming the first that fails."""
        for name in self._get_param_names():
            c = self._parameter_constraints.get(name)
            value = getattr(self, name)
            if c is not None and not c(value):
                raise InvalidParameterError(
                    name, f"{type(self).__name__}: {name} must be {c.phrase}, got {value!r}")
        self._check_more()

    def _check_more(self):
        """Checks that involve several parameters (none by default)."""

    def model_params(self):
        """The parameters that define the model, as recorded in its folder:
        after fit, from `settings_` where the family keeps one (the values
        its "auto" parameters stood for), else the parameters as given."""
        p = getattr(self, "settings_", None) or self
        return {k: getattr(p, k) for k in self.MODEL_KEYS}
