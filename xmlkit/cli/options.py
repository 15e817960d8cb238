"""The command-line spelling of each family's parameters: one table per
family, flag and help text written for that family. Defaults are not here:
they are read from the estimator's signature (xmlkit.models.base), the one
place they live."""
from dataclasses import dataclass

import click

from xmlkit.metrics import PROPENSITY_PRESETS
from xmlkit.models.base import C_INT_MAX
from xmlkit.models import REGISTRY
from xmlkit.models import ldsm as _ldsm
from xmlkit.models import linear as _linear


@dataclass(frozen=True)
class Opt:
    """One option: the estimator parameter it sets, its flags, its help."""
    param: str
    decls: tuple
    help: str
    type: object = None     # a click type; None: the type of the default
    off: str = None         # booleans: the flag that turns it off


class AutoOr(click.ParamType):
    """'auto' (the estimator picks the value from the data) or a value of `kind`."""

    def __init__(self, kind):
        self.kind = kind
        self.name = f"{kind.name}|auto"

    def convert(self, value, param, ctx):
        if value == "auto":
            return value
        return self.kind.convert(value, param, ctx)


def _trees(n_default_help):
    from xmlkit.models.base import MAX_TREES
    return Opt("n_trees", ("-t", "--trees"), f"{n_default_help[:-1]} (at most {MAX_TREES}).")


SEED_TREES = Opt("seed", ("--seed",), "Random seed; tree t draws from a stream derived "
                                      "from (seed, t), so a tree does not depend on -T.")
BIAS = Opt("bias", ("-b", "--bias"), "Value of the bias feature added to every point.")

START_TREE = Opt("start_tree", ("-s", "--start-tree"),
                 "Index of the first tree: trees -s .. -s+t-1 are grown (shards of one "
                 "model use different ranges).")

FASTXML = (
    _trees("Number of trees to grow."),
    START_TREE,
    Opt("threads", ("-T", "--threads"), "Trees grown in parallel (threads; worker "
                                        "processes with --solver liblinear); a thread "
                                        "left without a tree grows nodes of the trees "
                                        "still growing."),
    BIAS,
    Opt("log_loss_coeff", ("-c", "--log-loss-coeff"),
        "Cost C of the logistic loss in each node's L1-regularised classifier."),
    Opt("max_leaf", ("-m", "--max-leaf"), "A node with at most this many points is a leaf."),
    Opt("labels_per_leaf", ("-l", "--labels-per-leaf"),
        "Labels kept per leaf (the paper's setting; the C++ code's default is 100)."),
    SEED_TREES,
    Opt("solver", ("--solver",),
        "Solver of the nodes' L1 logistic regressions: xmlkit's newGLMNET (--max-newton "
        "Newton steps of 10 coordinate-descent passes at most) or liblinear-official's "
        "L1R_LR (100 / 1000)."),
    Opt("tol", ("--tol",),
        "Stopping tolerance of the node solver (newglmnet): stop once the subgradient's "
        "L1 norm is at most this times its value at zero. The C++ tool's is 0.01 (give "
        "--tol 0.01 --max-newton-small 10 to reproduce its stopping rules); the default "
        "takes fewer solver passes at its accuracy (docs/benchmarks.md: FastXML's node solver)."),
    Opt("max_newton", ("--max-newton",),
        "Newton steps at most per node (newglmnet; the C++ tool's 10)."),
    Opt("max_newton_small", ("--max-newton-small",),
        "Newton steps at most per node of fewer than --small-node points (newglmnet; the "
        "C++ tool has no such cap: 10): fewer solver passes, at the C++ tool's accuracy "
        "(docs/benchmarks.md: FastXML's node solver)."),
    Opt("small_node", ("--small-node",),
        "Nodes of fewer points than this take at most --max-newton-small Newton steps "
        "(newglmnet; 0: none does)."),
    Opt("init", ("--init",),
        "Where each node's solver starts (newglmnet): zero (the C++ tool's) or warm (one "
        "proximal-gradient step along the class-balanced mean difference of the two "
        "sides)."),
)

PFASTREXML = tuple(
    Opt("labels_per_leaf", o.decls, "Labels kept per leaf (the C++ tool's default).")
    if o.param == "labels_per_leaf" else o for o in FASTXML) + (
    Opt("trees_only", ("-S", "--trees-only"),
        "1: trees only, no tail classifiers (PfastXML); 0: PfastreXML.",
        type=click.IntRange(0, 1)),
    Opt("gamma", ("-g", "--gamma"), "Sharpness gamma of the tail classifiers."),
    Opt("alpha", ("-a", "--alpha"), "Weight alpha of the tree scores against the tail "
                                    "classifiers (scores s^alpha t^(1-alpha))."),
    Opt("propensity_preset", ("--propensity-preset",),
        "A/B of the propensity model that weights the labels: " + ", ".join(
            f"{k} {a}/{b}" for k, (a, b) in sorted(PROPENSITY_PRESETS.items())) + "."),
    Opt("propensity_a", ("-A", "--A"), "A of the propensity model (replaces the preset's).",
        type=float),
    Opt("propensity_b", ("-B", "--B"), "B of the propensity model (replaces the preset's).",
        type=float),
    Opt("inv_propensity", ("--inv-propensity",),
        "File with one positive inverse propensity per label, used instead of the "
        "propensity model.", type=click.Path(dir_okay=False)),
)

LDSM = (
    _trees("Number of trees to grow."),
    Opt("threads", ("-T", "--threads"), "Trees grown in parallel (threads)."),
    Opt("arity", ("--arity",), "Children per node (M), 2 to 8."),
    Opt("max_nodes", ("--max-nodes",), f"Node budget of a tree; auto: "
        f"{_ldsm.AUTO_NODES_PER_POINT} per training point (at least {_ldsm.MIN_AUTO_NODES}), "
        "a guard trees normally stop before (a tree that reaches it is reported).",
        type=AutoOr(click.INT)),
    Opt("max_leaf", ("--max-leaf",), "A node with at most this many points is a leaf (1: "
        "split down to single points, as the authors' code does)."),
    Opt("epochs", ("--epochs",), "Passes over a node's points to train its regressors."),
    Opt("lr", ("--lr",), "Learning rate of the nodes' normalized adaptive SGD."),
    Opt("adagrad_prior", ("--adagrad-prior",), "A weight's sum of squared gradients starts "
        "at this (times its feature's largest value squared): a feature met by one or two "
        "points takes a damped step (0: the authors' code)."),
    Opt("lambda1", ("--lambda1",), "Weight of the multi-way penalty in the node objective."),
    Opt("lambda2", ("--lambda2",), "Weight of the class-integrity term in the node "
                                   "objective."),
    Opt("route_threshold", ("--route-threshold",),
        "A point goes to every child whose regressor margin is at least this (else to "
        "the best child)."),
    BIAS,
    Opt("scale_dense", ("--scale-dense",), "Standardise the features of dense data (at "
        "least half of the entries non-zero) before growing and routing; sparse data are "
        "used as given.", off="--no-scale-dense"),
    SEED_TREES,
)

PARABEL = (
    _trees("Number of trees to grow."),
    START_TREE,
    Opt("threads", ("-T", "--threads"), "Nodes trained in parallel (threads): any node "
        "whose parent is done, the next trees' roots first, then the earliest tree's (in a "
        "level, the node of most work first); the trees do not depend on it."),
    Opt("arity", ("--arity",), "Children per internal node: 2 (Parabel) or more (Bonsai's "
        "wide trees, up to 100 and beyond)."),
    Opt("max_leaf", ("-m", "--max-leaf"), "Labels per leaf: balanced trees with "
        "--max-depth auto are as deep as the C++ tool's, ceil(log_arity(L / max-leaf)) "
        "levels below the root; unbalanced ones split nodes of more labels."),
    Opt("max_depth", ("--max-depth",), "Levels of a tree at most (1: the root alone); "
        "auto: see --max-leaf.", type=AutoOr(click.IntRange(1, C_INT_MAX))),
    Opt("balanced", ("--balanced",), "Clusters of equal sizes (Parabel), or each label to "
        "its nearest centre (--unbalanced: Bonsai).", off="--unbalanced"),
    Opt("cluster_eps", ("-e", "--cluster-eps"), "The label k-means stops when the mean "
        "cosine of the labels to their centres gains less than this."),
    Opt("centroid_threshold", ("--centroid-threshold",), "Label-centroid entries of "
        "magnitude at most this are dropped before clustering."),
    Opt("loss", ("--loss",), "Loss of the nodes' linear classifiers: squared_hinge "
        "(L2-loss SVC, the C++ tool's -k 0) or log (logistic regression, -k 1)."),
    Opt("C", ("-c", "--cost"), "Cost C of the classifiers' loss (log: times the training "
        "points over the node's)."),
    BIAS,
    Opt("max_iter", ("-n", "--max-iter"), "Passes of each classifier's dual coordinate "
        "descent at most."),
    Opt("tol", ("--tol",), "Stopping tolerance of the classifiers' solver (liblinear's "
        "eps)."),
    Opt("weight_threshold", ("--weight-threshold",), "Classifier weights of magnitude at "
        "most this are dropped (what keeps the model small)."),
    Opt("seed", ("--seed",), "Random seed; node i of tree t draws from a stream derived "
        "from (seed, t, i), so a tree does not depend on -T."),
)

EMBED = (
    Opt("rank", ("--rank",), "Embedding dimension k; 0: the smallest k whose top "
                             "eigenvalues of YᵀY hold 90% of their sum (above 4000 labels "
                             "estimated by a randomized range finder, at most 500)."),
    Opt("oversample", ("--oversample",), "Extra columns p of the Gaussian test matrix."),
    Opt("passes", ("--passes",), "Range-finder passes q."),
    Opt("embed_lambda", ("--embed-lambda",), "Ridge of the embedding solves, times tr(XᵀX)/d."),
    Opt("map_lambda", ("--map-lambda",), "Ridge of the feature map (x to its embedding), "
        "times tr(XᵀX)/d (the authors' code: 1e-6, which overfits sparse text)."),
    Opt("cg_iters", ("--cg-iters",), "Conjugate-gradient iterations per solve."),
    Opt("num_features", ("--num-features",), "Random Fourier features f."),
    Opt("kernel", ("--kernel",), "Random-feature kernel."),
    Opt("bandwidth", ("--bandwidth",), "Frequency multiplier on the median-heuristic "
                                       "bandwidth."),
    Opt("ridge", ("--ridge",), "Ridge of the output layer, times tr(ΦᵀΦ)/(f+1)."),
    Opt("loss", ("--loss",), "Output layer: ridge closed form, or refined by per-class "
                             "logistic loss."),
    Opt("epochs", ("--epochs",), "Epochs of the logistic refinement (--loss logistic)."),
    Opt("eta", ("--eta",), "Step size of the logistic refinement (preconditioned)."),
    Opt("momentum", ("--momentum",), "Heavy-ball momentum of the logistic refinement."),
    Opt("decay", ("--decay",), "Step-size decay per epoch of the logistic refinement "
                               "(<= 1)."),
    Opt("shrink", ("--shrink",), "Label smoothing s: targets s·y + (1−s)(1−y)."),
    Opt("f1_holdout", ("--f1-holdout",), "Share of the points held out to fit the per-label "
        "thresholds of xml-predict --decision f1 (a first fit on the others: about twice "
        "the time); 0: on the training points themselves, one fit (too confident: fewer "
        "labels per row)."),
    Opt("threads", ("-T", "--threads"), "Threads for the embedding's ridge solves (blocks "
        "of columns) and the random features' ridge system (blocks of points); the rest "
        "runs in numpy's BLAS, on one thread. The model does not depend on it."),
    Opt("seed", ("--seed",), "Random seed (test matrix, frequencies, minibatches)."),
)

LINEAR = (
    Opt("loss", ("--loss",), "The loss of every one-vs-all model; squared_hinge updates "
        "only the labels with a residual (fast with many labels); auto: squared_hinge "
        f"from {_linear.HINGE_LABELS} labels up, logistic below."),
    Opt("l1", ("--l1",), "L1 weight lambda1 (per example)."),
    Opt("l2", ("--l2",), "L2² weight lambda2 (penalty lambda2/2 ‖w‖²)."),
    Opt("lr_schedule", ("--lr-schedule",),
        "Learning rate per step: constant: --lr; decaying: lr / (1 + lr-decay · t); "
        "adagrad: lr / (1 + sqrt(G)) per feature (and per label for the bias)."),
    Opt("lr", ("--lr",), "Learning rate of the SGD; auto: "
        + ", ".join(f"{v} for {k}" for k, v in _linear.AUTO_LR.items()) + ".",
        type=AutoOr(click.FLOAT)),
    Opt("lr_decay", ("--lr-decay",), "Decay of the decaying schedule."),
    Opt("epochs", ("--epochs",), f"Passes over the training data; auto: "
        f"{_linear.SMOOTH_EPOCHS} for logistic and squared, and for squared_hinge "
        f"{_linear.AUTO_STEPS:,} SGD steps / N points, rounded, from "
        f"{_linear.MIN_AUTO_EPOCHS} to {_linear.MAX_AUTO_EPOCHS}.", type=AutoOr(click.INT)),
    Opt("final_epochs", ("--final-epochs",), "With a threshold hold-out, the final model: "
        "0: trained anew on every point (--epochs passes, side by side with the hold-out "
        "model on -T 2); N: the hold-out model continued N passes over every point; auto: "
        f"{_linear.FINAL_SHARE:g} x epochs (at least 1) where the features are sparse (below "
        f"{_linear.CONTINUE_BELOW} points per feature on average, as on text), else 0.",
        type=AutoOr(click.INT)),
    Opt("unit_rows", ("--unit-rows",), "Scale every point to unit length (training and "
                                       "prediction).", off="--raw-rows"),
    Opt("dense_updates", ("--dense-updates",), "The plain algorithm: every weight "
        "regularised at every step (slow; for comparison).", off="--lazy-updates"),
    Opt("prune_weights", ("--prune-weights",), "After training, drop the weights with "
        "|w| below this (DiSMEC's model pruning: smaller models; 0: keep all)."),
    Opt("threshold_holdout", ("--threshold-holdout",),
        "Share of the training points held out to fit the per-label thresholds "
        "(0: no thresholds)."),
    Opt("label_blocks", ("--label-blocks",), "Split the labels into B contiguous blocks "
        "trained on their own (on -T threads, or as --dask tasks): the same model wherever "
        "they run, but B changes it (each block keeps its own per-feature AdaGrad rates)."),
    Opt("threads", ("-T", "--threads"), "Trainings at once (threads): label blocks side "
        "by side, and a final model trained anew side by side with the hold-out one (twice "
        "the memory); the model does not depend on it."),
    Opt("seed", ("--seed",), "Random seed (shuffling, hold-out)."),
)

#: xml-train's options, per family
TRAIN_OPTIONS = {"fastxml": FASTXML, "pfastrexml": PFASTREXML, "parabel": PARABEL,
                 "ldsm": LDSM, "embed": EMBED, "linear": LINEAR}


#: xml-predict's family options: flag and help per family; their defaults
#: and constraints are the estimators' PREDICT_PARAMS (a model's values
#: recorded at training stand in for an option not given)
_ONE_CUT = "one probability cut for --decision threshold, instead of the per-label thresholds."
#: --decision and --threshold of the families whose scores are not probabilities
_RANKED = (
    Opt("decision", ("--decision",), "scores (probabilities where MODEL_DIR holds a "
        "calibration), or label sets: threshold keeps the labels whose probability passes "
        "the calibration's per-label thresholds (it needs one: xml-calibrate, or xml-train "
        "--calibrate)."),
    Opt("threshold", ("--threshold",), _ONE_CUT, type=float),
)

PREDICT_OPTIONS = {
    "fastxml": _RANKED,
    "ldsm": _RANKED,
    "parabel": (
        *_RANKED,
        Opt("beam_width", ("-B", "--beam-width"), "nodes kept per level of each tree by the "
            "beam search.", type=click.IntRange(1, C_INT_MAX)),
    ),
    "pfastrexml": (
        *_RANKED,
        Opt("rerank", ("-n", "--rerank"), "tree-scored labels per point re-ranked by the "
                                          "tail classifiers.", type=click.IntRange(1, C_INT_MAX)),
        Opt("trees_only", ("-S", "--trees-only"), "1 writes the tree scores without "
            "re-ranking, 0 re-ranks.", type=click.IntRange(0, 1)),
    ),
    "embed": (
        Opt("decision", ("--decision",), "probabilities (scores: the calibration's where "
            "MODEL_DIR holds one), or label sets: threshold keeps the labels with p >= "
            "--threshold (where MODEL_DIR holds a calibration and --threshold is not given: "
            "those above its per-label thresholds), f1 keeps the labels above the F1 "
            "thresholds fitted at training (each row decided alone), f1-batch runs the "
            "paper's per-label F1 inference over the points of FEATURES (a row's set depends "
            "on the others; at least 100 points)."),
        Opt("threshold", ("--threshold",), "the probability cut of --decision threshold.",
            type=float),
    ),
    "linear": (
        Opt("decision", ("--decision",), "probabilities (scores: the calibration's where "
            "MODEL_DIR holds one), or label sets: threshold keeps the labels above their "
            "per-label thresholds (the calibration's where MODEL_DIR holds one, else the "
            "F1-optimal ones fitted at training)."),
        Opt("threshold", ("--threshold",), _ONE_CUT, type=float),
    ),
}


#: values taken but not shown (a decision's name before 0.1)
OLD_NAMES = tuple(_linear.DECISION_ALIASES)


def predict_click_options(classes, only=None):
    """xml-predict's family options (click.Option objects), one per parameter
    (a parameter of several families: one option, each family's help), or
    only those of family `only`; `classes` maps family names to estimator
    classes. Defaults are None (not given: the model's recorded value);
    --help shows the declared ones."""
    by_param = {}
    for family, opts in PREDICT_OPTIONS.items():
        if only is not None and family != only:
            continue
        for o in opts:
            by_param.setdefault(o.param, []).append((family, o))
    out = []
    for param, uses in by_param.items():
        values, parts = [], {}
        for family, o in uses:
            default, constraint = classes[family].PREDICT_PARAMS[param]
            values += [v for v in constraint.values if v not in values]
            shown = "the model's" if default is None else default
            # (families of one help and default are named together)
            parts.setdefault((o.help, shown), []).append(family)
        parts = [f"{h[0].upper()}{h[1:]} [default: {shown}]" if only else
                 f"{', '.join(names)}: {h} [default: {shown}]"
                 for (h, shown), names in parts.items()]
        o = uses[0][1]
        # (a list of names: a choice; else the given type, or the default's)
        choice = not o.type and bool(values) and all(isinstance(v, str) for v in values)
        first = classes[uses[0][0]].PREDICT_PARAMS[param][0]
        kind = click.Choice(values) if choice else \
            (o.type or (type(first) if first is not None else None))
        # (a paragraph per family's meaning: click keeps blank-line paragraphs)
        text = "\n\n".join(parts) + ("\n\n" if len(parts) > 1 else " ") + \
            "Not given: the value the model recorded at training."
        out.append(click.Option([*o.decls, param], type=kind, default=None, help=text,
                                metavar="[" + "|".join(v for v in values if v not in OLD_NAMES)
                                + "]" if choice else None))
    return out


def flag_of(algorithm, param):
    """The spelling of a parameter's option, for messages ("--trees (-t)")."""
    for o in TRAIN_OPTIONS.get(algorithm, ()):
        if o.param == param:
            longs = [d for d in o.decls if d.startswith("--")]
            shorts = [d for d in o.decls if not d.startswith("--")]
            return longs[0] + (f" ({shorts[0]})" if shorts else "")
    return param


def families_with(flag):
    """The families that have an option spelled `flag`."""
    return sorted(a for a, opts in TRAIN_OPTIONS.items()
                  if any(flag in o.decls or flag == o.off for o in opts))


def click_options(algorithm, defaults):
    """Click decorators for the family's options; `defaults` maps parameter
    names to the estimator's defaults."""
    out = []
    for o in TRAIN_OPTIONS[algorithm]:
        default = defaults[o.param]
        if isinstance(default, bool) and o.off:
            long = [d for d in o.decls if d.startswith("--")][0]
            out.append(click.option(f"{long}/{o.off}", o.param, default=default,
                                    show_default=True, help=o.help))
            continue
        if o.param == "trees_only":     # a bool parameter spelled -S 0/1 as the C++ tool
            default = int(default)
        # (the values a parameter takes from a list: the estimator's constraint)
        values = REGISTRY[algorithm].param_choices(o.param)
        kind = o.type or (click.Choice(values) if values else type(default))
        out.append(click.option(*o.decls, o.param, type=kind, default=default,
                                show_default=default is not None, help=o.help))
    return out
