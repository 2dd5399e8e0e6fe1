"""Every figure of the notebooks (matplotlib), one function per chart, with the workbook's colours."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

from workbook.eval_views import case_scores

VERSION_COLORS = {"v1": "#9e9e9e", "v2": "#64b5f6", "v3": "#1e88e5", "v4": "#d84315"}
JUDGE_COLORS = {
    "local/qwen-1.5b": "#1565c0",
    "local/qwen-0.5b": "#ef6c00",
    "local/smollm2-135m": "#8e24aa",
    "rouge": "#757575",
}


def plot_tokens(table: pd.DataFrame, label: str = "user", by: str = "version") -> Figure:
    """Return a bar chart of output tokens and latency per answer, coloured by prompt version (notebook 01)."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(table) + 1.5), sharey=True)
    labels = [f"{row[by]} · {str(row[label])[:38]}" for _, row in table.iterrows()]
    colors = [VERSION_COLORS.get(value, "#555555") for value in table[by]]
    axes[0].barh(labels, table["output_tokens"], color=colors)
    axes[0].set_xlabel("output tokens")
    axes[1].barh(labels, table["latency_s"], color=colors)
    axes[1].set_xlabel("latency (s, as recorded)")
    axes[0].invert_yaxis()
    figure.suptitle("Which answers cost the most: output tokens drive latency on a CPU model")
    figure.tight_layout()
    return figure


def plot_case_scores(table: pd.DataFrame, title: str = "") -> Figure:
    """Return a per-case chart of scores, one marker per metric, threshold lines dashed (notebook 02)."""
    import matplotlib.pyplot as plt

    scores = case_scores(table)
    cases = list(dict.fromkeys(scores["case"]))
    figure, axis = plt.subplots(figsize=(9, 0.38 * len(cases) + 1.5))
    for (metric, group), marker in zip(scores.groupby("metric", sort=False), "os^D", strict=False):
        positions = [cases.index(case) for case in group["case"]]
        axis.scatter(group["score"].fillna(-0.1), positions, marker=marker, s=70, label=metric, alpha=0.8)
        axis.axvline(group["threshold"].iloc[0], linestyle="--", linewidth=1, color="grey")
    axis.set_yticks(range(len(cases)), cases)
    axis.invert_yaxis()
    axis.set_xlim(-0.15, 1.05)
    axis.set_xlabel("score (dashed: threshold; -0.1: not evaluated)")
    axis.legend(loc="lower left", fontsize=8)
    axis.set_title(title or "Per-case scores")
    figure.tight_layout()
    return figure


def plot_failure_kinds(by_kind: pd.DataFrame) -> Figure:
    """Return a bar chart of failed answers per failure kind and prompt version, or a note if none (notebook 03)."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3))
    if by_kind.empty:
        axis.text(0.5, 0.5, "no failed answers labelled yet", ha="center", va="center")
        axis.set_axis_off()
        return figure
    by_kind.plot.barh(ax=axis, color=[VERSION_COLORS.get(v, "#555") for v in by_kind.columns])
    axis.set_xlabel("failed answers")
    axis.set_ylabel("")
    axis.set_title("What kind of failure the battery found, per prompt version")
    figure.tight_layout()
    return figure


def plot_flip_rates(flips: pd.DataFrame) -> Figure:
    """Return a bar chart of each case's minority share per judge (0: stable, 0.5: a coin flip) (notebook 04)."""
    import matplotlib.pyplot as plt

    wide = flips.pivot_table(index="case", columns="judge", values="minority_share", sort=False)
    figure, axis = plt.subplots(figsize=(9, 0.32 * len(wide) + 1.5))
    wide.plot.barh(ax=axis, color=[JUDGE_COLORS.get(j, "#555") for j in wide.columns], width=0.8)
    axis.set_xlim(0, 0.5)
    axis.invert_yaxis()
    axis.set_xlabel("minority share of verdicts (0 = always the same, 0.5 = coin flip)")
    axis.set_title("Where the same judge, on the same answer, changes its mind")
    figure.tight_layout()
    return figure


def plot_kappa_heatmap(kappas: pd.DataFrame) -> Figure:
    """Return a judge x judge heatmap of Cohen's kappa (notebook 04)."""
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axis = plt.subplots(figsize=(5.5, 4.5))
    image = axis.imshow(kappas.to_numpy(dtype=float), vmin=-1, vmax=1, cmap="RdBu")
    labels = [j.removeprefix("local/") for j in kappas.columns]
    axis.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    axis.set_yticks(range(len(labels)), labels)
    for (i, j), value in np.ndenumerate(kappas.to_numpy(dtype=float)):
        axis.text(j, i, "n/a" if value != value else f"{value:.2f}", ha="center", va="center")
    figure.colorbar(image, label="Cohen's kappa")
    axis.set_title("How much the judges agree beyond chance")
    figure.tight_layout()
    return figure


def plot_pass_rates(rates: pd.DataFrame) -> Figure:
    """Return each judge's pass rate with its 95% interval (notebook 04)."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 0.5 * len(rates) + 1.5))
    errors = [rates["pass_rate"] - rates["ci_low"], rates["ci_high"] - rates["pass_rate"]]
    colors = [JUDGE_COLORS.get(j, "#555") for j in rates.index]
    axis.barh(rates.index, rates["pass_rate"], xerr=errors, color=colors, capsize=4)
    axis.set_xlim(0, 1)
    axis.invert_yaxis()
    axis.set_xlabel("pass rate over all samples (95% interval, answers resampled)")
    axis.set_title("Same answers, different judges, different pass rates")
    figure.tight_layout()
    return figure


def plot_confusion(verdicts: pd.DataFrame, truth: pd.Series) -> Figure:
    """Return one confusion matrix per judge against `truth` (1 pass, 0 fail) (notebook 04)."""
    import matplotlib.pyplot as plt
    from sklearn.metrics import ConfusionMatrixDisplay

    common = verdicts.index.intersection(truth.index)
    figure, axes = plt.subplots(1, len(verdicts.columns), figsize=(3.2 * len(verdicts.columns), 3.2), squeeze=False)
    if common.empty:
        figure.suptitle("no human labels yet: label the battery in notebook 03")
        return figure
    for axis, judge in zip(axes[0], verdicts.columns, strict=True):
        ConfusionMatrixDisplay.from_predictions(
            truth.loc[common].astype(int),
            verdicts.loc[common, judge].astype(int),
            labels=[0, 1],
            display_labels=["fail", "pass"],
            ax=axis,
            colorbar=False,
        )
        axis.set_title(judge.removeprefix("local/"), fontsize=10)
        axis.set_xlabel("judge said")
        axis.set_ylabel("human label")
    figure.suptitle("Where each judge disagrees with the human labels")
    figure.tight_layout()
    return figure


def plot_scores_by_label(scores: pd.DataFrame, labels: pd.Series) -> Figure:
    """Return one strip per score column (e.g. share of yes samples, P(yes)), answers split by their
    label: a score that tracks the labels puts the passes above the fails (notebook 04)."""
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axes = plt.subplots(1, len(scores.columns), figsize=(3.6 * len(scores.columns), 3.4), squeeze=False)
    jitter = np.random.default_rng(0).uniform(-0.12, 0.12, len(labels))  # fixed seed: the same picture every run
    for axis, column in zip(axes[0], scores.columns, strict=True):
        for value, color in ((0, "#c0392b"), (1, "#2e86c1")):
            chosen = (labels == value).to_numpy()
            axis.scatter(value + jitter[chosen], scores[column][chosen], s=18, alpha=0.7, color=color)
        axis.set_xticks([0, 1], ["labelled fail", "labelled pass"])
        axis.set_ylim(-0.05, 1.05)
        axis.axhline(0.5, color="grey", linewidth=0.8, linestyle="--")
        axis.set_title(column, fontsize=10)
    figure.suptitle("Judge scores of each labelled answer, by its blind label")
    figure.tight_layout()
    return figure


def plot_version_pass_rates(rates: pd.DataFrame) -> Figure:
    """Return pass rate per prompt version, one bar group per judge, with 95% intervals (notebook 05)."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.5))
    judges = list(dict.fromkeys(rates["judge"]))
    width = 0.8 / max(len(judges), 1)
    versions = list(dict.fromkeys(rates["prompt_version"]))
    for index, judge in enumerate(judges):
        part = rates[rates["judge"] == judge].set_index("prompt_version").reindex(versions)
        positions = [v + index * width for v in range(len(versions))]
        errors = [part["pass_rate"] - part["ci_low"], part["ci_high"] - part["pass_rate"]]
        axis.bar(
            positions,
            part["pass_rate"],
            width,
            yerr=errors,
            capsize=3,
            label=judge,
            color=JUDGE_COLORS.get(judge, "#555"),
        )
    axis.set_xticks([v + width * (len(judges) - 1) / 2 for v in range(len(versions))], versions)
    axis.set_ylim(0, 1)
    axis.set_ylabel("cases passed (95% interval)")
    axis.set_title("Did the later prompt pass more cases, by each judge's account?")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def plot_stability(curve: pd.DataFrame, adk_default: int = 5, literature: int = 11) -> Figure:
    """Return, per judge, the mean probability over cases that a majority of k samples differs from the
    long-run verdict, for k = 1..N, with ADK's default and the literature's trial count marked (notebook 04)."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    for judge, group in curve.groupby("judge", sort=False):
        mean = group.groupby("k")["disagreement"].mean()
        base = next((name for name in JUDGE_COLORS if str(judge).startswith(name)), "")
        style = "-" if judge in JUDGE_COLORS else "--"
        axis.plot(mean.index, mean.values, style, marker="o", color=JUDGE_COLORS.get(base, "#555"), label=judge)
    axis.axhline(0.05, color="grey", linewidth=1, linestyle=":", label="5% (95% stability)")
    axis.axvline(
        adk_default, color="black", linewidth=1, linestyle="--", label=f"ADK default num_samples = {adk_default}"
    )
    axis.axvline(
        literature, color="#2e7d32", linewidth=1, linestyle="-.", label=f"~{literature} trials (Yagubyan 2026)"
    )
    axis.set_xlabel("k: judge samples behind one verdict (majority; a tie fails)")
    axis.set_ylabel("P(verdict of k samples differs from the long-run verdict)")
    axis.set_xlim(0.5, max(literature, int(curve["k"].max())) + 0.5)
    axis.set_ylim(0, None)
    axis.legend(fontsize=8)
    axis.set_title("How many samples a verdict needs before it stops flipping")
    figure.tight_layout()
    return figure
