"""A job's table of cells, three ways: jobs.json for scripts, jobs.md for a pull request or a
README, jobs.html a static page that sorts by any column and filters as you type (no server,
no script from elsewhere)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from edgeserve.atomic import write_json, write_text

TABLE_NAME = "jobs.json"
COLUMNS = (("model", "model"), ("target", "target"), ("status", "status"), ("bytes", "size (bytes)"),
           ("sqnr_db", "SQNR (dB)"), ("top1_agreement", "top-1 agreement"), ("seconds", "time (s)"),
           ("node", "node"), ("cached", "cached"), ("error", "error"))


def columns(table: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The table's columns: the cell's, then one per board the job benched on."""
    return COLUMNS[:-1] + tuple((f"bench:{b}", f"p50 ms, peak MiB, mJ on {b}") for b in table.get("boards") or ()) \
        + COLUMNS[-1:]


def cell_text(row: dict[str, Any], key: str) -> str:
    if key.startswith("bench:"):
        found = (row.get("bench") or {}).get(key.removeprefix("bench:"))
        if not found:
            return ""
        if found.get("p50_ms") is None:
            return "error: " + str(found.get("error"))
        peak = found.get("peak_memory_bytes")  # absent from a bench before 0.3.1, or None where not measured
        energy = found.get("mj_per_inference")  # absent before 0.3.3, None without a power sensor
        parts = [f"{found['p50_ms']:.3f}"]
        if peak is not None or energy is not None:
            parts.append(f"{peak / 2**20:.1f}" if peak is not None else "-")
        if energy is not None:
            parts.append(f"{energy:.3f} mJ")
        slowest = ((found.get("operators") or {}).get("by_op") or [None])[0]  # bench_operators = true (0.3.4)
        if slowest:
            parts.append(f"slowest {slowest['op']} {100 * slowest['share']:.0f} %")
        return ", ".join(parts)
    value = row.get(key)
    if value is None:
        return ""
    if key == "sqnr_db":
        return f"{value:.1f}"
    if key == "top1_agreement":
        return f"{value:.3f}"
    if key == "bytes":
        return f"{value:,}"
    if key == "cached":
        return "yes" if value else ""
    return str(value)


def markdown(table: dict[str, Any]) -> str:
    shown = columns(table)
    head = "| " + " | ".join(title for _, title in shown) + " |\n|" + "---|" * len(shown) + "\n"
    rows = "".join("| " + " | ".join(cell_text(r, k).replace("|", "\\|").replace("\n", " ") for k, _ in shown)
                   + " |\n" for r in table["cells"])
    counts = _counts(table)
    return f"# {table['job']}\n\n{counts}\n\n{head}{rows}"


def _counts(table: dict[str, Any]) -> str:
    statuses: dict[str, int] = {}
    for row in table["cells"]:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return f"{len(table['cells'])} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))


def page(table: dict[str, Any]) -> str:
    shown = columns(table)
    head = "".join(f"<th data-k='{i}'>{html.escape(title)}</th>" for i, (_, title) in enumerate(shown))
    body = "".join("<tr class='{}'>".format(html.escape(r["status"].replace(" ", "-")))
                   + "".join(f"<td>{html.escape(cell_text(r, k))}</td>" for k, _ in shown) + "</tr>\n"
                   for r in table["cells"])
    return f"""<!doctype html>
<meta charset="utf-8"><title>{html.escape(table['job'])}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} th, td {{ padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: left; }}
th {{ cursor: pointer; background: #f4f4f4; }} tr.ok td:nth-child(3) {{ color: #176f2c; }}
tr.failed td:nth-child(3), tr.error td:nth-child(3), tr.crashed td:nth-child(3), tr.timeout td:nth-child(3) {{ color: #b3261e; }}
</style>
<h1>{html.escape(table['job'])}</h1>
<p>{html.escape(_counts(table))}</p>
<p><input id="filter" placeholder="filter rows" size="40"></p>
<table><thead><tr>{head}</tr></thead><tbody>
{body}</tbody></table>
<script>
const tbody = document.querySelector("tbody");
document.getElementById("filter").addEventListener("input", e => {{
  const q = e.target.value.toLowerCase();
  for (const tr of tbody.rows) tr.hidden = !tr.textContent.toLowerCase().includes(q);
}});
let order = 1;
for (const th of document.querySelectorAll("th")) th.addEventListener("click", () => {{
  const k = +th.dataset.k; order = -order;
  const key = tr => {{ const t = tr.cells[k].textContent.replace(/,/g, ""); return t !== "" && !isNaN(t) ? +t : t; }};
  [...tbody.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * order)
    .forEach(tr => tbody.appendChild(tr));
}});
</script>
"""


def write_tables(out: Path, table: dict[str, Any]) -> None:
    """jobs.json, jobs.md and jobs.html in ``out``, each written whole or not at all."""
    write_json(out / TABLE_NAME, table)
    write_text(out / "jobs.md", markdown(table))
    write_text(out / "jobs.html", page(table))


def read_table(out: Path) -> dict[str, Any]:
    return json.loads((out / TABLE_NAME).read_text())
