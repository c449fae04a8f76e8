"""`python -m bench locomo-rescore DUMP.jsonl`: score a `--dump-prompts` file again, from scratch.

A second, deliberately independent scorer (it imports nothing from the harness) written from
the rules of bench-data/REFERENCE.md, so anyone can check a run's headline figures from its
prompt dump:
- evidence recall (categories 1–5): the share of a question's evidence turns whose line
  `<speaker>: <text>[ [shares a photo: <caption>]]` occurs in the forwarded context (every
  message but the last, the question), both NFKC-normalised with whitespace collapsed;
- answer containment (categories 1–4): the whole normalised answer (NFKC, lowercase,
  punctuation and symbols to spaces, articles a/an/the dropped, spaces collapsed, no space
  between two CJK characters) is a substring of the normalised context; only questions whose
  answer is a substring of the normalised whole conversation (`[<session date>] <line>` per
  turn) count.
- prefix reuse of the replayed requests (the dump's lines without a question): the share of
  each request's tokens (cl100k, each message rendered `<|im_start|>role\ncontent<|im_end|>\n`)
  equal to a prefix of the previous request's in the same conversation, averaged.
Prints one line per (strategy, mode, budget) with the figures and their counts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "bench-data" / "locomo-dev.json"
_ID = re.compile(r"D(\d+):0*(\d+)")
_SESSION = re.compile(r"session_\d+")
_CJK_GAP = re.compile(r"(?<=[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]) "
                      r"(?=[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff])")


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def normalise(text: object) -> str:
    folded = unicodedata.normalize("NFKC", str(text)).lower()
    spaced = "".join(" " if unicodedata.category(c)[0] in "PSZC" else c for c in folded)
    return _CJK_GAP.sub("", " ".join(w for w in spaced.split() if w not in ("a", "an", "the")))


class Sample:
    def __init__(self, item: dict[str, Any]):
        conversation = item["conversation"]
        self.qa = item.get("qa") or []
        self.lines: dict[str, str] = {}
        dated = []
        for key, turns in conversation.items():
            if not (_SESSION.fullmatch(key) and isinstance(turns, list)):
                continue
            date = conversation.get(f"{key}_date_time", "")
            for turn in turns:
                match = _ID.fullmatch(str(turn["dia_id"]).strip())
                caption = turn.get("blip_caption")
                photo = f" [shares a photo: {caption}]" if caption else ""
                line = collapse(f"{turn['speaker']}: {turn.get('text', '')}{photo}")
                if match:
                    self.lines[f"D{int(match[1])}:{int(match[2])}"] = line
                dated.append(f"[{date}] {line}")
        self.history = normalise(" ".join(dated))

    def evidence(self, qa: dict[str, Any]) -> list[str]:
        ids: list[str] = []
        for ref in qa.get("evidence") or []:
            for part in re.split(r"[;,\s]+", str(ref)):
                match = _ID.fullmatch(part)
                if match and (i := f"D{int(match[1])}:{int(match[2])}") in self.lines \
                        and i not in ids:
                    ids.append(i)
        return ids


def first_sessions(item: dict[str, Any], count: int) -> dict[str, Any]:
    """`item` with only its first `count` sessions that have turns (by session number)."""
    conversation = item["conversation"]
    numbered = sorted((int(key.split("_")[1]), key) for key, turns in conversation.items()
                      if _SESSION.fullmatch(key) and turns)
    dropped = {key for _, key in numbered[count:]}
    kept = {key: value for key, value in conversation.items()
            if key not in dropped and key.removesuffix("_date_time") not in dropped}
    return {**item, "conversation": kept}


def chained(data: list[dict[str, Any]], times: int) -> dict[str, Any]:
    """The file's items as the one long history `bench locomo --chain K` replays, built here
    from the raw file: every `session_<n>` key of each item in order, renumbered one after
    another, every turn's speaker and text as the file has them, `times` over; the last pass's
    questions, their evidence ids moved to that pass's sessions."""
    first = data[0]["conversation"]
    conversation: dict[str, Any] = {"speaker_a": first["speaker_a"],
                                    "speaker_b": first["speaker_b"]}
    qa: list[dict[str, Any]] = []
    number = 0
    for n in range(times):
        for item in data:
            raw = item["conversation"]
            moved: dict[int, int] = {}
            for old in sorted(int(k[8:]) for k in raw if _SESSION.fullmatch(k)):
                number += 1
                moved[old] = number
                date = raw.get(f"session_{old}_date_time", "")
                conversation[f"session_{number}_date_time"] = date
                conversation[f"session_{number}"] = [
                    {**t, "dia_id": f"D{number}:{str(t['dia_id']).split(':', 1)[1]}"}
                    for t in raw[f"session_{old}"] or []]
            if n < times - 1:
                continue
            for q in item.get("qa") or []:
                refs = [m for ref in q.get("evidence") or []
                        for m in _ID.finditer(str(ref)) if int(m[1]) in moved]
                qa.append({**q, "evidence": [f"D{moved[int(m[1])]}:{int(m[2])}" for m in refs]})
    ids = "+".join(str(item["sample_id"]) for item in data)
    return {"sample_id": f"chain{times}-{ids}", "conversation": conversation, "qa": qa}


def rescore(data: Iterable[dict[str, Any]], dump: Iterable[str]) -> dict[tuple, dict[str, Any]]:
    samples = {str(item["sample_id"]): Sample(item) for item in data}
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0, 0.0, 0])
    replayed: dict[tuple, list[tuple[int, list[dict[str, Any]]]]] = defaultdict(list)
    for raw in dump:
        probe = json.loads(raw)
        if "null" in probe:  # a null probe: nothing to score
            continue
        if probe["qa"] is None:  # a replayed request
            replayed[(probe["strategy"], probe["mode"], probe["budget"], probe["conversation"],
                      probe["thread"])].append((probe["turn"], probe["messages"]))
            continue
        sample = samples[str(probe["conversation"])]
        qa = sample.qa[probe["qa"]]
        context = collapse("\n".join(m["content"] for m in probe["messages"][:-1]
                                     if isinstance(m.get("content"), str)))
        acc = sums[(probe["strategy"], probe["mode"], probe["budget"])]
        if evidence := sample.evidence(qa):
            acc[0] += sum(sample.lines[i] in context for i in evidence) / len(evidence)
            acc[1] += 1
        answer = normalise(qa["answer"]) if qa.get("answer") is not None else ""
        if int(qa["category"]) in (1, 2, 3, 4) and answer and answer in sample.history:
            acc[2] += answer in normalise(context)
            acc[3] += 1
    scores: dict[tuple, dict[str, Any]] = {
        key: {"evidence_recall": e / n if n else None, "n_evidence": n,
              "answer_containment": c / m if m else None, "n_eligible": m}
        for key, (e, n, c, m) in sums.items()}
    reuse: dict[tuple, list[float]] = defaultdict(list)
    rendered: dict[tuple[str, str], list[int]] = {}
    for (strategy, mode, budget, _, _), requests in replayed.items():
        requests.sort(key=lambda r: r[0])
        for (_, before), (_, after) in zip(requests, requests[1:]):
            reuse[(strategy, mode, budget)].append(prefix_reuse(before, after, rendered))
    for key, values in reuse.items():
        scores.setdefault(key, {"evidence_recall": None, "n_evidence": 0,
                                "answer_containment": None, "n_eligible": 0})
        scores[key].update(prefix_reuse=sum(values) / len(values), n_pairs=len(values))
    return scores


def cost_lines(dump: Iterable[str], name: str) -> Iterable[str]:
    """The lines of a `gateway bench cost` dump (`{data, conversation, thread, turn, assembly,
    budget, probe, messages}`) of data set `name`, in this scorer's shape (the assembly as the
    strategy, the data set as the mode)."""
    for raw in dump:
        line = json.loads(raw)
        if line["data"] != name:
            continue
        probe = line["probe"]
        out = {"conversation": line["conversation"], "qa": None if probe in (None, "null")
               else probe, "strategy": line["assembly"], "mode": name,
               "budget": line["budget"], "messages": line["messages"]}
        if probe == "null":
            out["null"] = True
        elif probe is None:
            out.update(thread=line["thread"] or line["conversation"], turn=line["turn"])
        yield json.dumps(out)


def prefix_reuse(before: list[dict[str, Any]], after: list[dict[str, Any]],
                 rendered: dict[tuple[str, str], list[int]] | None = None) -> float:
    """The share of `after`'s tokens equal to a prefix of `before`'s (`rendered`: a cache of
    each message's tokens)."""
    import tiktoken

    import gateway  # noqa: F401 — only its offline tiktoken cache (gateway/_offline.py)

    encoding = tiktoken.get_encoding("cl100k_base")
    cache = {} if rendered is None else rendered

    def tokens(messages: list[dict[str, Any]]) -> list[int]:
        out: list[int] = []
        for m in messages:
            key = (m["role"], _text(m.get("content")))
            if key not in cache:
                cache[key] = encoding.encode_ordinary(
                    f"<|im_start|>{key[0]}\n{key[1]}<|im_end|>\n")
            out.extend(cache[key])
        return out

    a, b = tokens(before), tokens(after)
    shared = 0
    for x, y in zip(a, b):
        if x != y:
            break
        shared += 1
    return shared / len(b) if b else 0.0


def _text(content: Any) -> str:
    return content if isinstance(content, str) else repr(content)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench locomo-rescore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path, help="a file written by `bench locomo --dump-prompts`")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--chain", type=int, default=0, metavar="K",
                        help="the dump is of a `bench locomo --chain K` run: its one long "
                             "history is built from --data here")
    parser.add_argument("--cost-data", default=None, metavar="NAME",
                        help="the dump is of `gateway bench cost --dump-prompts`: score its "
                             "lines of data set NAME (long-100k: --chain 1, long-300k: "
                             "--chain 3; user-5-conversations: --first-sessions 6)")
    parser.add_argument("--first-sessions", type=int, default=0, metavar="N",
                        help="each conversation cut to its first N sessions with turns (the "
                             "cost dump's user-5-conversations: 6), so an answer counts as "
                             "findable only if those sessions hold it")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with open(args.data, encoding="utf-8") as f:
        data = json.load(f)
    if args.first_sessions > 0:
        data = [first_sessions(item, args.first_sessions) for item in data]
    if args.chain > 0:
        data = [chained(data, args.chain)]
    with open(args.dump, encoding="utf-8") as f:
        lines = f if args.cost_data is None else cost_lines(f, args.cost_data)
        scores = rescore(data, lines)
    for (strategy, mode, budget), s in sorted(scores.items(), key=str):
        er, ac = s["evidence_recall"], s["answer_containment"]
        reuse = f"  prefix reuse {s['prefix_reuse']:.4f} (pairs={s['n_pairs']})" \
            if "prefix_reuse" in s else ""
        print(f"{strategy:9} {mode or '-':9} {budget or '-':>6}  evidence recall "
              f"{'-' if er is None else f'{er:.4f}'} (n={s['n_evidence']})  answer containment "
              f"{'-' if ac is None else f'{ac:.4f}'} (n={s['n_eligible']}){reuse}")
    return 0
