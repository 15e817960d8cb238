"""Pictures (`pip install 'xmlkit[plot]'`): the tail plot of xml-eval --plot."""
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


def tail_figure(tail, path):
    """Bars per frequency bin (rarest labels left): each score file's part of
    P@k and, with propensities, of PSP@k; `tail` as xml-eval's tail_bins.
    Written atomically to `path` (PNG)."""
    import os
    import numpy as np
    from xmlkit.atomic import atomic_path
    plt = require()
    bins, files, k = tail["bins"], tail["scores"], tail["k"]
    with_psp = all(v[0]["PSP@k"] is not None for v in files.values())
    panels = [("P@k", f"part of P@{k} (points)")]
    if with_psp:
        panels.append(("PSP@k", f"part of PSP@{k} (points)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), squeeze=False)
    x = np.arange(len(bins))
    width = 0.8 / max(1, len(files))
    ticks = [f"{b['min_freq']}–{b['max_freq']}\n({b['labels']})" for b in bins]
    for ax, (key, title) in zip(axes[:, 0], panels):
        for i, (name, rows) in enumerate(files.items()):
            total = sum(r[key] for r in rows)
            ax.bar(x + (i - (len(files) - 1) / 2) * width, [r[key] for r in rows], width,
                   label=f"{os.path.basename(name)} ({key.replace('k', str(k))} "
                         f"{total:.2f})")
        ax.set_ylabel(title)
        ax.set_xticks(x, ticks, fontsize=8)
        ax.legend(fontsize=8)
    axes[-1, 0].set_xlabel("labels by training frequency: bin's frequency range "
                           "(labels in the bin); rarest left")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
