"""Pictures (`pip install 'xmlkit[plot]'`): xml-eval --plot's reliability
diagram and tail bars."""
from xmlkit.errors import XmlkitError

INSTALL = "pip install 'xmlkit[plot]'"


def require():
    """matplotlib's pyplot on a file backend, or a one-line error saying how
    to install it."""
    try:
        import matplotlib
    except ImportError:
        raise XmlkitError(f"plots need matplotlib: {INSTALL}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def evaluation_figure(reliability, tail, path):
    """xml-eval --plot: the reliability diagram of `reliability` (as
    xmlkit.metrics.calibration gives it) and, when `tail` is given (as
    xml-eval's tail_bins), bars per frequency bin (rarest labels left): each
    score file's part of P@k and, with propensities, of PSP@k. Written
    atomically to `path` (PNG)."""
    import numpy as np
    from xmlkit.atomic import atomic_path
    plt = require()
    panels = _tail_panels(tail) if tail is not None else []
    fig, axes = plt.subplots(len(panels) + 1, 1, figsize=(9, 3.2 * (len(panels) + 1)),
                             squeeze=False)
    _reliability(axes[0, 0], reliability, np)
    for ax, draw in zip(axes[1:, 0], panels):
        draw(ax)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def _reliability(ax, r, np):
    """The bins' fraction of relevant labels against their mean score, and
    the diagonal of perfect calibration."""
    k, bins = r["k"], r["bins"]
    x = np.array([b["mean_score"] for b in bins])
    y = np.array([b["relevant"] for b in bins])
    top = max(1.0, float(x.max()) if len(x) else 1.0)
    ax.plot([0, top], [0, top], color="grey", linestyle=":", label="calibrated")
    ax.plot(x, y, marker="o", label=f"top {k} scores, {len(bins)} equal-mass bins "
                                    f"(ECE@{k} {100 * r['ECE']:.2f})")
    ax.set_xlabel(f"mean score of the bin (top {k})")
    ax.set_ylabel("fraction relevant")
    ax.legend(fontsize=8)


def _tail_panels(tail):
    """Functions drawing the tail bars on an axis: P@k, and PSP@k where every
    file has it."""
    import os
    import numpy as np
    bins, files, k = tail["bins"], tail["scores"], tail["k"]
    with_psp = all(v[0]["PSP@k"] is not None for v in files.values())
    keys = [("P@k", f"part of P@{k} (points)")]
    if with_psp:
        keys.append(("PSP@k", f"part of PSP@{k} (points)"))
    x = np.arange(len(bins))
    width = 0.8 / max(1, len(files))
    ticks = [f"{b['min_freq']}–{b['max_freq']}\n({b['labels']})" for b in bins]

    def panel(key, title):
        def draw(ax):
            for i, (name, rows) in enumerate(files.items()):
                total = sum(r[key] for r in rows)
                ax.bar(x + (i - (len(files) - 1) / 2) * width, [r[key] for r in rows],
                       width, label=f"{os.path.basename(name)} "
                                    f"({key.replace('k', str(k))} {total:.2f})")
            ax.set_ylabel(title)
            ax.set_xticks(x, ticks, fontsize=8)
            ax.legend(fontsize=8)
            ax.set_xlabel("labels by training frequency: bin's frequency range "
                          "(labels in the bin); rarest left")
        return draw
    return [panel(key, title) for key, title in keys]
