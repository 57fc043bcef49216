"""The bench's results: rows of ubiquityfs against a baseline with their ratio, the alternation of contenders
within one run, and the table (markdown) and plot of a run."""
import os
import statistics
import time


class Results:
    def __init__(self):
        self.rows = []  # dicts
        self.notes = []

    def add(self, workload, metric, unit, ubq, base_name=None, base=None, better="higher", goal=None, goal_ok=None,
            samples=None):
        ratio = None
        if ubq is not None and base not in (None, 0):
            ratio = ubq / base
        row = dict(workload=workload, metric=metric, unit=unit, ubq=ubq, base_name=base_name, base=base,
                   ratio=ratio, better=better, goal=goal, goal_ok=goal_ok, samples=samples)
        self.rows.append(row)
        print("  " + fmt_row(row), flush=True)

    def failed(self, workload, reason):
        self.rows.append(dict(workload=workload, metric="FAILED", unit="", ubq=None, base_name=None, base=None,
                              ratio=None, better=None, goal=reason, goal_ok=False, samples=None))
        print(f"  {workload}: FAILED: {reason}", flush=True)

    def note(self, text):
        self.notes.append(text)
        print("  note: " + text, flush=True)


def fnum(v, unit=""):
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "MB/s":
        return f"{v:.0f} MB/s"
    if unit == "MB":
        return f"{v:.1f} MB"
    return f"{v:g} {unit}".strip()


def fmt_row(r):
    if r["metric"] == "FAILED":
        return f"{r['workload']}: FAILED ({r['goal']})"
    s = f"{r['workload']} | {r['metric']}: ubiquityfs {fnum(r['ubq'], r['unit'])}"
    if r["base_name"]:
        s += f" vs {r['base_name']} {fnum(r['base'], r['unit'])}"
    if r["ratio"] is not None:
        s += f" ratio {r['ratio']:.2f}"
    if r["goal"]:
        s += f" (goal {r['goal']}: {'met' if r['goal_ok'] else 'missed'})"
    return s


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


FAILURES = []


def alternate(reps, contenders, workload="", skip_after=None):
    """Runs each contender's measurement once per round, rotating the order each round: A B C, B C A, ...
    Returns {name: [samples]}. A contender whose measurement raises is dropped with its error recorded (and
    reported as FAILED); one whose sample satisfies `skip_after` is not measured again."""
    names = list(contenders)
    out = {n: [] for n in names}
    errors = {}
    for i in range(reps):
        order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            if n in errors:
                continue
            try:
                v = contenders[n]()
                out[n].append(v)
                if skip_after and skip_after(v):
                    errors[n] = "skipped"
            except Exception as e:
                errors[n] = f"{type(e).__name__}: {e}"
                FAILURES.append((f"{workload} {n}", errors[n]))
                print(f"  {workload} {n}: FAILED: {errors[n]}", flush=True)
    return out, errors


def markdown(res, args, reps, elapsed):
    lines = [f"Measured {time.strftime('%Y-%m-%d %H:%M')} with `scripts/bench{' --quick' if args.quick else ''}` "
             f"on {os.cpu_count()} cores ({reps} runs each, medians, alternated; {elapsed:.0f} s in all).",
             "Ratio = ubiquityfs ÷ baseline: for MB/s higher is better, for times lower is better.", "",
             "| workload | measurement | ubiquityfs | baseline | baseline figure | ratio | goal | met |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res.rows:
        if r["metric"] == "FAILED":
            why = " ".join(str(r["goal"]).split()).replace("|", "/")
            lines.append(f"| {r['workload']} | FAILED: {why} | | | | | | no |")
            continue
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        met = "" if r["goal"] is None else ("yes" if r["goal_ok"] else "no")
        lines.append(f"| {r['workload']} | {r['metric']} | {fnum(r['ubq'], r['unit'])} | {r['base_name'] or ''} | "
                     f"{fnum(r['base'], r['unit']) if r['base_name'] else ''} | {ratio} | {r['goal'] or ''} | {met} |")
    if res.notes:
        lines.append("")
        lines += [f"- {n}" for n in res.notes]
    return "\n".join(lines) + "\n"


def plot(throughput, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"bench: no plot ({e})")
        return
    series = ["ubiquityfs", "direct", "rclone", "curl"]
    colors = {"ubiquityfs": "#1f77b4", "direct": "#7f7f7f", "rclone": "#ff7f0e", "curl": "#2ca02c"}
    labels = [t[0] for t in throughput]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels)), 4.5))
    width = 0.2
    for i, s in enumerate(series):
        xs, ys = [], []
        for j, (_, vals) in enumerate(throughput):
            if vals.get(s) is not None:
                xs.append(j + (i - 1.5) * width)
                ys.append(vals[s])
        if xs:
            bars = ax.bar(xs, ys, width, label=s, color=colors[s])
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("MB/s (median)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"bench: plot in {path}")
