"""`recrun report RUN_DIR...`: the runs' curves (AUC, logloss, training loss, examples/s over
steps) from their metrics.jsonl, side by side, as report.png and report.html."""

import argparse
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recrunner.errors import RecrunnerError

METRICS = "metrics.jsonl"
# (metrics.jsonl field, panel title): one panel each, in this order.
PANELS = [("auc", "test AUC"), ("logloss", "test logloss"), ("train_loss", "training loss"),
          ("train_examples_per_sec", "training examples/s")]
FIGSIZE, DPI = (12.0, 8.0), 100  # report.png: 1200 x 800 pixels
LEGEND_COLUMNS, LEGEND_CHARS = 2, 80  # full labels are in the HTML table
TABLE = ["epoch", "step", "auc", "logloss", "train_loss", "train_examples_per_sec"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories, or a sweep's folder (all its jobs)")
    parser.add_argument("--out", metavar="DIR",
                        help="where report.png and report.html go (default: the first "
                             "RUN_DIR)")


@dataclass
class Run:
    path: Path
    rows: list[dict[str, Any]]
    label: str = ""


def find_runs(paths: list[str]) -> list[Run]:
    """Each argument is a run directory, or a folder of them (a sweep's jobs, in job order)."""
    runs = []
    for arg in paths:
        path = Path(arg)
        if not path.is_dir():
            raise RecrunnerError(f"{arg}: not a directory")
        if (path / METRICS).is_file():
            dirs = [path]
        else:
            dirs = sorted((p.parent for p in path.glob(f"*/{METRICS}")),
                          key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit()
                                         else 0, p.name))
            if not dirs:
                raise RecrunnerError(f"{arg}: no {METRICS} there or in its subdirectories")
        runs += [Run(d, read_rows(d / METRICS)) for d in dirs]
    label_runs(runs)
    return runs


def read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise RecrunnerError(f"{path}: unreadable ({exc})") from exc
    if not rows:
        raise RecrunnerError(f"{path}: no evaluation recorded yet")
    return rows


def overrides(run_dir: Path) -> list[str]:
    """The run's command-line overrides (Hydra's record), less its output dir (the name
    says that)."""
    path = run_dir / ".hydra" / "overrides.yaml"
    items = (yaml.safe_load(path.read_text()) or []) if path.is_file() else []
    return [o for o in items if not o.startswith("runner.output_dir=")]


def label_runs(runs: list[Run]) -> None:
    """The directory's name (its path below the runs' common folder when names collide, as
    for two sweeps' job 0), then the overrides that differ between the runs."""
    names = [r.path.name for r in runs]
    if len(set(names)) < len(names):
        root = Path(*_common_parts([r.path.resolve() for r in runs]))
        names = [str(r.path.resolve().relative_to(root)) for r in runs]
    each = [overrides(r.path) for r in runs]
    common = set.intersection(*(set(o) for o in each))
    for run, name, items in zip(runs, names, each, strict=True):
        differing = " ".join(o for o in items if o not in common)
        run.label = f"{name}: {differing}" if differing else name


def _common_parts(paths: list[Path]) -> list[str]:
    parts: list[str] = []
    for column in zip(*(p.parts for p in paths), strict=False):
        if len(set(column)) > 1:
            break
        parts.append(column[0])
    return parts


def plot(runs: list[Run], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=FIGSIZE, dpi=DPI)
    # One color per run in every panel (a run may lack a curve, e.g. PS has no train_loss).
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, title) in zip(axes.flat, PANELS, strict=True):
        for i, run in enumerate(runs):
            points = [(r["step"], r[key]) for r in run.rows if r.get(key) is not None]
            if points:
                steps, values = zip(*sorted(points), strict=True)
                ax.plot(steps, values, marker="o", markersize=3, color=colors[i % len(colors)])
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colors[i % len(colors)], marker="o", markersize=3)
               for i in range(len(runs))]
    labels = [r.label if len(r.label) <= LEGEND_CHARS else r.label[:LEGEND_CHARS - 1] + "…"
              for r in runs]
    fig.legend(handles, labels, loc="lower center", ncol=min(len(runs), LEGEND_COLUMNS),
               fontsize=8)
    rows = -(-len(runs) // LEGEND_COLUMNS)
    fig.tight_layout(rect=(0, 0.01 + 0.03 * rows, 1, 1))  # room for the legend below
    fig.savefig(png, dpi=DPI)
    plt.close(fig)


def render_html(runs: list[Run], png: Path) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.5f}"
        return "" if value is None else html.escape(str(value))

    head = "".join(f"<th>{html.escape(k)}</th>" for k in ["run", *TABLE])
    body = "".join(
        "<tr>" + f"<td>{html.escape(r.label)}</td>"
        + "".join(f"<td>{cell(final_row(r).get(k))}</td>" for k in TABLE) + "</tr>\n"
        for r in runs)
    dirs = "".join(f"<li>{html.escape(r.label)}: {html.escape(str(r.path))}</li>" for r in runs)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>recrunner report"
            f"</title><style>body{{font-family:sans-serif}} td,th{{padding:2px 8px;"
            f"text-align:right}}</style></head><body>\n<h1>recrunner report</h1>\n"
            f"<img src='{png.name}' alt='curves'>\n<h2>Final evaluation of each run</h2>\n"
            f"<table>\n<tr>{head}</tr>\n{body}</table>\n<ul>{dirs}</ul>\n</body></html>\n")


def final_row(run: Run) -> dict[str, Any]:
    """The last epoch's row (it carries the training figures), else the last row."""
    epochs = [r for r in run.rows if r.get("trigger", "epoch") == "epoch"]
    return (epochs or run.rows)[-1]


def run(cfg: None, args: argparse.Namespace) -> int:
    runs = find_runs(args.run_dirs)
    out = Path(args.out or args.run_dirs[0])  # a sweep's folder, when that comes first
    out.mkdir(parents=True, exist_ok=True)
    png = out / "report.png"
    plot(runs, png)
    (out / "report.html").write_text(render_html(runs, png))
    print(json.dumps({"png": str(png), "html": str(out / "report.html"), "runs": len(runs)}))
    return 0
